/// A ROUTER routing id: which peer a message came from or goes to.
public struct PeerID: Hashable, Sendable, ExpressibleByArrayLiteral {
    public let bytes: [UInt8]

    public init(_ bytes: [UInt8]) { self.bytes = bytes }
    public init(arrayLiteral bytes: UInt8...) { self.bytes = bytes }

    // One call over the whole id instead of one per byte: peers are looked up for every message.
    public func hash(into hasher: inout Hasher) {
        bytes.withUnsafeBytes { hasher.combine(bytes: $0) }
    }
}

/// Something the coordinator's I/O layer must do. The state machine decides; the loop acts.
public enum CoordinatorAction: Sendable, Equatable {
    case toClient(PeerID, BusToClientMessage)
    case toWorker(PeerID, BusToWorkerMessage)
    case publish(FeedEvent)
}

/// The coordinator's routing logic as a plain value: registrations, least-loaded routing within
/// capacity, the bounded wait queue, deadlines and worker liveness. No sockets, no clocks:
/// time comes in as `now` (monotonic nanoseconds), so every decision is unit-testable.
public struct CoordinatorState: Sendable {
    public struct Settings: Sendable {
        public var heartbeatMs = 1000
        /// A worker is dead after this many of its heartbeat intervals without a word.
        public var missedHeartbeats = 3
        public var defaultTimeoutMs = 15_000
        /// Requests that may wait for a free provider, over all skills.
        public var queueLimit = 1024
        /// The feed endpoint as workers should reach it; sent in WELCOME so that they can hold a replica.
        public var feedEndpoint = ""
        /// Single-flight within a round: an invocation identical to one the round already ran (or is
        /// running) joins it instead of executing again.
        public var deduplication = true
        /// How long a finished invocation's outcome is kept for identical ones of its round.
        public var roundRetentionMs = 600_000
        /// Most finished outcomes kept; beyond it the oldest go first.
        public var retainedOutcomesLimit = 100_000
        /// Most finished ROUND documents kept for a round id sent again.
        public var retainedRoundsLimit = 10_000
        /// Most steps a plan may have.
        public var planStepLimit = 1000
        public init() {}
    }

    public struct Worker: Sendable {
        public let peer: PeerID
        public let name: String
        let nameFrame: [UInt8]
        public let capacity: Int
        public var heartbeatMs: Int
        public var skills: [String: SkillDescriptor]
        public var inFlight = 0
        public var lastHeard: UInt64
        public var state: AgentState = .idle
        /// Where the worker's own registry replica stood at its last heartbeat.
        public var registryPosition: RegistryPosition?
        /// The READY body it registered with (its skill list updated by SKILLS), and the WELCOME it got.
        var registration: JSONValue
        var welcome: JSONValue
    }

    struct Request: Sendable {
        /// Who gets the outcome.
        let origin: Waiter
        /// For a fan-out: the one agent that must run it.
        var target: PeerID?
        /// Set when identical invocations of the round share this execution: the outcome goes to all of them.
        var shared: SingleFlight.ExecutionID?
        // Kept as they came off the wire: they go out again in INVOKE and REPLY unchanged.
        let requestID: [UInt8]
        let roundID: [UInt8]
        let sessionID: [UInt8]
        let skill: String
        let parameters: [UInt8]
        let accepted: UInt64
        let deadline: UInt64
    }

    struct Running: Sendable {
        let request: Request
        let worker: PeerID
        /// The client was already answered (deadline passed); the slot stays taken until the worker reports.
        var answered = false
    }

    public let settings: Settings
    /// Whether to build `request.*` feed events. The coordinator clears it while no watcher subscribes to
    /// them, so the hot path does not make events nobody reads.
    public var publishesRequestEvents = true
    public internal(set) var workers: [PeerID: Worker] = [:]
    /// The authoritative registry and its update sequence.
    public private(set) var ledger: RegistryLedger
    var peerByName: [String: PeerID] = [:]
    /// Skill identifier → providers in registration order.
    var providers: [String: [PeerID]] = [:]
    var running: [String: Running] = [:]
    /// Executions that identical invocations of a round share, running or finished.
    var singleFlight: SingleFlight
    /// Rounds the bus runs for clients (ROUND), running or finished, by round id.
    var roundRuns: [ByteKey: RoundRun] = [:]
    var finishedRoundRuns = FinishOrder<ByteKey>()
    /// Rounds running now: only then can a REQUEST be a sub-call that their documents list.
    var runningRounds = 0
    /// Fan-out invocations waiting for a slot on the one agent they must run on (counted in `waitingCount`).
    var targetedWaiting: [PeerID: [Request]] = [:]
    /// Skill identifier → requests waiting for a free provider, oldest first.
    var waiting: [String: [Request]] = [:]
    public internal(set) var waitingCount = 0
    var nextInvocation: UInt64 = 0
    var rotation = 0
    var lastHeartbeatSent: UInt64 = 0

    /// Longest heartbeat interval a worker may announce (one hour).
    public static let maxHeartbeatMs = 3_600_000
    /// How long past its deadline an answered invocation keeps its slot, waiting for the worker's word.
    /// After that the slot is freed: the INVOKE or its RESULT was lost, or the worker ignores CANCEL.
    static let abandonAfterNanos: UInt64 = 5_000_000_000

    /// `epoch` names this coordinator's lifetime in registry messages; make it unique per start.
    public init(settings: Settings = Settings(), epoch: String = CoordinatorState.makeEpoch()) {
        self.settings = settings
        self.ledger = RegistryLedger(epoch: epoch)
        self.singleFlight = SingleFlight(retentionMs: settings.roundRetentionMs, limit: settings.retainedOutcomesLimit)
    }

    public static func makeEpoch() -> String {
        let hex = String(UInt64.random(in: 1...UInt64.max), radix: 16)
        return String(repeating: "0", count: 16 - hex.count) + hex
    }

    public var runningCount: Int { running.count }

    // MARK: Clients

    /// The timeout of a REQUEST or ROUND sent without one: its skill's own `defaultTimeoutMs` if it has one,
    /// else the bus default. A plan (no one skill; each step may have another) gets the bus default.
    func defaultTimeoutMs(skill: String?) -> Int {
        skill.flatMap { ledger.registry.skills[$0]?.descriptor.defaultTimeoutMs } ?? settings.defaultTimeoutMs
    }

    public mutating func handleInvoke(_ request: InvokeRequest, from client: PeerID, now: UInt64) -> [CoordinatorAction]
    {
        let timeoutMs = request.timeoutMs ?? defaultTimeoutMs(skill: request.skill)
        var pending = Request(
            origin: .client(client, requestID: request.$requestID), requestID: request.$requestID,
            roundID: request.$roundID,
            sessionID: request.$sessionID, skill: request.skill, parameters: request.parameters, accepted: now,
            deadline: now &+ UInt64(timeoutMs) * 1_000_000)
        if settings.deduplication {
            let admission = singleFlight.admit(
                round: request.$roundID, skill: request.skill, parameters: request.parameters,
                waiter: .client(client, requestID: request.$requestID),
                schema: { ledger.registry.skills[$0]?.descriptor.parameters })
            switch admission {
            case .first(let execution): pending.shared = execution
            case .joined:
                if runningRounds > 0 { noteSubCall(request, deduplicated: true) }
                return deduplicated(request, finished: nil)
            case .finished(let outcome):
                if runningRounds > 0 {
                    noteSubCall(request, deduplicated: true)
                    noteSubCallDone(roundID: request.$roundID, requestID: request.$requestID, outcome)
                }
                return deduplicated(request, finished: (client, outcome))
            case .unshared: break
            }
        }
        if runningRounds > 0 { noteSubCall(request, deduplicated: false) }
        return route(pending, now: now)
    }

    /// Every skill on offer with its descriptor and providers, each with capacity and current load.
    public func catalog() -> JSONValue {
        let skills = ledger.registry.skills.keys.sorted().map { identifier -> JSONValue in
            let skill = ledger.registry.skills[identifier]!
            var entry = skill.descriptor.json.objectValue ?? [:]
            entry["providers"] = .array(
                skill.providers.compactMap { name in
                    peerByName[name].flatMap { workers[$0] }.map { worker in
                        [
                            "agent": .string(worker.name), "capacity": .number(Double(worker.capacity)),
                            "inFlight": .number(Double(worker.inFlight)),
                        ]
                    }
                })
            return .object(entry)
        }
        return ["skills": .array(skills)]
    }

    /// The answer to SNAPSHOT: one ENTRY per agent, sorted by name, then the summary with the sequence.
    public func snapshot(requestID: String, for client: PeerID) -> [CoordinatorAction] {
        let agents = ledger.serializedEntries.keys.sorted()
        var actions = agents.map { name in
            CoordinatorAction.toClient(client, .entry(requestID: requestID, entry: ledger.serializedEntries[name]!))
        }
        let summary: JSONValue = [
            "epoch": .string(ledger.epoch), "seq": .number(Double(ledger.sequence)),
            "agents": .number(Double(agents.count)), "heartbeatMs": .number(Double(settings.heartbeatMs)),
        ]
        actions.append(.toClient(client, .snapshot(requestID: requestID, summary: summary)))
        return actions
    }

    /// Live agents with their skills, capacity, load, state, heartbeat age and replica position.
    public mutating func agentsListing(now: UInt64) -> JSONValue {
        let position = ledger.position()
        let agents = workers.values.sorted { $0.name < $1.name }.map { worker -> JSONValue in
            let ageMs = now > worker.lastHeard ? Double((now - worker.lastHeard) / 1_000_000) : 0
            var entry: [String: JSONValue] = [
                "agent": .string(worker.name), "capacity": .number(Double(worker.capacity)),
                "inFlight": .number(Double(worker.inFlight)), "state": worker.state.json,
                "skills": .array(worker.skills.keys.sorted().map { .string($0) }),
                // Any message from the worker is a sign of life, not only HEARTBEAT.
                "heartbeatMs": .number(Double(worker.heartbeatMs)), "lastHeartbeatAgeMs": .number(ageMs),
                "registry": worker.registryPosition?.json ?? .null,
            ]
            if let replica = worker.registryPosition {
                entry["registryInSync"] = .bool(replica == position)
            }
            return .object(entry)
        }
        return ["agents": .array(agents), "registry": position.json]
    }

    /// Least in-flight first among providers with a free slot; ties go round-robin.
    mutating func pickProvider(_ candidates: [PeerID]) -> PeerID? {
        var best: PeerID?
        var bestLoad = Int.max
        let count = candidates.count
        rotation &+= 1
        for offset in 0..<count {
            let peer = candidates[(rotation &+ offset) % count]
            guard let worker = workers[peer], worker.inFlight < worker.capacity else { continue }
            if worker.inFlight < bestLoad {
                best = peer
                bestLoad = worker.inFlight
                if bestLoad == 0 { break }
            }
        }
        return best
    }

    mutating func dispatch(_ request: Request, to peer: PeerID, now: UInt64) -> [CoordinatorAction] {
        nextInvocation &+= 1
        let invocationID = "i" + String(nextInvocation)
        workers[peer]!.inFlight += 1
        running[invocationID] = Running(request: request, worker: peer)
        let remainingMs = request.deadline > now ? Int((request.deadline - now) / 1_000_000) : 0
        let invocation = Invocation(
            invocationID: invocationID, frames: request.roundID, request.sessionID, skill: request.skill,
            deadlineMs: max(1, remainingMs), parameters: request.parameters)
        if case .step(let roundKey, let index) = request.origin, let run = roundRuns[roundKey] {
            return [
                .toWorker(peer, .invoke(invocation)),
                .publish(
                    .invocationDispatched(
                        round: run.roundText, invocation: run.invocations[index].id, skill: request.skill,
                        agent: workers[peer]!.name, dispatch: invocationID)),
            ]
        }
        guard publishesRequestEvents else { return [.toWorker(peer, .invoke(invocation))] }
        return [
            .toWorker(peer, .invoke(invocation)),
            .publish(
                .requestDispatched(
                    round: request.roundText, request: request.requestText, skill: request.skill,
                    agent: workers[peer]!.name, invocation: invocationID)),
        ]
    }

    /// `executed`: whether the invocation reached an agent. Only then is the outcome kept for identical
    /// invocations of the round; one that never ran (unknown skill, busy) may be tried again.
    mutating func fail(
        _ request: Request, _ error: SkillbusError, agent: String, executed: Bool = true, now: UInt64
    ) -> [CoordinatorAction] {
        reply(
            request, status: .error, agent: Array(agent.utf8), payload: error.json.serialized(), executed: executed,
            now: now)
    }

    mutating func reply(
        _ request: Request, status: ReplyStatus, agent: [UInt8], payload: [UInt8], executed: Bool = true, now: UInt64
    ) -> [CoordinatorAction] {
        let micros = Int((now &- request.accepted) / 1000)
        let outcome = Outcome(status: status, agent: agent, payload: payload, durationMicros: micros)
        var waiters = [request.origin]
        if let id = request.shared {
            waiters += singleFlight.finish(id, outcome: executed ? outcome : nil, now: now)
        }
        var actions: [CoordinatorAction] = []
        for waiter in waiters {
            switch waiter {
            case .client(let client, let requestID):
                actions.append(.toClient(client, outcome.reply(requestID: requestID, roundID: request.roundID)))
                if runningRounds > 0 { noteSubCallDone(roundID: request.roundID, requestID: requestID, outcome) }
            case .step(let round, let index):
                actions += stepDone(round, index, outcome, deduplicated: waiter != request.origin, now: now)
            }
        }
        guard publishesRequestEvents, case .client = request.origin else { return actions }
        actions.append(
            .publish(
                .requestDone(
                    round: request.roundText, request: request.requestText, skill: request.skill,
                    agent: String(decoding: agent, as: UTF8.self), status: status, durationMicros: micros,
                    payload: status == .error ? payload : [])))
        return actions
    }

    // MARK: Single-flight within a round

    /// An invocation identical to one of its round is not executed: a finished outcome is answered at
    /// once; a running one will answer it with the rest.
    func deduplicated(
        _ request: InvokeRequest, finished: (client: PeerID, outcome: Outcome)?
    ) -> [CoordinatorAction] {
        var actions: [CoordinatorAction] = []
        if let (client, outcome) = finished {
            actions.append(.toClient(client, outcome.reply(requestID: request.$requestID, roundID: request.$roundID)))
        }
        guard publishesRequestEvents else { return actions }
        actions.append(
            .publish(
                .requestDeduplicated(
                    round: request.roundID, request: request.requestID, skill: request.skill,
                    finished: finished != nil)))
        return actions
    }

    /// Invocations the coordinator keeps for single-flight: running or finished.
    public var sharedExecutionCount: Int { singleFlight.count }

    // MARK: Workers

    public mutating func handleWorker(_ message: WorkerMessage, from peer: PeerID, now: UInt64) -> [CoordinatorAction] {
        if case .ready(let body) = message { return register(body, from: peer, now: now) }
        guard workers[peer] != nil else {
            if case .disconnect = message { return [] }
            return [.toWorker(peer, .error(SkillbusError(.notRegistered, "this peer is not registered; send READY")))]
        }
        workers[peer]!.lastHeard = now
        switch message {
        case .ready: return []  // handled above
        case .heartbeat(let intervalMs, let registry):
            if let intervalMs { workers[peer]!.heartbeatMs = intervalMs }
            if let registry { workers[peer]!.registryPosition = registry }
            return []
        case .skills(let list):
            return changeSkills(of: peer, to: list, now: now)
        case .state(let state):
            guard workers[peer]!.state != state else { return [] }
            workers[peer]!.state = state
            return [.publish(.agentState(agent: workers[peer]!.name, state: state))]
        case .result(let invocationID, let status, let payload):
            return finish(invocationID, status: status, payload: payload, from: peer, now: now)
        case .disconnect:
            return remove(peer, reason: "disconnected", now: now)
        }
    }

    mutating func finish(
        _ invocationID: String, status: ReplyStatus, payload: [UInt8], from peer: PeerID, now: UInt64
    ) -> [CoordinatorAction] {
        // A result for an unknown or foreign invocation is late or bogus: drop it, keep serving.
        guard let entry = running[invocationID], entry.worker == peer else { return [] }
        running[invocationID] = nil
        workers[peer]!.inFlight -= 1
        var actions: [CoordinatorAction] = []
        if !entry.answered {
            actions = reply(entry.request, status: status, agent: workers[peer]!.nameFrame, payload: payload, now: now)
        }
        actions += dispatchWaiting(to: peer, now: now)
        return actions
    }

    /// Gives a worker with free slots the oldest requests waiting for any of its skills.
    mutating func dispatchWaiting(to peer: PeerID, now: UInt64) -> [CoordinatorAction] {
        var actions: [CoordinatorAction] = []
        // Fan-out invocations that can run nowhere else go first.
        while var queue = targetedWaiting[peer], !queue.isEmpty, let worker = workers[peer],
            worker.inFlight < worker.capacity
        {
            let request = queue.removeFirst()
            targetedWaiting[peer] = queue.isEmpty ? nil : queue
            waitingCount -= 1
            actions += dispatch(request, to: peer, now: now)
        }
        while waitingCount > 0, let worker = workers[peer], worker.inFlight < worker.capacity {
            var oldest: (skill: String, accepted: UInt64)?
            for skill in worker.skills.keys {
                if let head = waiting[skill]?.first, oldest == nil || head.accepted < oldest!.accepted {
                    oldest = (skill, head.accepted)
                }
            }
            guard let skill = oldest?.skill else { break }
            let request = waiting[skill]!.removeFirst()
            if waiting[skill]!.isEmpty { waiting[skill] = nil }
            waitingCount -= 1
            actions += dispatch(request, to: peer, now: now)
        }
        return actions
    }

    mutating func register(_ body: JSONValue, from peer: PeerID, now: UInt64) -> [CoordinatorAction] {
        let name = body["name"]?.stringValue ?? ""
        func refuse(_ error: SkillbusError) -> [CoordinatorAction] {
            [.toWorker(peer, .error(error)), .publish(.registrationRefused(agent: name, error: error))]
        }
        guard SkillDescriptor.isValidIdentifier(name) else {
            return refuse(
                SkillbusError(.invalidRegistration, "agent name '\(name)' is invalid: use 1-128 of a-z A-Z 0-9 . _ -"))
        }
        guard let capacity = body["capacity"]?.intValue, (1...100_000).contains(capacity) else {
            return refuse(
                SkillbusError(.invalidRegistration, "agent '\(name)': 'capacity' must be an integer from 1 to 100000"))
        }
        var heartbeatMs = settings.heartbeatMs
        if let value = body["heartbeatMs"] {
            guard let ms = value.intValue, (10...CoordinatorState.maxHeartbeatMs).contains(ms) else {
                return refuse(
                    SkillbusError(
                        .invalidRegistration,
                        "agent '\(name)': 'heartbeatMs' must be an integer from 10 to \(CoordinatorState.maxHeartbeatMs)"
                    ))
            }
            heartbeatMs = ms
        }
        guard let skillList = body["skills"]?.arrayValue else {
            return refuse(SkillbusError(.invalidRegistration, "agent '\(name)': 'skills' must be an array"))
        }
        if let holder = peerByName[name], holder != peer {
            return refuse(
                SkillbusError(
                    .nameTaken,
                    "agent name '\(name)' is already registered by a live worker; retry after it leaves"))
        }
        var actions: [CoordinatorAction] = []
        if let existing = workers[peer] {
            // The same READY again (a worker that queued several while the bus was away): just welcome it.
            if existing.registration == body {
                workers[peer]!.lastHeard = now
                return [.toWorker(peer, .welcome(existing.welcome))]
            }
            actions += remove(peer, reason: "registered again", now: now)
        }
        let (skills, refused, refusals) = admit(skillList, agent: name)
        actions += refusals
        let welcome = makeWelcome(skills, refused)
        workers[peer] = Worker(
            peer: peer, name: name, nameFrame: Array(name.utf8), capacity: capacity, heartbeatMs: heartbeatMs,
            skills: skills, lastHeard: now, registration: body, welcome: welcome)
        peerByName[name] = peer
        for identifier in skills.keys { providers[identifier, default: []].append(peer) }
        actions.append(.toWorker(peer, .welcome(welcome)))
        actions.append(.publish(.agentJoined(agent: name, skills: skills.keys.sorted(), capacity: capacity)))
        actions += publishEntry(of: peer, reason: "joined")
        actions.append(.publish(.agentState(agent: name, state: .idle)))
        actions += dispatchWaiting(to: peer, now: now)
        return actions
    }

    /// A registered worker replaces its skill list (SKILLS): one registry update, in-flight work untouched.
    mutating func changeSkills(of peer: PeerID, to list: JSONValue, now: UInt64) -> [CoordinatorAction] {
        guard let items = list.arrayValue else {
            let error = SkillbusError(
                .invalidRegistration, "SKILLS takes a JSON array of skill descriptors, got \(list.typeName)")
            return [
                .toWorker(peer, .error(error)),
                .publish(.registrationRefused(agent: workers[peer]!.name, error: error)),
            ]
        }
        let worker = workers[peer]!
        var (skills, refused, actions) = admit(items, agent: worker.name)
        let withdrawn = worker.skills.keys.filter { skills[$0] == nil }
        for identifier in withdrawn {
            providers[identifier]?.removeAll { $0 == peer }
            if providers[identifier]?.isEmpty == true { providers[identifier] = nil }
        }
        for identifier in skills.keys where worker.skills[identifier] == nil {
            providers[identifier, default: []].append(peer)
        }
        var registration = worker.registration.objectValue ?? [:]
        registration["skills"] = list
        let welcome = makeWelcome(skills, refused)
        workers[peer]!.skills = skills
        workers[peer]!.registration = .object(registration)
        workers[peer]!.welcome = welcome
        actions.append(.toWorker(peer, .welcome(welcome)))
        actions += publishEntry(of: peer, reason: "skills changed")
        actions += failWaitingWithoutProvider(withdrawn, reason: "agent '\(worker.name)' withdrew it", now: now)
        actions += dispatchWaiting(to: peer, now: now)
        return actions
    }

    /// Checks each offered descriptor: valid, listed once, and not in conflict with another agent's schema.
    /// Refused ones are reported to the worker (in WELCOME) and on the feed; the rest are admitted.
    func admit(_ items: [JSONValue], agent name: String) -> (
        skills: [String: SkillDescriptor], refused: [JSONValue], actions: [CoordinatorAction]
    ) {
        var skills: [String: SkillDescriptor] = [:]
        var refused: [JSONValue] = []
        var actions: [CoordinatorAction] = []
        for item in items {
            do throws(SkillbusError) {
                let descriptor = try SkillDescriptor(json: item)
                guard skills[descriptor.identifier] == nil else {
                    throw SkillbusError(.invalidRegistration, "skill '\(descriptor.identifier)' is listed twice")
                }
                if let conflict = ledger.registry.conflict(descriptor, agent: name) { throw conflict }
                skills[descriptor.identifier] = ledger.registry.canonical(descriptor, agent: name)
            } catch {
                refused.append(error.json)
                actions.append(.publish(.registrationRefused(agent: name, error: error)))
            }
        }
        return (skills, refused, actions)
    }

    func makeWelcome(_ skills: [String: SkillDescriptor], _ refused: [JSONValue]) -> JSONValue {
        [
            "heartbeatMs": .number(Double(settings.heartbeatMs)),
            "accepted": .array(skills.keys.sorted().map { .string($0) }), "refused": .array(refused),
            "feed": .string(settings.feedEndpoint), "epoch": .string(ledger.epoch),
        ]
    }

    /// Records a worker's current skills in the registry; the update goes on the feed.
    mutating func publishEntry(of peer: PeerID, reason: String) -> [CoordinatorAction] {
        guard let worker = workers[peer] else { return [] }
        let entry = Registry.Agent(name: worker.name, capacity: worker.capacity, skills: Array(worker.skills.values))
        guard let update = ledger.set(worker.name, to: entry, reason: reason) else { return [] }
        return [.publish(.registryUpdate(update))]
    }

    /// Forgets a worker: its skills leave the registry and its running invocations fail with agent_lost.
    mutating func remove(_ peer: PeerID, reason: String, now: UInt64) -> [CoordinatorAction] {
        guard let worker = workers.removeValue(forKey: peer) else { return [] }
        peerByName[worker.name] = nil
        for identifier in worker.skills.keys {
            providers[identifier]?.removeAll { $0 == peer }
            if providers[identifier]?.isEmpty == true { providers[identifier] = nil }
        }
        var actions: [CoordinatorAction] = [.publish(.agentLeft(agent: worker.name, reason: reason))]
        if let update = ledger.set(worker.name, to: nil, reason: reason) {
            actions.append(.publish(.registryUpdate(update)))
        }
        for (invocationID, entry) in running where entry.worker == peer {
            running[invocationID] = nil
            guard !entry.answered else { continue }
            let error = SkillbusError(
                .agentLost, "agent '\(worker.name)' was lost while running '\(entry.request.skill)' (\(reason))")
            actions += fail(entry.request, error, agent: worker.name, now: now)
        }
        actions += failWaitingWithoutProvider(
            Array(worker.skills.keys), reason: "agent '\(worker.name)' left (\(reason))", now: now)
        for request in targetedWaiting.removeValue(forKey: peer) ?? [] {
            waitingCount -= 1
            let error = SkillbusError(.agentLost, "agent '\(worker.name)' left (\(reason)) before it ran this")
            actions += fail(request, error, agent: worker.name, executed: false, now: now)
        }
        return actions
    }

    /// Requests waiting for a skill nobody offers any more would only time out: fail them now.
    mutating func failWaitingWithoutProvider(
        _ identifiers: [String], reason: String, now: UInt64
    ) -> [CoordinatorAction] {
        var actions: [CoordinatorAction] = []
        for identifier in identifiers where providers[identifier] == nil {
            for request in waiting.removeValue(forKey: identifier) ?? [] {
                waitingCount -= 1
                let error = SkillbusError(
                    .unknownSkill, "no agent offers '\(identifier)' any more (\(reason)) while the request waited")
                actions += fail(request, error, agent: "", executed: false, now: now)
            }
        }
        return actions
    }

    // MARK: Time

    /// Heartbeats out, dead workers out, expired requests answered. Call it a few times a second.
    public mutating func tick(now: UInt64) -> [CoordinatorAction] {
        var actions: [CoordinatorAction] = []
        singleFlight.evict(now: now)
        evictRoundRuns(now: now)
        for (peer, queue) in targetedWaiting {
            let (expired, kept) = queue.split { $0.deadline <= now }
            guard !expired.isEmpty else { continue }
            targetedWaiting[peer] = kept.isEmpty ? nil : kept
            waitingCount -= expired.count
            for request in expired {
                let error = SkillbusError(
                    .timeout, "agent '\(workers[peer]?.name ?? "")' had no free slot before the deadline")
                actions += fail(request, error, agent: "", executed: false, now: now)
            }
        }
        for (peer, worker) in workers {
            let silence = now &- worker.lastHeard
            let allowed = UInt64(settings.missedHeartbeats * max(worker.heartbeatMs, 1)) * 1_000_000
            if worker.lastHeard < now && silence > allowed {
                let seconds = Double(silence / 1_000_000) / 1000
                actions += remove(peer, reason: "no heartbeat for \(seconds) s", now: now)
            }
        }
        if now &- lastHeartbeatSent >= UInt64(settings.heartbeatMs) * 1_000_000 {
            lastHeartbeatSent = now
            for peer in workers.keys { actions.append(.toWorker(peer, .heartbeat(intervalMs: settings.heartbeatMs))) }
            actions.append(
                .publish(
                    .registryHeartbeat(
                        epoch: ledger.epoch, sequence: ledger.sequence, intervalMs: settings.heartbeatMs)))
        }
        for (invocationID, entry) in running
        where entry.answered && entry.request.deadline &+ Self.abandonAfterNanos <= now {
            running[invocationID] = nil
            guard workers[entry.worker] != nil else { continue }
            workers[entry.worker]!.inFlight -= 1
            actions += dispatchWaiting(to: entry.worker, now: now)
        }
        for (invocationID, entry) in running where !entry.answered && entry.request.deadline <= now {
            running[invocationID]!.answered = true
            let agent = workers[entry.worker]?.name ?? ""
            let timeoutMs = (entry.request.deadline - entry.request.accepted) / 1_000_000
            let error = SkillbusError(
                .timeout, "'\(entry.request.skill)' on agent '\(agent)' did not finish within \(timeoutMs) ms")
            actions += fail(entry.request, error, agent: agent, now: now)
            actions.append(.toWorker(entry.worker, .cancel(invocationID: invocationID)))
        }
        if waitingCount > 0 {
            for (skill, queue) in waiting {
                let (expired, kept) = queue.split { $0.deadline <= now }
                guard !expired.isEmpty else { continue }
                waiting[skill] = kept.isEmpty ? nil : kept
                waitingCount -= expired.count
                for request in expired {
                    let timeoutMs = (request.deadline - request.accepted) / 1_000_000
                    let error = SkillbusError(
                        .timeout, "no agent offering '\(skill)' had a free slot within \(timeoutMs) ms")
                    actions += fail(request, error, agent: "", executed: false, now: now)
                }
            }
        }
        return actions
    }
}

extension CoordinatorState.Request {
    var requestText: String { String(decoding: requestID, as: UTF8.self) }
    var roundText: String { String(decoding: roundID, as: UTF8.self) }
}

extension Array {
    /// The elements that satisfy `condition` and those that do not, in order, in one pass.
    func split(by condition: (Element) -> Bool) -> (matching: [Element], rest: [Element]) {
        var matching: [Element] = []
        var rest: [Element] = []
        for element in self {
            if condition(element) { matching.append(element) } else { rest.append(element) }
        }
        return (matching, rest)
    }
}
