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
    public struct Options: Sendable {
        public var name: String
        public var coordinator: String
        public var capacity: Int
        public var heartbeatMs: Int
        public var maxMessageBytes: Int
        /// The coordinator's feed, for the registry replica; nil takes the one WELCOME names.
        public var feed: String?

        public init(
            name: String, coordinator: String, capacity: Int = 4, heartbeatMs: Int = 1000,
            maxMessageBytes: Int = 1 << 20, feed: String? = nil
        ) {
            self.name = name
            self.coordinator = coordinator
            self.feed = feed
            self.capacity = capacity
            self.heartbeatMs = heartbeatMs
            self.maxMessageBytes = maxMessageBytes
        }
    }

    public let options: Options
    private let logger: Logger
    private let socket: SocketLoop
    private let state: Mutex<State>
    /// Client-side connection to the bus: registry snapshots and sub-calls to skills on other agents.
    private let client: SkillbusClient
    private let context: ZMQContext

    private struct State {
        var skills: [String: any AgentSkill]
        var replica: RegistryReplica?
        var running: [String: Task<Void, Never>] = [:]
        /// The state as last sent, and as it is now; the I/O thread sends the difference before it waits,
        /// so a burst of quick invocations costs one state message, not two per invocation. Nil after a
        /// WELCOME: a registration resets the coordinator's view to idle, so the current state goes again.
        var reported: AgentState? = .idle
        var current: AgentState = .idle
        /// Failures are never coalesced away: each one reaches the feed.
        var failures: [AgentState] = []
        var registered = false
        var lastHeardFromBus: UInt64 = 0
        var busHeartbeatMs: Int
        var stopping = false
        var lastRegistration: UInt64 = 0
        var retryDelayMs = 1000
    }

    public init(options: Options, skills: [any AgentSkill], context: ZMQContext, logger: Logger) throws {
        self.options = options
        self.logger = logger
        self.context = context
        client = try SkillbusClient(
            endpoint: options.coordinator, context: context, maxMessageBytes: options.maxMessageBytes)
        let skills = Dictionary(skills.map { ($0.identifier, $0) }, uniquingKeysWith: { first, _ in first })
        let state = Mutex(State(skills: skills, busHeartbeatMs: options.heartbeatMs))
        self.state = state
        let maxBytes = Int64(options.maxMessageBytes) * 4 + 4096
        let endpoint = options.coordinator
        // The handler needs `self`, which does not exist yet: it reaches it through a box filled below.
        // (A Mutex holding a closure would re-wrap it in thunks on every access; a weak reference does not.)
        let owner = Owner()
        socket = try SocketLoop(
            context: context, type: .dealer, name: "skillbus-worker-\(options.name)",
            configure: { socket in
                try socket.setMaxMessageSize(maxBytes)
                try socket.setReconnectInterval(ms: 1000, maxMs: 32_000)
                // Long enough to flush a DISCONNECT on the way out, short enough never to hang.
                try socket.setLinger(ms: 200)
                try socket.connect(endpoint)
            },
            onMessage: { message in owner.worker.withLock { $0.value }?.receive(message) },
            beforeWait: { owner.worker.withLock { $0.value }?.flushState() })
        owner.worker.withLock { $0.value = self }
    }

    private struct WeakWorker { weak var value: AgentWorker? }

    private final class Owner: Sendable {
        let worker = Mutex(WeakWorker())
    }

    public var registration: Registration {
        Registration(
            name: options.name, capacity: options.capacity, heartbeatMs: options.heartbeatMs,
            skills: state.withLock { $0.skills.values.map(\.descriptor) }.sorted { $0.identifier < $1.identifier })
    }

    /// This agent's copy of the whole registry; nil until the coordinator first welcomed it.
    public var replica: RegistryReplica? { state.withLock { $0.replica } }

    /// Offers a skill from now on (replacing one with the same identifier). The coordinator gets the new
    /// list at once; it shows in the registry as one update.
    public func addSkill(_ skill: any AgentSkill) {
        changeSkills { $0[skill.identifier] = skill }
    }

    /// Stops offering a skill; invocations of it that already run finish.
    public func removeSkill(_ identifier: String) {
        changeSkills { $0[identifier] = nil }
    }

    /// Replaces the whole skill list (what a config reload does).
    public func setSkills(_ skills: [any AgentSkill]) {
        changeSkills { $0 = Dictionary(skills.map { ($0.identifier, $0) }, uniquingKeysWith: { first, _ in first }) }
    }

    private func changeSkills(_ change: (inout [String: any AgentSkill]) -> Void) {
        let registered = state.withLock { state -> Bool in
            change(&state.skills)
            return state.registered
        }
        // Unregistered, the next READY carries the new list anyway.
        if registered { socket.send(WorkerMessage.skills(.array(registration.skills.map(\.json))).encoded()) }
    }

    /// Registers, then heartbeats until `stop()`. While not registered (refused, or the coordinator went
    /// quiet) it asks again after 1 s, then twice as long each time up to 32 s.
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
            if registered && silentNanos > UInt64(3 * busHeartbeatMs) * 1_000_000 {
                logger.warning("coordinator silent for \(silentNanos / 1_000_000) ms; registering again")
                // A coordinator that lost us has failed our invocations already: drop them here too.
                let orphans = state.withLock { state in
                    state.registered = false
                    state.retryDelayMs = 1000
                    return Array(state.running.values)
                }
                for task in orphans { task.cancel() }
                registered = false
            }
            if registered {
                let position = state.withLock { $0.replica }?.position
                socket.send(WorkerMessage.heartbeat(intervalMs: options.heartbeatMs, registry: position).encoded())
            } else {
                register(ifDue: true)
            }
        }
        await stop()
    }

    /// Cancels running invocations, tells the coordinator we leave, and closes the socket. Only the first
    /// call does anything.
    public func stop() async {
        let tasks = state.withLock { state -> [Task<Void, Never>]? in
            guard !state.stopping else { return nil }
            state.stopping = true
            return Array(state.running.values)
        }
        guard let tasks else { return }
        for task in tasks { task.cancel() }
        for task in tasks { await task.value }
        socket.send(WorkerMessage.disconnect.encoded())
        socket.stop()
        state.withLock { $0.replica }?.close()
        client.close()
    }

    /// Sends READY; with `ifDue`, only when the back-off since the last attempt has passed.
    private func register(ifDue: Bool = false) {
        let due = state.withLock { state -> Bool in
            let now = now()
            if ifDue && now &- state.lastRegistration < UInt64(state.retryDelayMs) * 1_000_000 { return false }
            if ifDue { state.retryDelayMs = min(state.retryDelayMs * 2, 32_000) }
            state.lastRegistration = now
            return true
        }
        if due { socket.send(WorkerMessage.ready(registration.json).encoded()) }
    }

    private func now() -> UInt64 { DispatchTime.now().uptimeNanoseconds }

    /// Runs on the socket's thread: must stay quick.
    private func receive(_ message: Multipart) {
        state.withLock { $0.lastHeardFromBus = now() }
        let decoded: BusToWorkerMessage
        do {
            decoded = try BusToWorkerMessage.decode(message)
        } catch {
            logger.warning("ignored a bad message from the coordinator: \(error)")
            return
        }
        switch decoded {
        case .welcome(let welcome):
            let needsReplica = state.withLock { state in
                state.registered = true
                state.retryDelayMs = 1000
                state.reported = nil
                state.busHeartbeatMs = welcome.heartbeatMs
                return state.replica == nil
            }
            if needsReplica { startReplica(welcomeFeed: welcome.feed) }
            logger.info("registered as '\(options.name)' with \(welcome.accepted.count) skill(s)")
            for refused in welcome.refused { logger.warning("skill refused: \(refused)") }
        case .invoke(let invocation):
            start(invocation)
        case .cancel(let invocationID):
            state.withLock { $0.running[invocationID] }?.cancel()
        case .heartbeat(let intervalMs):
            if let intervalMs { state.withLock { $0.busHeartbeatMs = intervalMs } }
        case .error(let error):
            if error.code == .notRegistered {
                // The coordinator restarted or forgot us: register again (no faster than the back-off).
                state.withLock { $0.registered = false }
                register(ifDue: true)
            } else {
                logger.warning("coordinator: \(error)")
            }
        }
    }

    private func start(_ invocation: Invocation) {
        let refusal: SkillbusError? = state.withLock { state in
            if state.stopping { return SkillbusError(.agentLost, "agent '\(options.name)' is shutting down") }
            if state.running.count >= options.capacity {
                return SkillbusError(.busy, "agent '\(options.name)' is at capacity (\(options.capacity))")
            }
            // Created under the lock so that the task cannot finish before it is recorded.
            if state.skills[invocation.skill]?.executionStyle == .quick {
                state.running[invocation.invocationID] = Task(executorPreference: socket.executor) {
                    await self.execute(invocation)
                }
            } else {
                state.running[invocation.invocationID] = Task { await self.execute(invocation) }
            }
            return nil
        }
        if let refusal {
            socket.send(
                WorkerMessage.result(
                    invocationID: invocation.invocationID, status: .error, payload: refusal.json.serialized()
                ).encoded())
        }
    }

    private func execute(_ invocation: Invocation) async {
        var failure: String?
        let status: ReplyStatus
        let payload: [UInt8]
        do throws(SkillbusError) {
            let (skill, parameters) = try prepare(invocation)
            report(.executingSkill(skill.identifier))
            let context = SkillExecutionContext(
                roundID: invocation.roundID, sessionID: invocation.sessionID, agentName: options.name,
                invocationID: invocation.invocationID, deadline: .now + .milliseconds(invocation.deadlineMs),
                caller: self)
            do {
                let result = try await Self.run(skill, parameters: parameters, context: context)
                status = .ok
                payload = result.serialized()
            } catch {
                failure = error.code == .cancelled ? "cancelled" : error.message
                throw error
            }
        } catch {
            status = .error
            payload = error.json.serialized()
        }
        // Free the slot before the coordinator can hear of it, or its next dispatch could find us "full".
        let idle = state.withLock { state -> Bool in
            state.running[invocation.invocationID] = nil
            return state.running.isEmpty
        }
        socket.send(
            WorkerMessage.result(invocationID: invocation.invocationID, status: status, payload: payload).encoded())
        if let failure { report(.failed(failure)) }
        if idle { report(.idle) }
    }

    /// Runs a skill, turning whatever it throws into a `SkillbusError`.
    private static func run(
        _ skill: any AgentSkill, parameters: [String: JSONValue], context: SkillExecutionContext
    ) async throws(SkillbusError) -> SkillResult {
        do {
            return try await skill.execute(parameters: parameters, context: context)
        } catch let error as SkillbusError {
            throw error
        } catch is CancellationError {
            throw SkillbusError(.cancelled, "'\(skill.identifier)' was cancelled")
        } catch {
            throw SkillbusError(.skillFailed, "'\(skill.identifier)' failed: \(error)")
        }
    }

    /// Finds the skill and validates the parameters; nothing runs when this throws. The checks and their
    /// order are those of PROTOCOL §4.10 (steps 3-6), the wording that of its error table.
    private func prepare(_ invocation: Invocation) throws(SkillbusError) -> (any AgentSkill, [String: JSONValue]) {
        let (skill, offered) = state.withLock { state in
            (state.skills[invocation.skill], state.skills[invocation.skill] == nil ? state.skills.keys.sorted() : [])
        }
        guard let skill else {
            throw SkillbusError(
                .unknownSkill,
                "agent '\(options.name)' does not offer '\(invocation.skill)' (offers: "
                    + (offered.isEmpty ? "none" : offered.joined(separator: ", ")) + ")")
        }
        let parsed: JSONValue
        do {
            parsed = try JSONValue(parsing: invocation.parameters)
        } catch {
            throw SkillbusError(.invalidParameters, "parameters of '\(invocation.skill)' are not valid JSON: \(error)")
        }
        return (skill, try validate(parsed, for: skill))
    }

    private func validate(_ parameters: JSONValue, for skill: any AgentSkill) throws(SkillbusError) -> [String:
        JSONValue]
    {
        guard let object = parameters.objectValue else {
            throw SkillbusError(
                .invalidParameters,
                "parameters of '\(skill.identifier)' must be a JSON object, got \(parameters.typeName)")
        }
        return try skill.parameterSchema.validate(object, skill: skill.identifier)
    }

    /// Follows the registry from the feed WELCOME named, or the one the options name.
    private func startReplica(welcomeFeed: String?) {
        guard let feed = options.feed ?? welcomeFeed.map({ Endpoint.reachable($0, via: options.coordinator) }),
            !feed.isEmpty
        else {
            logger.warning("the coordinator named no feed endpoint; this agent holds no registry replica")
            return
        }
        do {
            let replica = try RegistryReplica(client: client, feedEndpoint: feed, context: context, logger: logger)
            let kept = state.withLock { state -> Bool in
                guard state.replica == nil, !state.stopping else { return false }
                state.replica = replica
                return true
            }
            if kept { logger.info("following the registry on \(feed)") } else { replica.close() }
        } catch {
            logger.warning("cannot follow the registry on \(feed): \(error)")
        }
    }

    /// Records a state change; `flushState` sends it. From another thread, wakes the I/O thread to do so.
    private func report(_ newState: AgentState) {
        state.withLock { state in
            if case .failed = newState {
                if state.failures.count < 16 { state.failures.append(newState) }
            } else {
                state.current = newState
            }
        }
        socket.wake()
    }

    /// Runs on the I/O thread before it waits: sends the state if it differs from the one last sent.
    private func flushState() {
        let changes = state.withLock { state -> [AgentState] in
            var changes = state.failures
            state.failures.removeAll()
            if let last = changes.last { state.reported = last }
            if state.reported != state.current {
                state.reported = state.current
                changes.append(state.current)
            }
            return changes
        }
        for change in changes { socket.send(WorkerMessage.state(change).encoded()) }
    }
}

extension AgentWorker: SkillCaller {
    /// A skill's sub-call: run here when this agent offers the skill, otherwise through the coordinator
    /// (same round, same session, the caller's remaining time).
    public func call(
        _ identifier: String, parameters: JSONValue, from context: SkillExecutionContext
    ) async throws -> SkillResult {
        if let skill = state.withLock({ $0.skills[identifier] }) {
            let validated = try validate(parameters, for: skill)
            return try await Self.run(skill, parameters: validated, context: context.child(invoking: identifier))
        }
        if let replica = state.withLock({ $0.replica }), replica.isSynced, replica.registry.skills[identifier] == nil {
            let offered = replica.registry.skills.keys.sorted().joined(separator: ", ")
            throw SkillbusError(
                .unknownSkill, "no agent offers skill '\(identifier)' (the registry holds: \(offered))",
                details: ["skill": .string(identifier)])
        }
        let remaining = context.deadline - .now
        guard remaining > .milliseconds(1) else {
            throw SkillbusError(.timeout, "no time left to call '\(identifier)' before the deadline")
        }
        let outcome = try await client.invoke(
            identifier, parameters: parameters, roundID: context.roundID, sessionID: context.sessionID,
            timeout: remaining)
        if outcome.status == .ok, let result = outcome.result { return result }
        throw outcome.error ?? SkillbusError(.internalError, "'\(identifier)' failed without an error")
    }
}
