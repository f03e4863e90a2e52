import Dispatch
import Foundation
import SkillbusZMQ
import Synchronization

/// An agent: connects a DEALER to the coordinator's bus, registers its skills, runs up to `capacity`
/// invocations at once as Swift tasks, reports its state, and heartbeats. Losing the coordinator is
/// not fatal: it registers again, with growing delay, until the coordinator answers.
///
/// Once welcomed it also holds a `RegistryReplica`, so it knows what every other agent offers, and its
/// skills can call any skill in the registry (`SkillExecutionContext.invoke`).
public final class AgentWorker: Sendable {
    public let options: Options
    let logger: Logger
    /// The DEALER to the coordinator it talks to now (of a group's: the leader, as far as it knows, §4.4).
    let socket: WorkerBus
    /// Internal, not private, for the SkillCaller facet in AgentWorker+SkillCaller.swift.
    let state: Mutex<State>
    /// Client-side connection to the bus: registry snapshots and sub-calls to skills on other agents.
    let client: SkillbusClient
    /// The turns' ASKs to other agents, sent on the worker connection (AgentWorker+Asks), by request id.
    let asks = PendingReplies()
    let context: ZMQContext
    /// The agent's own context, persisted in its data directory; nil when it keeps none.
    public let store: AgentStore?
    /// Where skills' partial output goes and how it is bounded; made once, not per invocation.
    let outputRoute: SkillOutput.Route

    struct State {
        var skills: [String: any AgentSkill] {
            didSet { synchronousSkills = Self.synchronous(in: skills) }
        }
        /// The quick skills among them that are synchronous, cast once: a cast per INVOKE boxed the skill anew.
        var synchronousSkills: [String: any SynchronousSkill] = [:]

        /// A skill under a worker's policies runs its base: what they change is the bus's business, and the
        /// concurrency limit is checked on the skill as listed.
        static func synchronous(in skills: [String: any AgentSkill]) -> [String: any SynchronousSkill] {
            skills.compactMapValues { skill in
                guard skill.executionStyle == .quick else { return nil }
                return ((skill as? PolicyOverriddenSkill)?.base ?? skill) as? any SynchronousSkill
            }
        }
        var replica: RegistryReplica?
        /// What the planner was last shown of `replica` (`plannerView()`).
        var plannerView: PlannerView?
        var running: [String: Task<Void, Never>] = [:]
        /// How many run now of each skill with a concurrency limit, by identifier.
        var limitedRunning: [String: Int] = [:]
        /// Turns being taken, by turn id; cancelled at stop like invocations.
        var turns: [String: Task<Void, Never>] = [:]
        /// When each of them runs out of time: the socket's thread cancels it then (`expireTurns`).
        var turnDeadlines: [String: ContinuousClock.Instant] = [:]
        /// When each turn that holds its round was given it (`releaseWaitingTurnsRounds`).
        var leasedSince: [String: ContinuousClock.Instant] = [:]
        /// Turns' STATEs and STEPs not sent yet, in order: the I/O thread sends them before it waits, and a
        /// turn that ends first leaves its own out, for the bus to take from its document (PROTOCOL §3.7).
        var turnReports: [(turnID: String, message: WorkerMessage)] = []
        /// The state as last sent, and as it is now; the I/O thread sends the difference before it waits,
        /// so a burst of quick invocations costs one state message, not two per invocation. Nil after a
        /// WELCOME: a registration resets the coordinator's view to idle, so the current state goes again.
        var reported: AgentState? = .idle
        var current: AgentState = .idle
        /// Failures are never coalesced away: each one reaches the feed.
        var failures: [AgentState] = []
        var registered = false
        var lastHeardFromBus: UInt64 = 0
        var lastHeartbeatSent: UInt64 = 0
        var busHeartbeatMs: Int
        var stopping = false
        var lastRegistration: UInt64 = 0
        var retryDelayMs = 1000
        /// The skills changed after the last READY went out, while no WELCOME had come.
        var skillsChangedSinceReady = false
        /// The CONTEXT last sent; nil after a WELCOME, so that the coordinator hears it again.
        var reportedContext: AgentContextStatus?
        /// Rounds that turns of this agent hold (TURN's lease), round id → turn id, until given back.
        var leases: [String: String] = [:]
        /// Calls running here under a lease, by round id and claim id: a CLAIM goes for each before RELEASE.
        var runningHere: [String: [String: (skill: String, parameters: [UInt8])]] = [:]
        var lastClaim: UInt64 = 0
        /// Calls offered to the bus (OFFER), by call id, waiting for its VERDICT; nil resumes one whose turn was
        /// cancelled.
        var offers: [String: CheckedContinuation<OfferVerdict?, Never>] = [:]
        /// When the READY to a coordinator just moved to goes (after the move's back-off); nil: none waits.
        var readyAt: ContinuousClock.Instant?
        /// When it last moved to another coordinator (or started): silence is counted from then at most.
        var movedAt: UInt64 = DispatchTime.now().uptimeNanoseconds
        /// Invocations of a coordinator it left: they are cancelled, and their RESULTs go nowhere (§4.4).
        var abandoned: Set<String> = []
        /// The connection to a group's coordinator broke or could not be made: the DEALER's next turn moves to
        /// the next one, saying this.
        var connectionLost: String?
    }

    private init(
        options: Options, skills: [any AgentSkill], context: ZMQContext, logger: Logger, client: SkillbusClient,
        socket: WorkerBus, owner: Owner, store: AgentStore?
    ) {
        self.options = options
        self.store = store
        self.logger = logger
        self.context = context
        self.client = client
        self.socket = socket
        outputRoute = SkillOutput.Route(
            maxOutputBytes: options.maxOutputBytes, maxMessageBytes: options.maxMessageBytes,
            send: { [socket] in socket.send($0) },
            stop: { [owner] id in owner.worker.withLock { $0.value }?.cancelInvocation(id) }, clock: OutputClock())
        let skills = Dictionary(skills.map { ($0.identifier, $0) }, uniquingKeysWith: { first, _ in first })
        state = Mutex(
            State(
                skills: skills, synchronousSkills: State.synchronous(in: skills), busHeartbeatMs: options.heartbeatMs))
        owner.worker.withLock { $0.value = self }
        client.onMove { from, to, reason in
            logger.info("client connection: moving from coordinator \(from) to \(to): \(from) \(reason)")
        }
    }

    /// Connects to the coordinator; `run()` registers and serves. The synchronous form, for synchronous
    /// callers: it blocks the calling thread until the sockets' threads have connected. Async code uses
    /// `connect(options:skills:context:logger:)`.
    public convenience init(options: Options, skills: [any AgentSkill], context: ZMQContext, logger: Logger) throws {
        let store = try options.dataDirectory.map {
            try AgentStore(directory: $0, agent: options.name, options: options.store)
        }
        let client = try SkillbusClient(
            endpoint: options.coordinator, context: context, maxMessageBytes: options.maxMessageBytes,
            credentials: options.credentials, ownEngine: true)
        let owner = Owner()
        let socket = try WorkerBus(
            endpoints: options.coordinator, folds: options.credentials != nil,
            opener: Self.opener(options, context, logger, owner))
        self.init(
            options: options, skills: skills, context: context, logger: logger, client: client, socket: socket,
            owner: owner, store: store)
    }

    /// Connects to the coordinator, as `init` does, awaiting the sockets' threads instead of blocking.
    public static func connect(
        options: Options, skills: [any AgentSkill], context: ZMQContext, logger: Logger
    ) async throws -> AgentWorker {
        // The store first: a directory another agent holds refuses the start before anything connects.
        var store: AgentStore?
        if let directory = options.dataDirectory {
            store = try await AgentStore.open(directory: directory, agent: options.name, options: options.store)
        }
        // On the own engine, as the worker's DEALER: its turns' calls and asks cross no libzmq I/O thread.
        let client = try await SkillbusClient.connect(
            endpoint: options.coordinator, context: context, maxMessageBytes: options.maxMessageBytes,
            credentials: options.credentials, ownEngine: true)
        let owner = Owner()
        let socket = try await WorkerBus(
            endpoints: options.coordinator, folds: options.credentials != nil,
            opener: opener(options, context, logger, owner))
        return AgentWorker(
            options: options, skills: skills, context: context, logger: logger, client: client, socket: socket,
            owner: owner, store: store)
    }

    /// The worker's DEALER to the bus. To a TCP endpoint (IPv4, IPv6 or a host name) it is Skillbus's own
    /// (`ZMTPDealer`: ZMTP on the socket's thread, no libzmq I/O thread in between), NULL or, with keys, CURVE;
    /// to another transport (ipc), libzmq's. `SKILLBUS_BUS_ENGINE=libzmq` keeps libzmq's in every case (for
    /// tests and measurements only). Both reconnect after 1 s, doubling up to 32 s, and linger 200 ms on the
    /// way out: long enough to flush a DISCONNECT, short enough never to hang. A refused key is logged with the
    /// coordinator's reason each time the own DEALER tries (libzmq's DEALER is never told why).
    /// `onLost` hears, on the own DEALER, that its connection broke or could not be made (a group's worker then
    /// moves, §4.4).
    static func busSocket(
        _ options: Options, _ endpoint: String, _ context: ZMQContext, logger: Logger,
        onLost: (@Sendable (_ wasOpen: Bool) -> Void)? = nil
    ) -> SocketLoop.Socket {
        let maxBytes = Wire.hardCap(forLimit: options.maxMessageBytes)
        let credentials = options.credentials
        let mechanism = credentials == nil ? "NULL" : "CURVE"
        if BusEngine.ownAllowed, ZMTPDealer.serves(endpoint) {
            logger.info("bus at \(endpoint) (own ZMTP engine, \(mechanism))")
            var dealer = ZMTPDealer.Options(
                endpoint: endpoint, maxFrameBytes: Int(maxBytes), curve: credentials,
                onRefused: { reason in
                    logger.error(
                        "the coordinator refused this worker's key (\(reason)); trying again later, "
                            + "less and less often")
                })
            dealer.onLost = onLost
            // With keys every frame is a box: what leaves at one flush goes in one (PROTOCOL §2.2).
            if credentials != nil { dealer.batching = Wire.frameBatching }
            return .ownDealer(dealer)
        }
        logger.info("bus at \(endpoint) (libzmq, \(mechanism))")
        return .zeroMQ(context, .dealer) { socket in
            if let credentials { try socket.useCurveClient(credentials) }
            try socket.setMaxMessageSize(maxBytes)
            try socket.setReconnectInterval(ms: 1000, maxMs: 32_000)
            try socket.setLinger(ms: 200)
            try socket.connect(endpoint)
        }
    }

    /// Opens the worker's DEALER to one coordinator, with its handlers. They need the worker, which does not
    /// exist yet: they reach it through a box filled once it does. (A Mutex holding a closure would re-wrap it in
    /// thunks on every access; a weak reference does not.)
    private static func opener(
        _ options: Options, _ context: ZMQContext, _ logger: Logger, _ owner: Owner
    ) -> WorkerBus.Opener {
        let beforeWait: @Sendable () -> Duration? = {
            guard let worker = owner.worker.withLock({ $0.value }) else { return nil }
            worker.moveIfConnectionLost()
            let ready = worker.readyIfDue()
            let release = worker.releaseWaitingTurnsRounds()
            worker.flushTurnReports()
            worker.flushState()
            let heartbeat = worker.heartbeatIfDue()
            return [ready, heartbeat, worker.expireTurns(), release].compactMap { $0 }.min()
        }
        let name = "skillbus-worker-\(options.name)"
        let lost: @Sendable (Int) -> @Sendable (Bool) -> Void = { generation in
            { wasOpen in owner.worker.withLock { $0.value }?.connectionLost(on: generation, wasOpen: wasOpen) }
        }
        return WorkerBus.Opener(
            now: { endpoint, generation in
                try SocketLoop(
                    busSocket(options, endpoint, context, logger: logger, onLost: lost(generation)), name: name,
                    onMessage: { owner.worker.withLock { $0.value }?.receive($0, on: generation) },
                    beforeWait: beforeWait)
            },
            async: { endpoint, generation in
                try await SocketLoop.start(
                    busSocket(options, endpoint, context, logger: logger, onLost: lost(generation)), name: name,
                    onMessage: { owner.worker.withLock { $0.value }?.receive($0, on: generation) },
                    beforeWait: beforeWait)
            })
    }

    private struct WeakWorker { weak var value: AgentWorker? }

    private final class Owner: Sendable {
        let worker = Mutex(WeakWorker())
    }

    /// Registers, then watches the registration until `stop()` (the socket's thread sends the heartbeats).
    /// While not registered (refused, or the coordinator went quiet) it asks again after 1 s, then twice as
    /// long each time up to 32 s.
    public func run() async {
        register()
        while !state.withLock({ $0.stopping }) {
            do {
                try await Task.sleep(for: .milliseconds(options.heartbeatMs))
            } catch {
                break
            }
            var (registered, silentNanos, busHeartbeatMs) = state.withLock {
                ($0.registered, now() &- $0.lastHeardFromBus, $0.busHeartbeatMs)
            }
            // A group's coordinator silent that long — registered or not — is left for the next (§4.4).
            let sinceMove = state.withLock { now() &- max($0.lastHeardFromBus, $0.movedAt) }
            if socket.isGroup, sinceMove > UInt64(3 * busHeartbeatMs) * 1_000_000,
                let move = socket.silent(
                    reason: "nothing came from it for \(sinceMove / 1_000_000) ms "
                        + "(3 heartbeats of \(busHeartbeatMs) ms)")
            {
                await moveAsync(move)
                continue
            }
            if registered && silentNanos > UInt64(3 * busHeartbeatMs) * 1_000_000 {
                logger.warning("coordinator silent for \(silentNanos / 1_000_000) ms; registering again")
                // A coordinator that lost us has failed our invocations already: drop them here too.
                let orphans = state.withLock { state in
                    state.registered = false
                    state.retryDelayMs = 1000
                    return Array(state.running.values) + Array(state.turns.values)
                }
                for task in orphans { task.cancel() }
                registered = false
            }
            // Heartbeats go from the socket's thread (heartbeatIfDue), which no skill can keep busy.
            if !registered { register(ifDue: true) }
        }
        await stop()
    }

    /// Cancels running invocations, tells the coordinator we leave, and closes the socket. Only the first
    /// call does anything.
    public func stop() async {
        let tasks = state.withLock { state -> [Task<Void, Never>]? in
            guard !state.stopping else { return nil }
            state.stopping = true
            return Array(state.running.values) + Array(state.turns.values)
        }
        guard let tasks else { return }
        for task in tasks { task.cancel() }
        for task in tasks { await task.value }
        socket.send(WorkerMessage.disconnect.encoded())
        await socket.stopAndWait()
        await state.withLock { $0.replica }?.closeAndWait()
        await client.closeAndWait()
        // Last: every invocation has ended, so everything they wrote is committed before the lock goes.
        await store?.close()
    }

    /// Sends READY; with `ifDue`, only when the back-off since the last attempt has passed. Built and
    /// queued under the lock, like SKILLS, so that it never overtakes a newer list.
    func register(ifDue: Bool = false) {
        state.withLock { state in
            let now = now()
            if ifDue && now &- state.lastRegistration < UInt64(state.retryDelayMs) * 1_000_000 { return }
            if ifDue { state.retryDelayMs = min(state.retryDelayMs * 2, 32_000) }
            state.lastRegistration = now
            state.skillsChangedSinceReady = false
            socket.send(WorkerMessage.ready(registration(of: state.skills).json).encoded())
        }
    }

    func now() -> UInt64 { DispatchTime.now().uptimeNanoseconds }

    /// Runs on the socket's thread: must stay quick. What comes from a coordinator it has left is dropped.
    private func receive(_ message: Multipart, on generation: Int) {
        guard socket.isCurrent(generation) else { return }
        state.withLock { $0.lastHeardFromBus = now() }
        if message.first?.starts(with: Wire.clientHeaderBytes) == true { return answeredAsk(message) }
        let decoded: BusToWorkerMessage
        do {
            decoded = try BusToWorkerMessage.decode(message)
        } catch {
            logger.warning("ignored a bad message from the coordinator: \(error)")
            return
        }
        socket.heard()
        switch decoded {
        case .welcome(let welcome):
            let needsReplica = state.withLock { state in
                state.registered = true
                state.retryDelayMs = 1000
                state.reported = nil
                state.reportedContext = nil
                state.busHeartbeatMs = welcome.heartbeatMs
                if state.skillsChangedSinceReady {
                    // The READY this welcomes carried an older list.
                    state.skillsChangedSinceReady = false
                    socket.send(skillsMessage(state.skills))
                }
                return state.replica == nil
            }
            if needsReplica { startReplica(welcomeFeed: welcome.feed) }
            logger.info("registered as '\(options.name)' with \(welcome.accepted.count) skill(s)")
            for refused in welcome.refused { logger.warning("skill refused: \(refused)") }
        case .invoke(let invocation):
            start(invocation)
        case .cancel(let id):
            // An invocation's id, or a turn's: ids of the two never look alike (`i…`, `t…`).
            state.withLock { $0.running[id] ?? $0.turns[id] }?.cancel()
        case .heartbeat(let intervalMs):
            if let intervalMs { state.withLock { $0.busHeartbeatMs = intervalMs } }
        case .error(let error) where error.code == .notLeader:
            if let move = socket.refused(leader: error.leader) { moveNow(move) }
        case .error(let error):
            if error.code == .notRegistered {
                // The coordinator restarted or forgot us: register again (no faster than the back-off).
                state.withLock { $0.registered = false }
                register(ifDue: true)
            } else {
                logger.warning("coordinator: \(error)")
            }
        case .turn(let turn):
            startTurn(turn)
        case .verdict(let callID, let verdict):
            // One for a call whose turn was cancelled finds nobody: a `run` it would have been told is dropped
            // with the turn's claims at its TURNEND.
            state.withLock { $0.offers.removeValue(forKey: callID) }?.resume(returning: verdict)
        case .query(let queryID, let query):
            // A history is read from disk: off the socket's thread.
            Task { self.socket.send(WorkerMessage.answer(queryID: queryID, await self.answer(query)).encoded()) }
        }
    }
}
