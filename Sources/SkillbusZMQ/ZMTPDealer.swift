#if canImport(Glibc)
    import Glibc
#endif

/// A DEALER socket connected to one TCP peer (a ROUTER) that speaks ZMTP 3 itself, NULL mechanism or CURVE, on
/// the thread that owns it: no libzmq I/O thread, so no message crosses threads on its way in or out.
///
/// Why: the agent worker's socket costs the same hops the bus's ROUTER did before `ZMTPRouter` (a mailbox
/// wake-up each way per message). Here the owner polls the connection's descriptor itself, reads and parses
/// when it is readable (`handle`), and writes what a batch of work sent in one write (`flush`).
///
/// What it does as libzmq's DEALER does: it connects at once, and after a failed attempt or a lost
/// connection tries again after `reconnectInterval`, doubling up to `maxReconnectInterval` (back to the
/// first after a handshake); messages sent while no connection is open wait and go out, in order, once one
/// is (what was already written to a connection that broke is lost, as it is with libzmq); a frame above
/// `maxFrameBytes` closes the connection (as ZMQ_MAXMSGSIZE); PING is answered with PONG; on `close` what
/// is unsent gets `linger` to be written.
public final class ZMTPDealer {
    public struct Options: Sendable {
        public var endpoint: String
        public var maxFrameBytes: Int
        public var reconnectInterval: Duration
        public var maxReconnectInterval: Duration
        public var linger: Duration
        /// With these, the connection speaks CURVE as a client of the server whose key they name; else NULL.
        public var curve: CurveCredentials?
        /// Called on the socket's thread with the server's reason when it refused the CURVE handshake (an
        /// ERROR command); the socket then tries again after its back-off, as after any failed attempt.
        public var onRefused: (@Sendable (String) -> Void)?
        /// Called on the socket's thread when a connection breaks (`wasOpen`: its handshake was done; the peer
        /// closed it, or its process died and the kernel closed it) or an attempt to connect fails (refused,
        /// unreachable, no handshake in time); the socket then tries again after its back-off.
        public var onLost: (@Sendable (_ wasOpen: Bool) -> Void)?
        /// How long a connection may take from connect to the end of its handshake before the socket gives
        /// it up and tries again (libzmq's ZMQ_HANDSHAKE_IVL is 30 s too): a server that accepts and says
        /// nothing holds no worker for ever.
        public var handshakeTimeout: Duration = .seconds(30)
        /// With it, messages sent between two flushes go out batched, and batches that come are split; the first
        /// message on each connection goes as a batch, even alone, which tells the peer that this side reads them.
        public var batching: FrameBatching?

        public init(
            endpoint: String, maxFrameBytes: Int, reconnectInterval: Duration = .seconds(1),
            maxReconnectInterval: Duration = .seconds(32), linger: Duration = .milliseconds(200),
            curve: CurveCredentials? = nil, onRefused: (@Sendable (String) -> Void)? = nil
        ) {
            self.curve = curve
            self.onRefused = onRefused
            self.endpoint = endpoint
            self.maxFrameBytes = maxFrameBytes
            self.reconnectInterval = reconnectInterval
            self.maxReconnectInterval = maxReconnectInterval
            self.linger = linger
        }
    }

    public let lastEndpoint: String
    /// "NULL" or "CURVE".
    public var mechanism: String { curveKeys == nil ? "NULL" : "CURVE" }
    /// The reason of the server's last refusal of the CURVE handshake, until a handshake succeeds.
    public private(set) var lastRefusal: String?
    private let options: Options
    private let curveKeys: (server: [UInt8], publicKey: [UInt8], secretKey: [UInt8])?
    private let host: String
    private let port: UInt16
    private var connection: ZMTPConnection?
    /// The TCP connection is established (before that the descriptor is polled for writability).
    private var established = false
    /// Messages sent while no connection is open, and their bytes.
    private var held: [Multipart] = []
    private var heldBytes = 0
    private var needsFlush = false
    /// The open connection has sent nothing yet: with batching, its first message goes as a batch.
    private var announceBatching = false
    private var retryAt: ContinuousClock.Instant?
    private var backoff: Duration
    private var inbox: [Multipart] = []
    private var inboxHead = 0
    private var scratch = [UInt8](repeating: 0, count: ZMTP.readChunk)

    /// Whether this socket can connect to `endpoint`: `tcp://` with an IPv4 address, an IPv6 one in brackets or
    /// a host name (looked up at each attempt to connect), and a port. Other transports (ipc) stay with libzmq.
    public static func serves(_ endpoint: String) -> Bool { address(endpoint) != nil }

    public init(_ options: Options) throws(ZMQError) {
        guard let (host, port) = Self.address(options.endpoint) else {
            throw ZMQError(operation: "connect \(options.endpoint)", errno: EINVAL)
        }
        if let credentials = options.curve {
            guard let server = Curve.decode(credentials.serverKey),
                let publicKey = Curve.decode(credentials.keys.publicKey), let secretKey = Curve.decode(credentials.keys.secretKey)
            else { throw ZMQError(operation: "CURVE keys", errno: EINVAL) }
            curveKeys = (server, publicKey, secretKey)
        } else {
            curveKeys = nil
        }
        self.options = options
        self.host = host
        self.port = port
        backoff = options.reconnectInterval
        lastEndpoint = options.endpoint
        attemptConnection()
    }

    /// The descriptor to poll: the connection's, or -1 while there is none (poll skips it; `waitLimit`
    /// says when to try again).
    public var pollDescriptor: Int32 { connection?.fd ?? -1 }
    /// Whether to poll for writability too: while connecting, and while the kernel's buffer is full.
    public var wantsOutput: Bool { connection.map { !established || $0.waitingToWrite } ?? false }

    /// How long the owner may wait before calling `handle` again for a reconnection; nil: no limit.
    public var waitLimit: Duration? {
        if let connection {
            guard connection.stage != .open else { return nil }
            return max(.zero, connection.openedAt + options.handshakeTimeout - .now)
        }
        guard let retryAt else { return nil }
        return max(.zero, retryAt - .now)
    }

    /// Messages parsed that `receive` has not handed out yet.
    public var hasBufferedMessages: Bool { inboxHead < inbox.count }

    /// Does what poll found possible and what is due: tries to connect again when it is time, completes a
    /// connection, writes what waits, reads and parses.
    public func handle(readable: Bool, writable: Bool) {
        guard let connection else {
            if let retryAt, ContinuousClock.now >= retryAt { attemptConnection() }
            return
        }
        if connection.stage != .open, ContinuousClock.now - connection.openedAt > options.handshakeTimeout {
            return drop()
        }
        if !established {
            guard readable || writable else { return }
            guard TCPSocket.pendingError(connection.fd) == 0, !TCPSocket.isConnectedToItself(connection.fd) else {
                return drop()
            }
            established = true
            if let curveKeys {
                let handshake = CurveClientHandshake(
                    serverKey: curveKeys.server, publicKey: curveKeys.publicKey, secretKey: curveKeys.secretKey,
                    metadata: ZMTP.properties([
                        ("Socket-Type", Array("DEALER".utf8)), (ZMTP.refusalReasonProperty, Array("1".utf8)),
                    ]))
                guard let hello = handshake.hello() else { return drop() }
                connection.security = .curveClient(handshake)
                connection.output.append(contentsOf: ZMTP.greeting(mechanism: "CURVE", asServer: false))
                connection.output.append(contentsOf: hello)
            } else {
                connection.output.append(contentsOf: ZMTP.greeting)
                connection.output.append(contentsOf: ZMTP.ready(socketType: "DEALER"))
            }
            return write()
        }
        if writable && connection.waitingToWrite {
            connection.waitingToWrite = false
            write()
        }
        guard readable, self.connection === connection else { return }
        switch connection.readAvailable(using: &scratch) {
        case .closed: return drop()
        case .wouldBlock: return
        case .progress: break
        }
        do throws(ZMTP.Violation) {
            try parse(connection)
        } catch {
            drop()
        }
    }

    /// The next whole message from the peer, or nil when none has arrived.
    public func receive() -> Multipart? {
        guard inboxHead < inbox.count else {
            inbox.removeAll(keepingCapacity: true)
            inboxHead = 0
            return nil
        }
        inboxHead += 1
        return inbox[inboxHead - 1]
    }

    /// Queues a message; it goes out at the next `flush`, or once a connection is open. Fails with EAGAIN
    /// when 64 MiB already wait (as a full pipe).
    public func send(_ frames: Multipart) throws(ZMQError) {
        if let connection, connection.stage == .open {
            guard connection.unsentBytes < ZMTP.maxUnsentBytes else {
                throw ZMQError(operation: "send", errno: EAGAIN)
            }
            do throws(ZMTP.Violation) {
                try connection.queue(frames, batching: options.batching)
                // A full batch goes at once (PROTOCOL §2.2): the bus works on it while this thread makes the next.
                if let batching = options.batching, connection.holdsFullBatch(batching) {
                    try queueBatch(on: connection, batching)
                    write()
                }
            } catch {
                drop()
                throw ZMQError(operation: "send", errno: EAGAIN)
            }
            needsFlush = true
        } else {
            guard heldBytes < ZMTP.maxUnsentBytes else { throw ZMQError(operation: "send", errno: EAGAIN) }
            held.append(frames)
            heldBytes += frames.reduce(0) { $0 + $1.count + 9 }
        }
    }

    /// Writes what was queued since the last flush, in one write when the kernel takes it.
    public func flush() {
        guard needsFlush else { return }
        needsFlush = false
        if let batching = options.batching, let connection, !connection.batch.isEmpty {
            do throws(ZMTP.Violation) {
                try queueBatch(on: connection, batching)
            } catch {
                return drop()
            }
        }
        write()
    }

    /// Queues what the connection holds for a batch; the first batch on a connection announces batching.
    private func queueBatch(on connection: ZMTPConnection, _ batching: FrameBatching) throws(ZMTP.Violation) {
        try connection.queueBatch(batching, announce: announceBatching)
        announceBatching = false
    }

    /// Gives what is unsent up to `linger` to be written, then closes the connection.
    public func close() {
        flush()
        let deadline = ContinuousClock.now + options.linger
        while let connection, connection.stage == .open, connection.unsentBytes > 0, ContinuousClock.now < deadline {
            var item = pollfd(fd: connection.fd, events: Int16(POLLOUT), revents: 0)
            _ = Glibc.poll(&item, 1, Int32(clamping: SocketLoop.Shared.pollMilliseconds(deadline - .now)))
            connection.waitingToWrite = false
            write()
        }
        if let connection {
            Glibc.close(connection.fd)
            connection.forgetKeys()
        }
        connection = nil
        retryAt = nil
    }

    // MARK: - The connection

    private func attemptConnection() {
        retryAt = nil
        // A name is looked up again at each attempt, as libzmq does: the coordinator may have moved.
        guard case .success(let addresses) = TCPSocket.resolve(host: host, port: port) else {
            scheduleRetry()
            options.onLost?(false)
            return
        }
        switch TCPSocket.connect(to: addresses[0]) {
        case .success(let fd):
            connection = ZMTPConnection(fd: fd)
            established = false
        case .failure:
            scheduleRetry()
            options.onLost?(false)
        }
    }

    private func parse(_ connection: ZMTPConnection) throws(ZMTP.Violation) {
        if connection.stage != .open {
            let peer: ZMTP.Ready
            if connection.isCurve {
                guard let ready = try curveHandshake(connection) else { return }
                peer = ready
            } else {
                guard let ready = try connection.takeHandshake(maxFrameBytes: options.maxFrameBytes) else { return }
                peer = ready
            }
            guard ZMTP.dealerPeers.contains(peer.socketType) else { throw .init("a \(peer.socketType) peer") }
            backoff = options.reconnectInterval
            lastRefusal = nil
            announceBatching = options.batching != nil
            for message in held { try connection.queue(message, batching: options.batching) }
            held.removeAll()
            heldBytes = 0
            needsFlush = true
        }
        try connection.unseal(maxFrameBytes: options.maxFrameBytes)
        let unlimited = ReceiveLimits(frames: .max, bytes: .max)
        while let message = try connection.takeMessage(maxFrameBytes: options.maxFrameBytes, limits: unlimited) {
            switch message {
            case .ping(let context):
                try connection.queuePong(context)
                needsFlush = true
            case .otherCommand:
                break
            case .message(let frames, _, _, _):
                if let batching = options.batching, frames.count == 1, let messages = batching.split(frames[0]) {
                    for message in messages { inbox.append([message]) }
                } else {
                    inbox.append(frames)
                }
            }
        }
    }

    /// Runs the client's CURVE handshake on what has arrived: nil until READY, then the server's metadata,
    /// with the connection open. An ERROR (a refusal) throws after `onRefused` heard the reason.
    private func curveHandshake(_ connection: ZMTPConnection) throws(ZMTP.Violation) -> ZMTP.Ready? {
        guard try connection.takeGreeting() else { return nil }
        while let body = try connection.takeCommand(maxFrameBytes: options.maxFrameBytes) {
            guard case .curveClient(var handshake) = connection.security else { return nil }
            let outcome = try handshake.receive(body)
            connection.security = .curveClient(handshake)
            switch outcome {
            case .reply(let frame):
                connection.output.append(contentsOf: frame)
                needsFlush = true
            case .ready(let metadata, let boxes):
                connection.openCurve(boxes)
                return metadata
            case .refused(let reason):
                lastRefusal = reason
                options.onRefused?(reason)
                throw .init("the server refused the handshake: \(reason)")
            }
        }
        return nil
    }

    private func write() {
        guard let connection, established, !connection.waitingToWrite else { return }
        switch connection.writeOutput() {
        case .progress: break
        case .wouldBlock: connection.waitingToWrite = true
        case .closed: drop()
        }
    }

    private func drop() {
        let wasOpen = connection?.stage == .open
        if let connection {
            Glibc.close(connection.fd)
            connection.forgetKeys()
        }
        connection = nil
        established = false
        needsFlush = false
        scheduleRetry()
        options.onLost?(wasOpen)
    }

    private func scheduleRetry() {
        retryAt = .now + backoff
        backoff = min(backoff * 2, max(options.maxReconnectInterval, options.reconnectInterval))
    }

    /// The host and port of `tcp://HOST:PORT`, HOST an address or a name (not `*`), PORT not 0.
    private static func address(_ endpoint: String) -> (String, UInt16)? {
        guard let (host, portText) = TCPSocket.hostAndPort(endpoint), host != "*", let port = UInt16(portText),
            port != 0
        else { return nil }
        return (host, port)
    }
}
