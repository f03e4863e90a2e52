#if canImport(Glibc)
    import Glibc
#endif

/// The plain-socket parts the bus's own ROUTER and DEALER (`ZMTPRouter`, `ZMTPDealer`) and the operator HTTP
/// endpoint share: an IPv4 host read from text, a non-blocking listening socket and the connections waiting
/// on it, a non-blocking outgoing connection.
public enum TCPSocket {
    /// `host` as an IPv4 address: a dotted address, `localhost` (127.0.0.1), or `*` (every interface).
    public static func ipv4(_ host: String) -> in_addr? {
        switch host {
        case "*": return in_addr(s_addr: INADDR_ANY)
        case "localhost": return ipv4("127.0.0.1")
        default:
            var address = in_addr()
            return inet_pton(AF_INET, host, &address) == 1 ? address : nil
        }
    }

    /// `tcp://HOST:PORT` taken apart: HOST as text and as an IPv4 address (`ipv4`), PORT as text; nil for
    /// another transport or a host that is no IPv4 address.
    public static func split(_ endpoint: String) -> (hostText: Substring, host: in_addr, port: Substring)? {
        guard endpoint.hasPrefix("tcp://") else { return nil }
        let rest = endpoint.dropFirst(6)
        guard let colon = rest.lastIndex(of: ":"), let host = ipv4(String(rest[..<colon])) else { return nil }
        return (rest[..<colon], host, rest[rest.index(after: colon)...])
    }

    /// A non-blocking, close-on-exec socket listening on `address`:`port` (0: a port the kernel picks), and
    /// the port it got; or the call that failed, with errno set by it.
    public static func listen(
        on address: in_addr, port: UInt16, backlog: Int32
    ) -> Result<(fd: Int32, port: UInt16), Failure> {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_NONBLOCK.rawValue | SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { return .failure(Failure(call: "socket", errno: errno)) }
        var yes: Int32 = 1
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, socklen_t(MemoryLayout<Int32>.size))
        var socketAddress = sockaddr_in()
        socketAddress.sin_family = sa_family_t(AF_INET)
        socketAddress.sin_port = port.bigEndian
        socketAddress.sin_addr = address
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let failedCall = withUnsafeMutablePointer(to: &socketAddress) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { pointer -> String? in
                if bind(fd, pointer, length) != 0 { return "bind" }
                if Glibc.listen(fd, backlog) != 0 { return "listen" }
                return getsockname(fd, pointer, &length) == 0 ? nil : "getsockname"
            }
        }
        if let failedCall {
            let failure = Failure(call: failedCall, errno: errno)
            close(fd)
            return .failure(failure)
        }
        return .success((fd, UInt16(bigEndian: socketAddress.sin_port)))
    }

    /// The next connection waiting on `listener`, non-blocking and close-on-exec; nil when none waits.
    public static func accept(_ listener: Int32) -> Int32? {
        let fd = Glibc.accept(listener, nil, nil)
        guard fd >= 0 else { return nil }
        _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK)
        _ = fcntl(fd, F_SETFD, FD_CLOEXEC)
        return fd
    }

    /// A non-blocking, close-on-exec socket connecting to `address`:`port`, with Nagle's delay off; the
    /// connection completes (or fails: SO_ERROR says) when the descriptor becomes writable.
    public static func connect(to address: in_addr, port: UInt16) -> Result<Int32, Failure> {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_NONBLOCK.rawValue | SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { return .failure(Failure(call: "socket", errno: errno)) }
        noDelay(fd)
        var socketAddress = sockaddr_in()
        socketAddress.sin_family = sa_family_t(AF_INET)
        socketAddress.sin_port = port.bigEndian
        socketAddress.sin_addr = address
        let rc = withUnsafePointer(to: &socketAddress) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                Glibc.connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
            }
        }
        guard rc == 0 || errno == EINPROGRESS else {
            let failure = Failure(call: "connect", errno: errno)
            close(fd)
            return .failure(failure)
        }
        return .success(fd)
    }

    /// The error a non-blocking connect ended with (0: connected).
    public static func pendingError(_ fd: Int32) -> Int32 {
        var error: Int32 = 0
        var length = socklen_t(MemoryLayout<Int32>.size)
        return getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &length) == 0 ? error : errno
    }

    /// Whether a connected socket is connected to itself: a connect to a local port in the ephemeral range
    /// that nobody listens on can be given that same port as its own, and then the kernel joins the socket
    /// to itself ("simultaneous open"). It must be closed, or it holds the port its server wants back.
    public static func isConnectedToItself(_ fd: Int32) -> Bool {
        func address(_ call: (Int32, UnsafeMutablePointer<sockaddr>, UnsafeMutablePointer<socklen_t>) -> Int32)
            -> sockaddr_in?
        {
            var address = sockaddr_in()
            var length = socklen_t(MemoryLayout<sockaddr_in>.size)
            let rc = withUnsafeMutablePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { call(fd, $0, &length) }
            }
            return rc == 0 ? address : nil
        }
        guard let local = address(getsockname), let peer = address(getpeername) else { return false }
        return local.sin_port == peer.sin_port && local.sin_addr.s_addr == peer.sin_addr.s_addr
    }

    /// The address of a connected socket's peer as text ("192.0.2.7", "::1"); "" when it has none.
    public static func peerAddress(_ fd: Int32) -> String {
        var storage = sockaddr_storage()
        var length = socklen_t(MemoryLayout<sockaddr_storage>.size)
        let rc = withUnsafeMutablePointer(to: &storage) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getpeername(fd, $0, &length) }
        }
        guard rc == 0 else { return "" }
        var text = [CChar](repeating: 0, count: Int(INET6_ADDRSTRLEN))
        let family = Int32(storage.ss_family)
        let converted = withUnsafePointer(to: &storage) { pointer -> Bool in
            pointer.withMemoryRebound(to: UInt8.self, capacity: MemoryLayout<sockaddr_storage>.size) { raw in
                if family == AF_INET {
                    return raw.withMemoryRebound(to: sockaddr_in.self, capacity: 1) { address in
                        var host = address.pointee.sin_addr
                        return inet_ntop(AF_INET, &host, &text, socklen_t(text.count)) != nil
                    }
                } else if family == AF_INET6 {
                    return raw.withMemoryRebound(to: sockaddr_in6.self, capacity: 1) { address in
                        var host = address.pointee.sin6_addr
                        return inet_ntop(AF_INET6, &host, &text, socklen_t(text.count)) != nil
                    }
                }
                return false
            }
        }
        guard converted else { return "" }
        return String(decoding: text.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    /// Small messages go out at once rather than wait to be coalesced (what ZeroMQ sets on every TCP socket).
    public static func noDelay(_ fd: Int32) {
        var one: Int32 = 1
        setsockopt(fd, Int32(IPPROTO_TCP), TCP_NODELAY, &one, socklen_t(MemoryLayout<Int32>.size))
    }

    public struct Failure: Error {
        public let call: String
        public let errno: Int32
    }
}
