import SkillbusZMQ

/// A ROUTER routing id: which peer a message came from or goes to (inline up to 16 bytes: RoutingID.swift).
public typealias PeerID = RoutingID

/// Something the coordinator's I/O layer must do. The state machine decides; the loop acts.
public enum CoordinatorAction: Sendable, Equatable {
    case toClient(PeerID, BusToClientMessage)
    case toWorker(PeerID, BusToWorkerMessage)
    case publish(FeedEvent)
    /// Hand an entry to the round journal (only with a data directory; PROTOCOL §3.5.9).
    case journal(JournalEntry)
}


/// The coordinator's logic as a plain value: registrations, least-loaded routing within capacity, the
/// bounded wait queue, rounds, single-flight, deadlines and worker liveness. No sockets, no clocks:
/// time comes in as `now` (monotonic nanoseconds), so every decision is unit-testable.
///
/// It is composed of thirteen parts, each of which owns its invariants and offers operations, not fields, and is
/// tested alone (docs/ARCHITECTURE.md lists them with their invariants):
/// - `workers` (`WorkerTable`): workers by peer, name and skill, and their heartbeat schedule;
/// - `ledger` (`RegistryLedger`): the authoritative registry; `descriptors` (`DescriptorIndex`): what its
///   descriptors say that every request reads;
/// - `requests` (`RequestTable`): every accepted request, one entry each in its phase (confirming, queued, backing
///   off, running), with the wait queues, the retry order and every worker's load;
/// - `parked` (`ParkedRequests`): what was accepted and waits to start (startup grace, a turn's lease, the journal);
/// - `turns` (`TurnTable`): turns, the leases and claims they hold, cancelled turns' rounds;
/// - `queries` (`PendingQueries`), `rounds` (`RoundTable`), `singleFlight` (`SingleFlight`), `affinity`
///   (`SessionAffinity`), `roster` (`SessionRoster`), `cache` (`ResultCache`), `rateLimiter` (`RateLimiter`).
/// The extensions hold the paths through them: routing (CoordinatorState+Routing), membership (+Membership),
/// cancellation (+Cancel, +Unstarted), listings (+Listings) and rounds (Rounds/).
public struct CoordinatorState: Sendable {
    public let settings: Settings
    /// Whether to build `request.*` feed events. The coordinator clears it while no watcher subscribes to
    /// them, so the hot path does not make events nobody reads.
    public var publishesRequestEvents = true
    /// The same for the events of a round's life (`round.accepted`, `invocation.dispatched`, `invocation.done`,
    /// `invocation.deduplicated`, `round.done`).
    public var publishesRoundEvents = true
    /// The same for a turn's states and calls (`agent.state` with a turn, `turn.call`): while nobody watches
    /// them, the bus does not read the ones a worker left for it in the turn document (PROTOCOL §3.7).
    public var publishesTurnEvents = true
    /// The coordinator's group, when it leads one (AGENTS, `/metrics`); set by its thread (PROTOCOL §3.11).
    public var group: GroupStatus?
    public internal(set) var workers = WorkerTable()
    /// The authoritative registry and its update sequence.
    public internal(set) var ledger: RegistryLedger
    /// Skills' attempt timeouts and cache lifetimes, as the registry's descriptors say them.
    var descriptors = DescriptorIndex()
    /// Every request accepted and not answered for good, in its phase: confirming, queued, backing off, running.
    var requests: RequestTable
    /// What was accepted and waits to start: in the startup grace, behind a turn's lease, for the journal.
    var parked = ParkedRequests()
    /// Turns waiting for their agent's TURNEND, with the leases, claims and cancelled rounds they hold.
    var turns = TurnTable()
    /// QUERYs waiting for their worker's ANSWER.
    var queries = PendingQueries(prefix: "q")
    /// Rounds the bus runs for clients (ROUND), running or finished, by round id.
    var rounds = RoundTable()
    /// Journaled rounds that started before the journal answered their accept (CoordinatorState+EarlyRounds).
    var earlyRounds: [ByteKey: EarlyRound] = [:]
    /// The round ids the journal may hold (JournalIDs).
    var journalIDs = JournalIDs()
    /// Executions that identical invocations of a round share, running or finished.
    var singleFlight: SingleFlight
    /// The agent each session went to last: its later invocations go there too.
    var affinity: SessionAffinity
    /// Every agent that served each session, with its role and when (CoordinatorState+Roster).
    var roster: SessionRoster
    /// Outcomes of pure skills kept across rounds (CoordinatorState+Cache).
    var cache: ResultCache
    /// The token buckets of `settings.rateLimits`.
    var rateLimiter: RateLimiter

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
        self.affinity = SessionAffinity(limit: settings.sessionAffinityLimit)
        self.roster = SessionRoster(limit: settings.sessionAffinityLimit, journaled: settings.journaled)
        self.rateLimiter = RateLimiter(settings.rateLimits)
        self.cache = ResultCache(limitBytes: settings.cacheBytesLimit)
        // The retries' jitter is repeatable from the epoch.
        self.requests = RequestTable(
            jitterSeed: epoch.utf8.reduce(0xcbf2_9ce4_8422_2325) { ($0 ^ UInt64($1)) &* 0x100_0000_01b3 })
    }

    public static func makeEpoch() -> String {
        let hex = String(UInt64.random(in: 1...UInt64.max), radix: 16)
        return String(repeating: "0", count: 16 - hex.count) + hex
    }

    public var runningCount: Int { requests.runningCount }
    /// Requests waiting for a free slot, over all queues.
    public var waitingCount: Int { requests.queuedCount }
    /// Attempts waiting out their backoff before they are retried.
    public var retryingCount: Int { requests.backingOffCount }
    /// Invocations the coordinator keeps for single-flight: running or finished.
    public var sharedExecutionCount: Int { singleFlight.count }
    /// Entries and bytes in the result cache.
    public var cacheCount: (entries: Int, bytes: Int) { (cache.count, cache.bytes) }

    /// The timeout of a REQUEST or ROUND sent without one: its skill's own `defaultTimeoutMs` if it has one,
    /// else the bus default. A plan (no one skill; each step may have another) gets the bus default.
    func defaultTimeoutMs(skill: String?) -> Int {
        Self.defaultTimeoutMs(skill: skill, ledger: ledger, settings: settings)
    }

    /// The same, for a closure that must not capture the whole state while a part of it changes.
    static func defaultTimeoutMs(skill: String?, ledger: RegistryLedger, settings: Settings) -> Int {
        skill.flatMap { ledger.registry.skills[$0]?.descriptor.defaultTimeoutMs } ?? settings.defaultTimeoutMs
    }

    /// A skill's parameter schema as the registry holds it, for canonical parameters.
    ///
    /// Where a lookup is passed on, pass a closure that reads `ledger`, never `schema(of:)` itself: the
    /// method reference captures a copy of the whole state, and the next change to single-flight would
    /// then copy its table, on every request.
    func schema(of skill: String) -> ParameterSchema? { ledger.registry.skills[skill]?.descriptor.parameters }

    // MARK: Clients

    public mutating func handleInvoke(_ request: InvokeRequest, from client: PeerID, now: UInt64) -> [CoordinatorAction]
    {
        if turns.hasLeases, parkIfLeased(request, from: client, now: now) { return [] }
        if parked.graceEnds > now, parkInGrace(request, from: client, now: now) { return [] }
        return acceptInvoke(request, from: client, accepted: now, now: now)
    }

    /// A REQUEST the bus decides on now; its time counts from `accepted` (earlier when it waited for a
    /// turn's round).
    mutating func acceptInvoke(
        _ request: InvokeRequest, from client: PeerID, accepted: UInt64, now: UInt64
    ) -> [CoordinatorAction] {
        let timeoutMs = request.timeoutMs ?? defaultTimeoutMs(skill: request.skill)
        var pending = Request(
            origin: .client(client, requestID: request.$requestID), requestID: request.$requestID,
            roundID: request.$roundID,
            sessionID: request.$sessionID, skill: request.skill, parameters: request.parameters, accepted: accepted,
            deadline: accepted &+ UInt64(timeoutMs) * 1_000_000)
        pending.client = client
        if turns.isCancelled(round: request.$roundID) {
            let error = SkillbusError(.cancelled, "the turn that made this call was cancelled")
            return fail(pending, error, agent: "", executed: false, now: now)
        }
        let inRound = rounds.runningCount > 0
        if let lifetime = descriptors.cacheLifetimeMs(of: request.skill) {
            let answer = answerFromCache(
                request, &pending, lifetimeMs: lifetime, client: client, inRound: inRound, now: now)
            if let answer { return answer }
        }
        if settings.deduplication {
            let admission = singleFlight.admit(
                round: request.$roundID, skill: request.skill, parameters: request.parameters,
                key: pending.cacheKey,  // the cache's key is the same: computed once
                waiter: .client(client, requestID: request.$requestID),
                schema: { ledger.registry.skills[$0]?.descriptor.parameters })
            switch admission {
            case .first(let execution): pending.shared = execution
            case .joined(let execution):
                if inRound { noteSubCall(request, deduplicated: true) }
                let waiter = Waiter.client(client, requestID: request.$requestID)
                requests.waiters.join(waiter, execution, round: request.$roundID)
                return deduplicated(request, finished: nil)
            case .finished(let outcome):
                if inRound {
                    noteSubCall(request, deduplicated: true)
                    noteSubCallDone(roundID: request.$roundID, requestID: request.$requestID, outcome)
                }
                return deduplicated(request, finished: (client, outcome))
            case .unshared: break
            }
        }
        if inRound { noteSubCall(request, deduplicated: false) }
        return route(pending, now: now)
    }

    // MARK: Workers

    public mutating func handleWorker(_ message: WorkerMessage, from peer: PeerID, now: UInt64) -> [CoordinatorAction] {
        if case .ready(let body) = message { return register(body, from: peer, now: now) + retryGraceParked(now: now) }
        guard workers.update(peer, { $0.lastHeard = now }) != nil else {
            if case .disconnect = message { return [] }
            return [.toWorker(peer, .error(SkillbusError(.notRegistered, "this peer is not registered; send READY")))]
        }
        switch message {
        case .ready: return []  // handled above
        case .heartbeat(let intervalMs, let registry):
            workers.update(peer) { worker in
                if let intervalMs { worker.heartbeatMs = intervalMs }
                if let registry { worker.registryPosition = registry }
            }
            return []
        case .skills(let list):
            return changeSkills(of: peer, to: list, now: now) + retryGraceParked(now: now)
        case .state(let state):
            let name = workers.update(peer) { worker -> String? in
                guard worker.state != state else { return nil }
                worker.state = state
                return worker.name
            }
            guard let name = name ?? nil else { return [] }
            return [.publish(.agentState(agent: name, state: state))]
        case .result(let invocationID, let status, let payload):
            return finish(invocationID, status: status, payload: payload, from: peer, now: now)
        case .disconnect:
            return remove(peer, reason: "disconnected", now: now)
        case .answer(let queryID, let answer):
            return relayAnswer(queryID, answer, from: peer)
        case .context(let status):
            return noteContext(status, from: peer)
        case .turnState(let state, let turn):
            return noteTurnState(state, turn, from: peer)
        case .turnEnd(let turnID, let answer, let handoff):
            let reports = unsentReports(of: turnID, answer, from: peer)
            if let handoff { return reports + handOff(turnID, answer, handoff, from: peer, now: now) }
            return reports + relayTurnEnd(turnID, answer, from: peer, now: now)
        case .stream(let turnID, let text):
            return relayStream(turnID, text, from: peer)
        case .claim(let turnID, let claimID, let skill, let parameters):
            return noteClaim(turnID: turnID, claimID: claimID, skill: skill, parameters: parameters, from: peer, now: now)
        case .called(let turnID, let claimID, let skill, let parameters, let status, let payload):
            return noteCalled(
                turnID: turnID, claimID: claimID, skill: skill, parameters: parameters, status: status, payload: payload,
                from: peer, now: now)
        case .release(let turnID):
            return noteRelease(turnID: turnID, from: peer, now: now)
        case .offer(let turnID, let callID, let skill, let parameters):
            return noteOffer(turnID: turnID, callID: callID, skill: skill, parameters: parameters, from: peer, now: now)
        case .step(let turnID, let call):
            return noteStep(turnID, call, from: peer)
        case .output(let invocationID, let batch):
            return relayOutput(invocationID, batch, from: peer)
        }
    }

    // MARK: Time

    /// Heartbeats out, dead workers out, expired requests answered. Call it a few times a second.
    public mutating func tick(now: UInt64) -> [CoordinatorAction] {
        var actions = fireTimers(now: now)
        singleFlight.evict(now: now)
        rounds.evict(
            now: now, retentionNanos: UInt64(settings.roundRetentionMs) * 1_000_000,
            limit: settings.retainedRoundsLimit)
        for (target, request) in requests.removeExpiredQueued(now: now, targeted: true) {
            let full = "agent '\(target.flatMap { workers[$0] }?.name ?? "")' had no free slot before the deadline"
            actions += fail(request, waitedTooLong(request, full, now: now), agent: "", executed: false, now: now)
        }
        for worker in workers.all {
            let silence = now &- worker.lastHeard
            let allowed = UInt64(settings.missedHeartbeats * max(worker.heartbeatMs, 1)) * 1_000_000
            if worker.lastHeard < now && silence > allowed {
                let seconds = Double(silence / 1_000_000) / 1000
                actions += remove(worker.peer, reason: "no heartbeat for \(seconds) s", now: now)
            }
        }
        if workers.heartbeatDue(now: now, interval: UInt64(settings.heartbeatMs) * 1_000_000) {
            for peer in workers.peers { actions.append(.toWorker(peer, .heartbeat(intervalMs: settings.heartbeatMs))) }
            actions.append(
                .publish(
                    .registryHeartbeat(
                        epoch: ledger.epoch, sequence: ledger.sequence, intervalMs: settings.heartbeatMs)))
        }
        for peer in requests.abandon(now: now, grace: Self.abandonAfterNanos, workers: &workers) {
            actions += dispatchWaiting(to: peer, now: now)
        }
        for running in requests.answerRunning(where: { $0.attemptEnds <= now }) {
            let agent = workers[running.worker]?.name ?? ""
            let request = running.request
            let error =
                request.deadline <= now
                ? SkillbusError(
                    .timeout, "'\(request.skill)' on agent '\(agent)' did not finish within \(request.timeoutMs) ms")
                : SkillbusError(
                    .timeout,
                    "attempt \(request.attempt) of '\(request.skill)' on agent '\(agent)' did not finish within its "
                        + "\((request.attemptDeadline &- request.attemptStarted) / 1_000_000) ms")
            actions += sendCancel(running, reason: .deadline, now: now)
            actions += fail(request, error, agent: agent, now: now)
        }
        actions += reportIgnoredCancels(now: now)
        actions += failQueries(queries.removeExpired(now: now)) {
            SkillbusError(.timeout, "agent '\($0.agent)' did not answer the query in time")
        }
        actions += expireConfirmations(now: now)
        actions += failTurns(turns.removeExpired(now: now), now: now) {
            SkillbusError(.timeout, "agent '\($0.agent)' did not end the turn in time")
        }
        actions += expireParked(now: now)
        actions += expireGraceParked(now: now)
        actions += saveRoster(now: now)
        turns.evictCancelled(now: now)
        for (_, request) in requests.removeExpiredQueued(now: now, targeted: false) {
            let full = "no agent offering '\(request.skill)' had a free slot within \(request.timeoutMs) ms"
            let error = waitedTooLong(request, full, now: now)
            actions += fail(request, error, agent: "", executed: false, now: now)
        }
        return actions
    }

    /// The timeout of a request that waited in the queue past its deadline, saying what it waited for: a rate
    /// limit holds it back although an agent may be idle; else the agents were full, as `full` says.
    func waitedTooLong(_ request: Request, _ full: String, now: UInt64) -> SkillbusError {
        guard rateLimiter.isActive, !rateLimiter.ready(request, now: now) else {
            return SkillbusError(.timeout, full, details: ["waitedFor": "capacity"])
        }
        return SkillbusError(
            .timeout, "\(rateLimitReason(request, now: now)), and it did not start within \(request.timeoutMs) ms",
            details: ["waitedFor": "rateLimit"])
    }
}
