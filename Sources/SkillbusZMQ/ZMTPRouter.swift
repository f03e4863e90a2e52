import CZeroMQ

#if canImport(Glibc)
    import Glibc
#endif

/// A ROUTER socket for TCP peers that speaks ZMTP 3 itself (the NULL mechanism: no keys), on the thread
/// that owns it, with no libzmq I/O thread. Peers are ordinary ZeroMQ DEALER (or REQ) sockets.
///
/// Why: with libzmq every message crosses from its I/O thread to the owning one and back, each crossing a
/// wake-up through a mailbox; for the bus that was more than half of the coordinator's CPU per request
/// (`Tests/perf/zmtp-proxy.c` measured the same proxy at 2 µs a request this way against 6 with libzmq).
/// Here one `epoll` set holds the listening socket and every connection; reads, parsing and writes happen
/// when the owner asks (`receive`, `flush`), and what a batch of work sends to a peer goes out in one write.
///
/// What it does as libzmq's ROUTER does: 5-byte routing ids (a zero byte, then a number), or the Identity a
/// peer asks for when no other peer has it; a frame above `maxFrameBytes` closes its connection (as
/// ZMQ_MAXMSGSIZE); sending to a routing id no connection has fails with EHOSTUNREACH (as
/// ZMQ_ROUTER_MANDATORY); PING is answered with PONG. A peer that breaks the protocol is disconnected.
public final class ZMTPRouter {
    public let lastEndpoint: String
    /// Readable when a peer connects, sends or can be written to again: poll it, then `receive`.
    public var pollDescriptor: Int32 { epoll }

    private let listener: Int32
    private let epoll: Int32
    private let maxFrameBytes: Int
    private var connections: [Int32: Connection] = [:]
    private var peers: [RoutingID: Int32] = [:]
    private var nextNumber = UInt32.random(in: 0...UInt32.max)
    private var inbox: [ReceivedMessage] = []
    private var inboxHead = 0
    private var unflushed: [Connection] = []
    private var closed: [Int32] = []
    /// What each read lands in before it is appended to its connection's input.
    private var scratch = [UInt8](repeating: 0, count: readChunk)
    /// What each `epoll_wait` reports into.
    private var events = [epoll_event](repeating: epoll_event(), count: 64)
    /// Bytes a connection may have waiting to be written before sends to it fail (as a full pipe).
    static let maxUnsentBytes = 64 << 20
    static let readChunk = 64 * 1024

    /// Whether this router can serve `endpoint`: `tcp://` with `*`, `localhost` or an IPv4 address, and a
    /// port or `*`. Anything else stays with libzmq.
    public static func serves(_ endpoint: String) -> Bool { (try? address(endpoint)) != nil }

    public init(bind endpoint: String, maxFrameBytes: Int) throws(ZMQError) {
        self.maxFrameBytes = maxFrameBytes
        let (host, port) = try Self.address(endpoint)
        let listener: Int32
        let boundPort: UInt16
        switch TCPListener.listen(on: host, port: port, backlog: 128) {
        case .success(let listening): (listener, boundPort) = listening
        case .failure(let failure): throw ZMQError(operation: "bind \(endpoint)", errno: failure.errno)
        }
        var text = [CChar](repeating: 0, count: 32)
        var boundHost = host
        inet_ntop(AF_INET, &boundHost, &text, socklen_t(text.count))
        let hostText = String(decoding: text.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
        lastEndpoint = "tcp://\(hostText):\(boundPort)"
        let epoll = epoll_create1(Int32(EPOLL_CLOEXEC))
        guard epoll >= 0 else {
            let error = ZMQError(operation: "epoll_create1", errno: errno)
            Glibc.close(listener)
            throw error
        }
        self.listener = listener
        self.epoll = epoll
        watch(listener, output: false, adding: true)
    }

    public func close() {
        for fd in connections.keys { Glibc.close(fd) }
        connections.removeAll()
        peers.removeAll()
        Glibc.close(listener)
        Glibc.close(epoll)
    }

    /// Messages read and parsed that `receive` has not handed out yet: while there are, there is input
    /// although the poll descriptor may not say so.
    public var hasBufferedMessages: Bool { inboxHead < inbox.count }

    /// The next whole message from any peer, within `limits` (as `ZMQSocket.receive` keeps frames: past a
    /// limit the rest is counted, not kept); nil when nothing more has arrived.
    public func receive(limits: ReceiveLimits) -> ReceivedMessage? {
        if inboxHead == inbox.count {
            inbox.removeAll(keepingCapacity: true)
            inboxHead = 0
            pump(limits: limits)
            if inbox.isEmpty { return nil }
        }
        inboxHead += 1
        return inbox[inboxHead - 1]
    }

    /// Queues a message for the peer with `routingID`; it goes out at the next `flush`.
    public func send(routingID: RoutingID, _ frames: Multipart) throws(ZMQError) {
        guard let fd = peers[routingID], let connection = connections[fd] else {
            throw ZMQError(operation: "send", errno: EHOSTUNREACH)
        }
        guard connection.output.count - connection.outputStart < Self.maxUnsentBytes else {
            throw ZMQError(operation: "send", errno: EAGAIN)
        }
        for (index, frame) in frames.enumerated() {
            connection.putFrame(frame, more: index < frames.count - 1)
        }
        if frames.isEmpty { connection.putFrame([], more: false) }
        markUnflushed(connection)
    }

    /// Writes what was queued, one write per peer; what a peer cannot take yet waits for it to drain.
    public func flush() {
        let pending = unflushed
        unflushed.removeAll(keepingCapacity: true)
        for connection in pending {
            connection.queued = false
            write(connection)
        }
    }

    /// The descriptors of connections closed since the last call (as a socket monitor reports them).
    public func takeClosedDescriptors() -> [Int32] {
        defer { closed.removeAll() }
        return closed
    }

    // MARK: - Events

    private func pump(limits: ReceiveLimits) {
        let ready = epoll_wait(epoll, &events, Int32(events.count), 0)
        guard ready > 0 else { return }
        for event in events[0..<Int(ready)] {
            let fd = event.data.fd
            if fd == listener {
                accept()
                continue
            }
            guard let connection = connections[fd] else { continue }
            if event.events & EPOLLOUT.rawValue != 0 {
                connection.waitingToWrite = false
                watch(fd, output: false)
                write(connection)
            }
            if event.events & (EPOLLIN.rawValue | EPOLLHUP.rawValue | EPOLLERR.rawValue) != 0,
                connections[fd] === connection
            {
                read(connection, limits: limits)
            }
        }
    }

    private func accept() {
        while let fd = TCPListener.accept(listener) {
            var one: Int32 = 1
            setsockopt(fd, Int32(IPPROTO_TCP), TCP_NODELAY, &one, socklen_t(MemoryLayout<Int32>.size))
            let connection = Connection(fd: fd)
            connections[fd] = connection
            watch(fd, output: false, adding: true)
            connection.output.append(contentsOf: ZMTP.greeting)
            connection.output.append(contentsOf: ZMTP.ready(socketType: "ROUTER"))
            markUnflushed(connection)
        }
    }

    private func read(_ connection: Connection, limits: ReceiveLimits) {
        let count = scratch.withUnsafeMutableBytes { Glibc.read(connection.fd, $0.baseAddress!, $0.count) }
        if count == 0 || (count < 0 && errno != EAGAIN && errno != EINTR) { return drop(connection) }
        if count < 0 { return }
        connection.compactInput()
        connection.input.append(contentsOf: scratch[0..<count])
        do throws(ZMTP.Violation) {
            try parse(connection, limits: limits)
        } catch {
            drop(connection)
        }
    }

    private func parse(_ connection: Connection, limits: ReceiveLimits) throws(ZMTP.Violation) {
        while true {
            switch connection.stage {
            case .greeting:
                guard let greeting = connection.take(ZMTP.greeting.count) else { return }
                try ZMTP.checkGreeting(greeting)
                connection.stage = .handshake
            case .handshake:
                guard let frame = try connection.takeFrame(maxBytes: maxFrameBytes) else { return }
                guard frame.command else { throw .init("a message before READY") }
                let ready = try ZMTP.readReady(frame.body)
                guard ZMTP.routerPeers.contains(ready.socketType) else { throw .init("a \(ready.socketType) peer") }
                let routingID: RoutingID
                if let identity = ready.identity, !identity.isEmpty, identity.first != 0 {
                    routingID = RoutingID(identity)
                    guard peers[routingID] == nil else { throw .init("an Identity another peer holds") }
                } else {
                    routingID = nextRoutingID()
                }
                connection.routingID = routingID
                peers[routingID] = connection.fd
                connection.stage = .open
            case .open:
                guard let message = try connection.takeMessage(maxFrameBytes: maxFrameBytes, limits: limits) else {
                    return
                }
                switch message {
                case .ping(let context):
                    connection.output.append(contentsOf: ZMTP.pong(context))
                    markUnflushed(connection)
                case .otherCommand:
                    break
                case .message(let frames, let frameCount, let byteCount, let overLimit):
                    inbox.append(
                        ReceivedMessage(
                            frames: frames, routingID: connection.routingID, userID: nil, sourceFD: connection.fd,
                            frameCount: frameCount, byteCount: byteCount, overLimit: overLimit))
                }
            }
        }
    }

    private func nextRoutingID() -> RoutingID {
        while true {
            nextNumber &+= 1
            let id = RoutingID([0] + withUnsafeBytes(of: nextNumber.bigEndian) { Array($0) })
            if peers[id] == nil { return id }
        }
    }

    private func write(_ connection: Connection) {
        // The same object: a closed connection's descriptor may already belong to a new one.
        guard connections[connection.fd] === connection, !connection.waitingToWrite else { return }
        while connection.outputStart < connection.output.count {
            // MSG_NOSIGNAL: a peer that already closed is an error here, not a SIGPIPE that ends the process.
            let written = connection.output.withUnsafeBytes { raw in
                Glibc.send(
                    connection.fd, raw.baseAddress! + connection.outputStart, raw.count - connection.outputStart,
                    Int32(MSG_NOSIGNAL))
            }
            if written > 0 {
                connection.outputStart += written
            } else if written < 0 && (errno == EAGAIN || errno == EINTR) {
                if errno == EAGAIN {
                    connection.waitingToWrite = true
                    watch(connection.fd, output: true)
                    return
                }
            } else {
                return drop(connection)
            }
        }
        connection.output.removeAll(keepingCapacity: true)
        connection.outputStart = 0
    }

    private func drop(_ connection: Connection) {
        guard connections[connection.fd] === connection else { return }
        connections[connection.fd] = nil
        if let id = connection.routingID, peers[id] == connection.fd { peers[id] = nil }
        epoll_ctl(epoll, EPOLL_CTL_DEL, connection.fd, nil)
        Glibc.close(connection.fd)
        closed.append(connection.fd)
    }

    private func markUnflushed(_ connection: Connection) {
        guard !connection.queued else { return }
        connection.queued = true
        unflushed.append(connection)
    }

    private func watch(_ fd: Int32, output: Bool, adding: Bool = false) {
        var event = epoll_event()
        event.events = EPOLLIN.rawValue | (output ? EPOLLOUT.rawValue : 0)
        event.data.fd = fd
        epoll_ctl(epoll, adding ? EPOLL_CTL_ADD : EPOLL_CTL_MOD, fd, &event)
    }

    /// The host and port of `tcp://HOST:PORT` (`*` for either: every interface, a port the kernel picks).
    private static func address(_ endpoint: String) throws(ZMQError) -> (host: in_addr, port: UInt16) {
        let invalid = ZMQError(operation: "bind \(endpoint)", errno: EINVAL)
        guard endpoint.hasPrefix("tcp://") else { throw invalid }
        let rest = endpoint.dropFirst(6)
        guard let colon = rest.lastIndex(of: ":"), let host = TCPListener.ipv4(String(rest[..<colon])) else {
            throw invalid
        }
        let portText = rest[rest.index(after: colon)...]
        guard let port = portText == "*" ? 0 : UInt16(portText) else { throw invalid }
        return (host, port)
    }
}

extension ZMTPRouter {
    /// One peer's TCP connection: where its handshake stands, what it sent that is not parsed yet, and what
    /// waits to be written to it.
    final class Connection {
        enum Stage { case greeting, handshake, open }

        let fd: Int32
        var stage = Stage.greeting
        var routingID: RoutingID?
        var input: [UInt8] = []
        var inputStart = 0
        var output: [UInt8] = []
        var outputStart = 0
        /// Listed among the connections to write at the next flush.
        var queued = false
        /// The kernel's buffer was full: the next write waits for EPOLLOUT.
        var waitingToWrite = false

        init(fd: Int32) { self.fd = fd }

        func compactInput() {
            guard inputStart > 0 else { return }
            input.removeFirst(inputStart)
            inputStart = 0
        }

        func take(_ count: Int) -> ArraySlice<UInt8>? {
            guard input.count - inputStart >= count else { return nil }
            defer { inputStart += count }
            return input[inputStart..<inputStart + count]
        }

        /// The frame at the start of the input, when all of it has arrived.
        func takeFrame(maxBytes: Int) throws(ZMTP.Violation) -> (command: Bool, more: Bool, body: ArraySlice<UInt8>)? {
            guard let (header, flags, size) = try frameHeader(at: inputStart, maxBytes: maxBytes),
                input.count - inputStart - header >= size
            else { return nil }
            let bodyStart = inputStart + header
            inputStart = bodyStart + size
            return (flags & ZMTP.commandFlag != 0, flags & ZMTP.moreFlag != 0, input[bodyStart..<bodyStart + size])
        }

        enum Received {
            case message(Multipart, frameCount: Int, byteCount: Int, overLimit: Bool)
            case ping(context: ArraySlice<UInt8>)
            case otherCommand
        }

        /// The whole message (or command) at the start of the input, when all of it has arrived.
        func takeMessage(maxFrameBytes: Int, limits: ReceiveLimits) throws(ZMTP.Violation) -> Received? {
            // First find where it ends, so that nothing is taken before all of it is there.
            var at = inputStart
            var frameCount = 0
            while true {
                guard let (header, flags, size) = try frameHeader(at: at, maxBytes: maxFrameBytes),
                    input.count - at - header >= size
                else { return nil }
                if flags & ZMTP.commandFlag != 0 {
                    guard frameCount == 0 else { throw .init("a command inside a message") }
                    let body = input[at + header..<at + header + size]
                    inputStart = at + header + size
                    return ZMTP.isPing(body) ? .ping(context: ZMTP.pingContext(body)) : .otherCommand
                }
                frameCount += 1
                at += header + size
                if flags & ZMTP.moreFlag == 0 { break }
            }
            var frames: Multipart = []
            frames.reserveCapacity(min(frameCount, limits.frames))
            var byteCount = 0
            var overLimit = false
            for number in 1...frameCount {
                let (header, _, size) = try frameHeader(at: inputStart, maxBytes: maxFrameBytes)!
                let bodyStart = inputStart + header
                byteCount += size
                if !overLimit, number > limits.frames || byteCount > limits.bytes { overLimit = true }
                if !overLimit { frames.append(Array(input[bodyStart..<bodyStart + size])) }
                inputStart = bodyStart + size
            }
            return .message(frames, frameCount: frameCount, byteCount: byteCount, overLimit: overLimit)
        }

        /// A frame header at `at`: its length, flags and body size; nil when it has not all arrived.
        private func frameHeader(at: Int, maxBytes: Int) throws(ZMTP.Violation) -> (Int, UInt8, Int)? {
            guard input.count - at >= 2 else { return nil }
            let flags = input[at]
            guard flags & ~(ZMTP.moreFlag | ZMTP.longFlag | ZMTP.commandFlag) == 0 else {
                throw .init("frame flags \(flags)")
            }
            var size: UInt64
            let header: Int
            if flags & ZMTP.longFlag != 0 {
                guard input.count - at >= 9 else { return nil }
                size = 0
                for index in 1...8 { size = size << 8 | UInt64(input[at + index]) }
                header = 9
            } else {
                size = UInt64(input[at + 1])
                header = 2
            }
            guard size <= UInt64(maxBytes) else { throw .init("a frame of \(size) bytes") }
            return (header, flags, Int(size))
        }

        func putFrame(_ body: [UInt8], more: Bool) {
            let long = body.count > 255
            output.append((more ? ZMTP.moreFlag : 0) | (long ? ZMTP.longFlag : 0))
            if long {
                withUnsafeBytes(of: UInt64(body.count).bigEndian) { output.append(contentsOf: $0) }
            } else {
                output.append(UInt8(body.count))
            }
            output.append(contentsOf: body)
        }
    }
}

/// The parts of ZMTP 3 (rfc.zeromq.org/spec/23 and 37) a ROUTER with the NULL mechanism needs: the greeting,
/// the READY command and its properties, PING and PONG, and the frame flags.
enum ZMTP {
    static let moreFlag: UInt8 = 0x01
    static let longFlag: UInt8 = 0x02
    static let commandFlag: UInt8 = 0x04
    /// The socket types a ROUTER talks to.
    static let routerPeers: Set<String> = ["DEALER", "REQ", "ROUTER"]

    struct Violation: Error {
        let what: String
        init(_ what: String) { self.what = what }
    }

    /// Signature, version 3.0, mechanism NULL, not as-server, filler: 64 bytes.
    static let greeting: [UInt8] = {
        var bytes = [UInt8](repeating: 0, count: 64)
        bytes[0] = 0xFF
        bytes[8] = 1
        bytes[9] = 0x7F
        bytes[10] = 3
        bytes[12...15] = ArraySlice("NULL".utf8)
        return bytes
    }()

    static func checkGreeting(_ greeting: ArraySlice<UInt8>) throws(Violation) {
        let bytes = Array(greeting)
        guard bytes[0] == 0xFF, bytes[9] & 1 == 1 else { throw .init("no ZMTP signature") }
        guard bytes[10] >= 3 else { throw .init("ZMTP version \(bytes[10])") }
        let mechanism = bytes[12..<32].prefix { $0 != 0 }
        guard mechanism.elementsEqual("NULL".utf8) else {
            throw .init("mechanism \(String(decoding: mechanism, as: UTF8.self))")
        }
    }

    /// A READY command with Socket-Type.
    static func ready(socketType: String) -> [UInt8] {
        var body: [UInt8] = [5] + Array("READY".utf8)
        body.append(UInt8("Socket-Type".utf8.count))
        body.append(contentsOf: "Socket-Type".utf8)
        withUnsafeBytes(of: UInt32(socketType.utf8.count).bigEndian) { body.append(contentsOf: $0) }
        body.append(contentsOf: socketType.utf8)
        return [commandFlag, UInt8(body.count)] + body
    }

    /// A peer's READY: its Socket-Type and, when it set one, its Identity.
    static func readReady(_ body: ArraySlice<UInt8>) throws(Violation) -> (socketType: String, identity: [UInt8]?) {
        let bytes = Array(body)
        guard bytes.count >= 6, bytes[0] == 5, bytes[1..<6].elementsEqual("READY".utf8) else {
            throw .init("no READY")
        }
        var at = 6
        var socketType: String?
        var identity: [UInt8]?
        while at < bytes.count {
            let nameLength = Int(bytes[at])
            guard at + 1 + nameLength + 4 <= bytes.count else { throw .init("a truncated READY property") }
            let name = String(decoding: bytes[at + 1..<at + 1 + nameLength], as: UTF8.self)
            at += 1 + nameLength
            let valueLength = bytes[at..<at + 4].reduce(0) { $0 << 8 | Int($1) }
            at += 4
            guard valueLength <= bytes.count - at else { throw .init("a truncated READY property") }
            let value = Array(bytes[at..<at + valueLength])
            at += valueLength
            switch name.lowercased() {
            case "socket-type": socketType = String(decoding: value, as: UTF8.self)
            case "identity": identity = value
            default: break
            }
        }
        guard let socketType else { throw .init("a READY without Socket-Type") }
        return (socketType, identity)
    }

    static func isPing(_ body: ArraySlice<UInt8>) -> Bool {
        body.count >= 7 && body.first == 4 && body.dropFirst().prefix(4).elementsEqual("PING".utf8)
    }

    /// PING's body: the name, a 2-byte TTL, then the context PONG sends back (at most 16 bytes of it, as
    /// the specification allows no more).
    static func pingContext(_ body: ArraySlice<UInt8>) -> ArraySlice<UInt8> { body.dropFirst(7).prefix(16) }

    static func pong(_ context: ArraySlice<UInt8>) -> [UInt8] {
        let body: [UInt8] = [4] + Array("PONG".utf8) + context
        return [commandFlag, UInt8(body.count)] + body
    }
}
