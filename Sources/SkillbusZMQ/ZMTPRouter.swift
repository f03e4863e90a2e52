import CLinux

#if canImport(Glibc)
    import Glibc
#endif

/// A ROUTER socket for TCP peers (IPv4 or IPv6) that speaks ZMTP 3 itself, with the NULL mechanism or CURVE,
/// on the thread that owns it, with no libzmq I/O thread. Peers are ordinary ZeroMQ DEALER (or REQ) sockets.
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
    /// What a CURVE router needs: its long-term secret key (Z85), and whom to let in. `authorize` is asked,
    /// on the router's thread, about every client whose INITIATE was good: its long-term public key and address
    /// in, a User-Id (every message of the connection carries it) or a reason to refuse out. A refused client
    /// gets an ERROR command, then the connection closes: with the reason when its INITIATE asked for it
    /// (`ZMTP.refusalReasonProperty`, as the own DEALER does), else "400", which libzmq's clients understand.
    public struct Curve {
        public var secretKey: String
        public var authorize: (CurveClient) -> ZAPVerdict

        public init(secretKey: String, authorize: @escaping (CurveClient) -> ZAPVerdict) {
            self.secretKey = secretKey
            self.authorize = authorize
        }
    }

    /// A client that completed the CURVE handshake, as `Curve.authorize` sees it.
    public struct CurveClient {
        /// The client's long-term public key, 32 bytes.
        public let publicKey: [UInt8]
        public let address: String
    }

    /// A connection closed during its handshake for something it sent (a wrong server key, a malformed or
    /// replayed command): where from and what.
    public struct HandshakeFailure: Sendable, Equatable {
        public let address: String
        public let reason: String
    }

    public let lastEndpoint: String
    /// "NULL" or "CURVE".
    public let mechanism: String
    /// How long a connection may take from accept to the end of its handshake (libzmq's ZMQ_HANDSHAKE_IVL
    /// is 30 s too): one that says nothing, or too little, is closed by `expireHandshakes`.
    public let handshakeTimeout: Duration
    /// Readable when a peer connects, sends or can be written to again: poll it, then `receive`.
    public var pollDescriptor: Int32 { epoll }

    private let listener: Int32
    private let epoll: Int32
    private let maxFrameBytes: Int
    private let curve: (keys: (publicKey: [UInt8], secretKey: [UInt8]), authorize: (CurveClient) -> ZAPVerdict)?
    private var cookieKeys = CurveCookieKeys()
    private var handshakeFailures: [HandshakeFailure] = []
    // Internal, not private: the sending side (ZMTPRouter+Sending.swift) works on them too.
    var connections: [Int32: ZMTPConnection] = [:]
    var peers: [RoutingID: Int32] = [:]
    private var nextNumber = UInt32.random(in: 0...UInt32.max)
    private var inbox: [ReceivedMessage] = []
    private var inboxHead = 0
    var unflushed: [ZMTPConnection] = []
    private var closed: [Int32] = []
    /// What each read lands in before it is appended to its connection's input.
    private var scratch = [UInt8](repeating: 0, count: ZMTP.readChunk)
    /// What each `epoll_wait` reports into.
    private var events = [epoll_event](repeating: epoll_event(), count: 64)

    /// Whether this router can serve `endpoint`: `tcp://` with `*`, an IPv4 address, an IPv6 one in brackets or
    /// a host name, and a port or `*` (the host is looked up when the router binds). Other transports (ipc,
    /// inproc) stay with libzmq.
    public static func serves(_ endpoint: String) -> Bool {
        guard let (_, port) = TCPSocket.hostAndPort(endpoint) else { return false }
        return port == "*" || UInt16(port) != nil
    }

    public init(
        bind endpoint: String, maxFrameBytes: Int, curve: Curve? = nil, handshakeTimeout: Duration = .seconds(30)
    ) throws(ZMQError) {
        self.maxFrameBytes = maxFrameBytes
        self.handshakeTimeout = handshakeTimeout
        if let curve {
            guard let secretKey = SkillbusZMQ.Curve.decode(curve.secretKey),
                let publicKey = Sodium.publicKey(forSecret: secretKey)
            else { throw ZMQError(operation: "CURVE secret key", errno: EINVAL) }
            self.curve = ((publicKey, secretKey), curve.authorize)
            mechanism = "CURVE"
        } else {
            self.curve = nil
            mechanism = "NULL"
        }
        let address = try Self.address(endpoint)
        let listener: Int32
        switch TCPSocket.listen(on: address, backlog: 128) {
        case .success(let listening):
            listener = listening.fd
            lastEndpoint = "tcp://\(listening.address)"
        case .failure(let failure): throw ZMQError(operation: "bind \(endpoint)", errno: failure.errno)
        }
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
        for (fd, connection) in connections {
            Glibc.close(fd)
            connection.forgetKeys()
        }
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

    /// How a message of several frames becomes one, for peers that take it so (`foldFrames`), and several
    /// messages one (`batchFrames`): the protocol above ZMTP says how; the engine only keeps which peer wants it.
    public var frameBatching: FrameBatching?

    /// Closes the connections whose handshake has taken longer than `handshakeTimeout` (with CURVE, noted
    /// as failed handshakes). The owner calls it now and then: a peer that connects and waits holds nothing
    /// for long.
    public func expireHandshakes(now: ContinuousClock.Instant = .now) {
        let stale = connections.values.filter {
            $0.stage != .open && !$0.closing && now - $0.openedAt > handshakeTimeout
        }
        for connection in stale {
            if connection.isCurve {
                let reason = "no CURVE handshake within \(handshakeTimeout)"
                handshakeFailures.append(HandshakeFailure(address: connection.address, reason: reason))
            }
            drop(connection)
        }
    }

    /// The CURVE handshakes that failed since the last call (refusals by `Curve.authorize` are not among
    /// them: the owner knows of those).
    public func takeHandshakeFailures() -> [HandshakeFailure] {
        defer { handshakeFailures.removeAll() }
        return handshakeFailures
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
        while let fd = TCPSocket.accept(listener) {
            TCPSocket.noDelay(fd)
            let connection: ZMTPConnection
            if let curve {
                let handshake = CurveServerHandshake(publicKey: curve.keys.publicKey, secretKey: curve.keys.secretKey)
                connection = ZMTPConnection(fd: fd, security: .curveServer(handshake))
                connection.address = TCPSocket.peerAddress(fd)
                connection.output.append(contentsOf: ZMTP.greeting(mechanism: "CURVE", asServer: true))
            } else {
                connection = ZMTPConnection(fd: fd)
                connection.output.append(contentsOf: ZMTP.greeting)
                connection.output.append(contentsOf: ZMTP.ready(socketType: "ROUTER"))
            }
            connections[fd] = connection
            watch(fd, output: false, adding: true)
            markUnflushed(connection)
        }
    }

    private func read(_ connection: ZMTPConnection, limits: ReceiveLimits) {
        switch connection.readAvailable(using: &scratch) {
        case .closed:
            if connection.isCurve, connection.stage != .open, !connection.closing {
                let reason =
                    connection.partialGreetingProblem(expecting: "CURVE") ?? "the peer left during the CURVE handshake"
                handshakeFailures.append(HandshakeFailure(address: connection.address, reason: reason))
            }
            return drop(connection)
        case .wouldBlock: return
        case .progress: break
        }
        // Refused: the ERROR is on its way, and nothing the peer says any more matters.
        guard !connection.closing else { return }
        do throws(ZMTP.Violation) {
            try parse(connection, limits: limits)
        } catch {
            if connection.isCurve, connection.stage != .open {
                handshakeFailures.append(HandshakeFailure(address: connection.address, reason: error.what))
            }
            drop(connection)
        }
    }

    private func parse(_ connection: ZMTPConnection, limits: ReceiveLimits) throws(ZMTP.Violation) {
        if connection.stage != .open {
            let peer: ZMTP.Ready
            if connection.isCurve {
                guard let ready = try curveHandshake(connection) else { return }
                peer = ready
            } else {
                guard let ready = try connection.takeHandshake(maxFrameBytes: maxFrameBytes) else { return }
                peer = ready
            }
            guard ZMTP.routerPeers.contains(peer.socketType) else { throw .init("a \(peer.socketType) peer") }
            let routingID: RoutingID
            if let identity = peer.identity, !identity.isEmpty, identity.first != 0 {
                routingID = RoutingID(identity)
                guard peers[routingID] == nil else { throw .init("an Identity another peer holds") }
            } else {
                routingID = nextRoutingID()
            }
            connection.routingID = routingID
            peers[routingID] = connection.fd
        }
        try connection.unseal(maxFrameBytes: maxFrameBytes)
        while let message = try connection.takeMessage(maxFrameBytes: maxFrameBytes, limits: limits) {
            switch message {
            case .ping(let context):
                try connection.queuePong(context)
                markUnflushed(connection)
            case .otherCommand:
                break
            case .message(let frames, let frameCount, let byteCount, let overLimit):
                inbox.append(
                    ReceivedMessage(
                        frames: frames, routingID: connection.routingID, userID: connection.userID,
                        sourceFD: connection.fd,
                        frameCount: frameCount, byteCount: byteCount, overLimit: overLimit))
            }
        }
    }

    /// Runs the CURVE handshake on what has arrived: nil until the client is let in, then the metadata it
    /// sent in INITIATE, with the connection open. A refusal queues ERROR and marks the connection closing.
    private func curveHandshake(_ connection: ZMTPConnection) throws(ZMTP.Violation) -> ZMTP.Ready? {
        guard let curve, try connection.takeGreeting() else { return nil }
        while let body = try connection.takeCommand(maxFrameBytes: maxFrameBytes) {
            guard case .curveServer(var handshake) = connection.security else { return nil }
            cookieKeys.rotateIfDue(now: .now)
            let outcome = try handshake.receive(body, cookieKeys: cookieKeys)
            connection.security = .curveServer(handshake)
            markUnflushed(connection)
            switch outcome {
            case .reply(let frame):
                connection.output.append(contentsOf: frame)
            case .authorize(let clientKey, let metadata):
                switch curve.authorize(CurveClient(publicKey: clientKey, address: connection.address)) {
                case .accept(let userID):
                    let (ready, boxes) = handshake.accept(socketType: "ROUTER")
                    connection.output.append(contentsOf: ready)
                    connection.userID = userID
                    connection.openCurve(boxes)
                    return metadata
                case .refuse(let reason):
                    handshake.forget()
                    connection.security = .null
                    let told = metadata.wantsRefusalReason ? reason : "400"
                    connection.output.append(contentsOf: CurveZMTP.error(reason: told))
                    connection.closing = true
                    return nil
                }
            }
        }
        return nil
    }

    private func nextRoutingID() -> RoutingID {
        while true {
            nextNumber &+= 1
            let id = RoutingID([0] + withUnsafeBytes(of: nextNumber.bigEndian) { Array($0) })
            if peers[id] == nil { return id }
        }
    }

    func drop(_ connection: ZMTPConnection) {
        guard connections[connection.fd] === connection else { return }
        connections[connection.fd] = nil
        if let id = connection.routingID, peers[id] == connection.fd { peers[id] = nil }
        epoll_ctl(epoll, EPOLL_CTL_DEL, connection.fd, nil)
        Glibc.close(connection.fd)
        connection.forgetKeys()
        closed.append(connection.fd)
    }

    func watch(_ fd: Int32, output: Bool, adding: Bool = false) {
        var event = epoll_event()
        event.events = EPOLLIN.rawValue | (output ? EPOLLOUT.rawValue : 0)
        event.data.fd = fd
        epoll_ctl(epoll, adding ? EPOLL_CTL_ADD : EPOLL_CTL_MOD, fd, &event)
    }

    /// The address `tcp://HOST:PORT` names (`*` for either: every IPv4 interface, a port the kernel picks; a
    /// host name: its first address, IPv4 before IPv6).
    private static func address(_ endpoint: String) throws(ZMQError) -> TCPSocket.Address {
        guard let (host, portText) = TCPSocket.hostAndPort(endpoint), let port = portText == "*" ? 0 : UInt16(portText)
        else { throw ZMQError(operation: "bind \(endpoint)", errno: EINVAL) }
        switch TCPSocket.resolve(host: host, port: port) {
        case .success(let addresses): return addresses[0]
        case .failure(let failure): throw ZMQError(operation: "bind \(endpoint) (\(failure))", errno: EINVAL)
        }
    }
}
