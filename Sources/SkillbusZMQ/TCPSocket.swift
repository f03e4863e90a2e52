#if canImport(Glibc)
    import Glibc
#endif

/// The plain-socket parts the bus's own ROUTER and DEALER (`ZMTPRouter`, `ZMTPDealer`) and the operator HTTP
/// endpoint share: a host read from text (IPv4 for the HTTP endpoint; IPv4, IPv6 or a name for the bus), a
/// non-blocking listening socket and the connections waiting on it, a non-blocking outgoing connection.
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

    // MARK: - Any address family: the bus's own ROUTER and DEALER

    /// An IPv4 or IPv6 address and port, as the kernel takes it.
    public struct Address: @unchecked Sendable, CustomStringConvertible {
        // sockaddr_storage is a plain C struct of bytes: safe to copy between threads.
        var storage = sockaddr_storage()
        var length: socklen_t = 0

        var family: Int32 { Int32(storage.ss_family) }

        /// "127.0.0.1:5555" or "[::1]:5555".
        public var description: String {
            let (host, port) = TCPSocket.text(of: storage)
            return family == AF_INET6 ? "[\(host)]:\(port)" : "\(host):\(port)"
        }
    }

    /// `tcp://HOST:PORT` taken apart, HOST without an IPv6 address's brackets; nil for another transport or
    /// no port. HOST may be `*`, an IPv4 or IPv6 address, or a name.
    public static func hostAndPort(_ endpoint: String) -> (host: String, port: String)? {
        guard endpoint.hasPrefix("tcp://") else { return nil }
        let rest = endpoint.dropFirst(6)
        guard let colon = rest.lastIndex(of: ":") else { return nil }
        var host = rest[..<colon]
        let port = rest[rest.index(after: colon)...]
        if host.hasPrefix("["), host.hasSuffix("]") { host = host.dropFirst().dropLast() }
        guard !host.isEmpty, !port.isEmpty else { return nil }
        return (String(host), String(port))
    }

    /// The addresses of `host` for `port`, IPv4 ones first (as libzmq, which speaks IPv6 only when asked):
    /// `*` is every IPv4 interface; an address is itself; a name is looked up (getaddrinfo, which may block).
    /// On failure, getaddrinfo's words.
    public static func resolve(host: String, port: UInt16) -> Result<[Address], ResolveFailure> {
        var hints = addrinfo()
        hints.ai_family = AF_UNSPEC
        hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
        var list: UnsafeMutablePointer<addrinfo>?
        let rc = getaddrinfo(host == "*" ? "0.0.0.0" : host, String(port), &hints, &list)
        guard rc == 0, let first = list else {
            return .failure(ResolveFailure(host: host, reason: String(cString: gai_strerror(rc))))
        }
        defer { freeaddrinfo(first) }
        var addresses: [Address] = []
        var entry: UnsafeMutablePointer<addrinfo>? = first
        while let current = entry {
            let info = current.pointee
            if (info.ai_family == AF_INET || info.ai_family == AF_INET6), let source = info.ai_addr {
                var address = Address()
                address.length = info.ai_addrlen
                withUnsafeMutableBytes(of: &address.storage) { target in
                    target.copyMemory(from: UnsafeRawBufferPointer(start: source, count: Int(info.ai_addrlen)))
                }
                addresses.append(address)
            }
            entry = info.ai_next
        }
        addresses.sort { $0.family == AF_INET && $1.family != AF_INET }
        guard !addresses.isEmpty else { return .failure(ResolveFailure(host: host, reason: "no IPv4 or IPv6 address")) }
        return .success(addresses)
    }

    public struct ResolveFailure: Error, CustomStringConvertible {
        public let host: String
        public let reason: String
        public var description: String { "cannot resolve '\(host)': \(reason)" }
    }

    /// A non-blocking, close-on-exec socket listening on `address` (port 0: one the kernel picks), and the
    /// address it got; or the call that failed, with errno set by it.
    public static func listen(on address: Address, backlog: Int32) -> Result<(fd: Int32, address: Address), Failure> {
        let fd = socket(address.family, streamFlags, 0)
        guard fd >= 0 else { return .failure(Failure(call: "socket", errno: errno)) }
        var yes: Int32 = 1
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, socklen_t(MemoryLayout<Int32>.size))
        var bound = address
        let failedCall = withUnsafeMutablePointer(to: &bound.storage) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { pointer -> String? in
                if bind(fd, pointer, address.length) != 0 { return "bind" }
                if Glibc.listen(fd, backlog) != 0 { return "listen" }
                var length = socklen_t(MemoryLayout<sockaddr_storage>.size)
                defer { bound.length = length }
                return getsockname(fd, pointer, &length) == 0 ? nil : "getsockname"
            }
        }
        if let failedCall {
            let failure = Failure(call: failedCall, errno: errno)
            close(fd)
            return .failure(failure)
        }
        return .success((fd, bound))
    }

    /// A non-blocking, close-on-exec socket connecting to `address`, with Nagle's delay off; the connection
    /// completes (or fails: SO_ERROR says) when the descriptor becomes writable.
    public static func connect(to address: Address) -> Result<Int32, Failure> {
        let fd = socket(address.family, streamFlags, 0)
        guard fd >= 0 else { return .failure(Failure(call: "socket", errno: errno)) }
        noDelay(fd)
        var target = address
        let rc = withUnsafePointer(to: &target.storage) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { Glibc.connect(fd, $0, address.length) }
        }
        guard rc == 0 || errno == EINPROGRESS else {
            let failure = Failure(call: "connect", errno: errno)
            close(fd)
            return .failure(failure)
        }
        return .success(fd)
    }

    /// A non-blocking, close-on-exec stream socket.
    private static let streamFlags = Int32(SOCK_STREAM.rawValue) | Int32(SOCK_NONBLOCK.rawValue | SOCK_CLOEXEC.rawValue)

    /// The host (as text) and port of an IPv4 or IPv6 socket address; ("", 0) for another family.
    static func text(of storage: sockaddr_storage) -> (host: String, port: UInt16) {
        var storage = storage
        var text = [CChar](repeating: 0, count: Int(INET6_ADDRSTRLEN))
        let port = withUnsafeMutableBytes(of: &storage) { raw -> UInt16? in
            switch Int32(raw.load(as: sockaddr_storage.self).ss_family) {
            case AF_INET:
                var address = raw.load(as: sockaddr_in.self)
                guard inet_ntop(AF_INET, &address.sin_addr, &text, socklen_t(text.count)) != nil else { return nil }
                return UInt16(bigEndian: address.sin_port)
            case AF_INET6:
                var address = raw.load(as: sockaddr_in6.self)
                guard inet_ntop(AF_INET6, &address.sin6_addr, &text, socklen_t(text.count)) != nil else { return nil }
                return UInt16(bigEndian: address.sin6_port)
            default: return nil
            }
        }
        guard let port else { return ("", 0) }
        return (String(decoding: text.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self), port)
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
            -> (host: String, port: UInt16)?
        {
            var storage = sockaddr_storage()
            var length = socklen_t(MemoryLayout<sockaddr_storage>.size)
            let rc = withUnsafeMutablePointer(to: &storage) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { call(fd, $0, &length) }
            }
            return rc == 0 ? text(of: storage) : nil
        }
        guard let local = address(getsockname), let peer = address(getpeername) else { return false }
        return local == peer
    }

    /// The address of a connected socket's peer as text ("192.0.2.7", "::1"); "" when it has none.
    public static func peerAddress(_ fd: Int32) -> String {
        var storage = sockaddr_storage()
        var length = socklen_t(MemoryLayout<sockaddr_storage>.size)
        let rc = withUnsafeMutablePointer(to: &storage) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getpeername(fd, $0, &length) }
        }
        return rc == 0 ? text(of: storage).host : ""
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
