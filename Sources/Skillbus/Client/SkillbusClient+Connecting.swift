import SkillbusZMQ

/// Connecting a client: libzmq's DEALER (set up for keys, with a refusal watch), or the own engine's where an
/// agent asks for it; and the deadlines its socket's thread keeps.
extension SkillbusClient {
    /// Connects to the bus at `endpoint`. The synchronous form, for synchronous callers: it blocks the
    /// calling thread until the socket's thread has connected. Async code uses `connect(endpoint:…)`.
    public convenience init(
        endpoint: String, context: ZMQContext, maxMessageBytes: Int = 1 << 20, credentials: CurveCredentials? = nil
    ) throws {
        try self.init(
            endpoint: endpoint, context: context, maxMessageBytes: maxMessageBytes, credentials: credentials,
            ownEngine: false)
    }

    /// With `ownEngine`, on Skillbus's own DEALER where it serves the endpoint, as a worker's connection is
    /// (`AgentWorker.busSocket`): an agent's calls and asks then cross no libzmq I/O thread.
    convenience init(
        endpoint: String, context: ZMQContext, maxMessageBytes: Int, credentials: CurveCredentials?, ownEngine: Bool
    ) throws {
        let (pending, entries) = (PendingReplies(), PartialAnswers())
        let own = Self.ownDealer(endpoint, maxMessageBytes, credentials, ownEngine)
        let refusals = try own?.refusals ?? credentials.map { _ in try RefusalWatch(context: context) }
        let (socketKind, onMessage) = Self.handlers(
            endpoint, maxMessageBytes, credentials, own?.socket, refusals, pending, entries, context)
        let socket: SocketLoop
        do {
            socket = try SocketLoop(
                socketKind, name: "skillbus-client", onMessage: onMessage, beforeWait: Self.keepDeadlines(pending, entries))
        } catch {
            refusals?.stop()
            throw error
        }
        self.init(
            endpoint: endpoint, credentials: credentials, pending: pending, partials: entries, socket: socket,
            refusals: refusals)
    }

    /// Connects to the bus at `endpoint`, awaiting the socket's thread instead of blocking. With
    /// `credentials`, over CURVE: a bus with keys admits nobody without them (PROTOCOL §12). With `ownEngine`,
    /// as the synchronous `init` says.
    public static func connect(
        endpoint: String, context: ZMQContext, maxMessageBytes: Int = 1 << 20, credentials: CurveCredentials? = nil,
        ownEngine: Bool = false
    ) async throws -> SkillbusClient {
        let (pending, entries) = (PendingReplies(), PartialAnswers())
        let own = ownDealer(endpoint, maxMessageBytes, credentials, ownEngine)
        var refusals = own?.refusals
        if own == nil, credentials != nil { refusals = try await RefusalWatch(context: context) }
        let (socketKind, onMessage) = handlers(
            endpoint, maxMessageBytes, credentials, own?.socket, refusals, pending, entries, context)
        let socket: SocketLoop
        do {
            socket = try await SocketLoop.start(
                socketKind, name: "skillbus-client", onMessage: onMessage, beforeWait: keepDeadlines(pending, entries))
        } catch {
            refusals?.stop()
            throw error
        }
        return SkillbusClient(
            endpoint: endpoint, credentials: credentials, pending: pending, partials: entries, socket: socket,
            refusals: refusals)
    }

    /// The own DEALER for `endpoint` when asked for and it serves it, with what hears its refusals.
    private static func ownDealer(
        _ endpoint: String, _ maxMessageBytes: Int, _ credentials: CurveCredentials?, _ wanted: Bool
    ) -> (socket: SocketLoop.Socket, refusals: RefusalWatch)? {
        guard wanted, BusEngine.ownAllowed, ZMTPDealer.serves(endpoint) else { return nil }
        let refusals = RefusalWatch()
        let options = ZMTPDealer.Options(
            endpoint: endpoint, maxFrameBytes: Int(Wire.hardCap(forLimit: maxMessageBytes)), curve: credentials,
            onRefused: { _ in refusals.noteRefusal() })
        return (.ownDealer(options), refusals)
    }

    /// Ends the waits whose time is up, sends again what is due, and lets the socket's thread sleep until the
    /// next of either.
    private static func keepDeadlines(_ pending: PendingReplies, _ partials: PartialAnswers) -> @Sendable () -> Duration? {
        {
            pending.expire()
            let resends = pending.dueResends()
            if !resends.isEmpty, let send = partials.reply.withLock({ $0 }) {
                for message in resends { send(message) }
            }
            return pending.untilNextDeadline()
        }
    }

    private static func handlers(
        _ endpoint: String, _ maxMessageBytes: Int, _ credentials: CurveCredentials?, _ own: SocketLoop.Socket?,
        _ refusals: RefusalWatch?, _ pending: PendingReplies, _ entries: PartialAnswers, _ context: ZMQContext
    ) -> (socket: SocketLoop.Socket, onMessage: @Sendable (Multipart) -> Void) {
        let maxBytes = Wire.hardCap(forLimit: maxMessageBytes)
        let onMessage: @Sendable (Multipart) -> Void = { message in receive(message, pending: pending, partials: entries) }
        if let own { return (own, onMessage) }
        return (
            .zeroMQ(context, .dealer) { socket in
                try socket.setMaxMessageSize(maxBytes)
                // Long enough that a last message (a turn's CANCEL) is flushed when the context ends.
                try socket.setLinger(ms: 200)
                if let credentials { try socket.useCurveClient(credentials) }
                try refusals?.watch(socket)
                try socket.connect(endpoint)
            },
            onMessage
        )
    }
}
