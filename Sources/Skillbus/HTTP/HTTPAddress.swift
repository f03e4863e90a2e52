import SkillbusZMQ

#if canImport(Glibc)
    import Glibc
#endif

/// Where the operator HTTP endpoint listens: `HOST:PORT` with an IPv4 address or `localhost` (port 0 takes
/// a free one).
public struct HTTPAddress: Sendable, Equatable, CustomStringConvertible {
    public var host: String
    public var port: UInt16

    public init(host: String, port: UInt16) {
        self.host = host
        self.port = port
    }

    /// Reads `127.0.0.1:8080`; the error names what is wrong with `text`.
    public init(parsing text: String) throws(SkillbusError) {
        guard let colon = text.lastIndex(of: ":") else {
            throw SkillbusError(.invalidConfiguration, "HTTP endpoint '\(text)' is not HOST:PORT (e.g. 127.0.0.1:8080)")
        }
        let host = String(text[..<colon])
        guard let port = UInt16(text[text.index(after: colon)...]) else {
            throw SkillbusError(
                .invalidConfiguration, "HTTP endpoint '\(text)': the port must be a number from 0 to 65535")
        }
        guard host != "*", TCPSocket.ipv4(host) != nil else {
            throw SkillbusError(
                .invalidConfiguration,
                "HTTP endpoint '\(text)': the host must be an IPv4 address (such as 127.0.0.1 or 0.0.0.0) or localhost")
        }
        self.init(host: host, port: port)
    }

    public var description: String { "\(host):\(port)" }

    /// Whether only this machine can reach it.
    public var isLoopback: Bool { host == "localhost" || host.hasPrefix("127.") }

    /// The address in network byte order.
    var inAddr: in_addr? { host == "*" ? nil : TCPSocket.ipv4(host) }
}
