import SkillbusZMQ

/// Connecting a client: libzmq's DEALER (set up for keys, with a refusal watch), or the own engine's where an
/// agent asks for it; and the deadlines its socket's thread keeps. `endpoint` may name the coordinators of a
/// group, as a comma list: the client talks to one at a time and follows the leader (PROTOCOL §3.3).
extension SkillbusClient {
    /// Connects to the bus at `endpoint` (one, or a group's as `a,b`). The synchronous form, for synchronous
    /// callers: it blocks the calling thread until the socket's thread has connected. Async code uses
    /// `connect(endpoint:…)`.
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
        let parts = try Parts(endpoint, context, maxMessageBytes, credentials, ownEngine)
        let first = try parts.openLink(parts.links.endpoint, parts.links)
        parts.links.start(first)
        self.init(
            endpoint: endpoint, credentials: credentials, pending: parts.pending, partials: parts.partials,
            links: parts.links)
    }

    /// Connects to the bus at `endpoint` (one, or a group's as `a,b`), awaiting the socket's thread instead of
    /// blocking. With `credentials`, over CURVE: a bus with keys admits nobody without them (PROTOCOL §12). With
    /// `ownEngine`, as the synchronous `init` says.
    public static func connect(
        endpoint: String, context: ZMQContext, maxMessageBytes: Int = 1 << 20, credentials: CurveCredentials? = nil,
        ownEngine: Bool = false
    ) async throws -> SkillbusClient {
        let parts = try Parts(endpoint, context, maxMessageBytes, credentials, ownEngine)
        let first = try await parts.openLinkAsync(parts.links.endpoint, parts.links)
        parts.links.start(first)
        return SkillbusClient(
            endpoint: endpoint, credentials: credentials, pending: parts.pending, partials: parts.partials,
            links: parts.links)
    }

    /// Connects to the coordinators of a group (or one): `endpoints` as the comma list of `connect(endpoint:…)`.
    public static func connect(
        endpoints: [String], context: ZMQContext, maxMessageBytes: Int = 1 << 20, credentials: CurveCredentials? = nil
    ) async throws -> SkillbusClient {
        let (list, problem) = Endpoint.joined(endpoints)
        if let problem { throw SkillbusError(.invalidConfiguration, "coordinator endpoints: \(problem)") }
        return try await connect(
            endpoint: list, context: context, maxMessageBytes: maxMessageBytes, credentials: credentials)
    }

    /// What every connection of one client shares, and how one is opened.
    private struct Parts: Sendable {
        let pending: PendingReplies
        let partials: PartialAnswers
        let links: BusLinks
        let context: ZMQContext
        let maxMessageBytes: Int
        let credentials: CurveCredentials?
        let ownEngine: Bool

        init(
            _ endpoint: String, _ context: ZMQContext, _ maxMessageBytes: Int, _ credentials: CurveCredentials?,
            _ ownEngine: Bool
        ) throws {
            if let problem = Endpoint.listProblem(endpoint) {
                throw SkillbusError(.invalidConfiguration, "coordinator endpoint: \(problem)")
            }
            let (pending, partials) = (PendingReplies(), PartialAnswers())
            (self.pending, self.partials) = (pending, partials)
            (self.context, self.maxMessageBytes, self.credentials, self.ownEngine) =
                (context, maxMessageBytes, credentials, ownEngine)
            links = BusLinks(endpoints: Endpoint.list(endpoint)) { endpoint, links in
                try Self.open(endpoint, links, context, maxMessageBytes, credentials, ownEngine, pending, partials)
            }
        }

        func openLink(_ endpoint: String, _ links: BusLinks) throws -> BusLinks.Link {
            try Self.open(endpoint, links, context, maxMessageBytes, credentials, ownEngine, pending, partials)
        }

        func openLinkAsync(_ endpoint: String, _ links: BusLinks) async throws -> BusLinks.Link {
            let own = SkillbusClient.ownDealer(endpoint, maxMessageBytes, credentials, ownEngine)
            var refusals = own?.refusals
            if own == nil, credentials != nil { refusals = try await RefusalWatch(context: context) }
            let (socketKind, onMessage) = SkillbusClient.handlers(
                endpoint, maxMessageBytes, credentials, own?.socket, refusals, pending, partials, context,
                links)
            do {
                let socket = try await SocketLoop.start(
                    socketKind, name: "skillbus-client", onMessage: onMessage,
                    beforeWait: SkillbusClient.keepDeadlines(pending, partials, links))
                return BusLinks.Link(endpoint: endpoint, socket: socket, refusals: refusals, folds: credentials != nil)
            } catch {
                refusals?.stop()
                throw error
            }
        }

        /// The synchronous open: at the start of a synchronous client, and at each move (on a socket's thread).
        static func open(
            _ endpoint: String, _ links: BusLinks, _ context: ZMQContext, _ maxMessageBytes: Int,
            _ credentials: CurveCredentials?, _ ownEngine: Bool, _ pending: PendingReplies, _ partials: PartialAnswers
        ) throws -> BusLinks.Link {
            let own = SkillbusClient.ownDealer(endpoint, maxMessageBytes, credentials, ownEngine)
            let refusals = try own?.refusals ?? credentials.map { _ in try RefusalWatch(context: context) }
            let (socketKind, onMessage) = SkillbusClient.handlers(
                endpoint, maxMessageBytes, credentials, own?.socket, refusals, pending, partials, context, links)
            do {
                let socket = try SocketLoop(
                    socketKind, name: "skillbus-client", onMessage: onMessage,
                    beforeWait: SkillbusClient.keepDeadlines(pending, partials, links))
                return BusLinks.Link(endpoint: endpoint, socket: socket, refusals: refusals, folds: credentials != nil)
            } catch {
                refusals?.stop()
                throw error
            }
        }
    }

    /// The own DEALER for `endpoint` when asked for and it serves it, with what hears its refusals.
    fileprivate static func ownDealer(
        _ endpoint: String, _ maxMessageBytes: Int, _ credentials: CurveCredentials?, _ wanted: Bool
    ) -> (socket: SocketLoop.Socket, refusals: RefusalWatch)? {
        guard wanted, BusEngine.ownAllowed, ZMTPDealer.serves(endpoint) else { return nil }
        let refusals = RefusalWatch()
        var options = ZMTPDealer.Options(
            endpoint: endpoint, maxFrameBytes: Int(Wire.hardCap(forLimit: maxMessageBytes)), curve: credentials,
            onRefused: { _ in refusals.noteRefusal() })
        // With keys every frame is a box: what leaves at one flush goes in one (PROTOCOL §2.2).
        if credentials != nil { options.batching = Wire.frameBatching }
        return (.ownDealer(options), refusals)
    }

    /// Ends the waits whose time is up, probes or leaves a silent coordinator of a group, sends again what is
    /// due, and lets the socket's thread sleep until the next of these.
    fileprivate static func keepDeadlines(
        _ pending: PendingReplies, _ partials: PartialAnswers, _ links: BusLinks
    ) -> @Sendable () -> Duration? {
        { [weak links] in
            pending.expire()
            let now = ContinuousClock.now
            let nextTick = links?.tick(pending: pending) {
                ClientMessage.listSkills(requestID: "probe-" + String(UInt32.random(in: 0...UInt32.max), radix: 36))
                    .encoded()
            }
            let resends = pending.dueResends()
            if !resends.isEmpty, let send = partials.reply.withLock({ $0 }) {
                for message in resends { send(message) }
            }
            let untilTick = nextTick.map { max($0 - now, .zero) }
            guard let untilDeadline = pending.untilNextDeadline() else { return untilTick }
            return min(untilDeadline, untilTick ?? untilDeadline)
        }
    }

    fileprivate static func handlers(
        _ endpoint: String, _ maxMessageBytes: Int, _ credentials: CurveCredentials?, _ own: SocketLoop.Socket?,
        _ refusals: RefusalWatch?, _ pending: PendingReplies, _ entries: PartialAnswers, _ context: ZMQContext,
        _ links: BusLinks
    ) -> (socket: SocketLoop.Socket, onMessage: @Sendable (Multipart) -> Void) {
        let maxBytes = Wire.hardCap(forLimit: maxMessageBytes)
        let onMessage: @Sendable (Multipart) -> Void = { [weak links] message in
            receive(message, from: endpoint, pending: pending, partials: entries, links: links)
        }
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
