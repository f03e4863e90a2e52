/// Every request the bus accepted and still answers for, one entry each, whose `Phase` says where it stands:
/// held for a client's approval, queued for a slot, backing off before its next attempt, or running on a worker.
/// Nobody asks which container holds a request: there is one, and the phase says. The wait queues and the retry
/// order are indices into it (they hold keys, never copies of a request), and so are its lookups by invocation,
/// by origin and by execution, each one probe of a `HashBuckets`. Every transition checks the phase it leaves and
/// says which invariant broke when that is wrong. Finished and cancelled are no phase: the entry leaves then.
///
/// It also owns the worker slot accounting: an entry starts running by taking a slot of its worker and gives it
/// back when it leaves, so a worker's `inFlight` always equals its running entries here, and its count of a skill
/// with a concurrency limit its running entries of that skill.
struct RequestTable: Sendable {
    typealias Request = CoordinatorState.Request

    /// An entry's place in the table, stable while the entry lives. Callers keep it only within one operation
    /// of the coordinator.
    struct Key: Equatable, Sendable {
        fileprivate let slot: UInt32
    }

    private var entries = RequestSlots()
    /// Running entries by invocation number.
    private var byInvocation = HashBuckets()
    /// Confirming entries by confirmation number.
    private var byConfirmation = HashBuckets()
    /// Queued entries, by skill and priority or by agent.
    private(set) var waiting = WaitQueues()
    /// Entries backing off, the one due first in front.
    private var retries: RetryQueue
    private var lastInvocation: UInt64 = 0
    private var lastConfirmation: UInt64 = 0
    private(set) var runningCount = 0
    private(set) var confirmingCount = 0
    /// CANCELs sent to running entries' workers, oldest first, watched until the worker reports.
    private var cancelWatch = FinishOrder<(invocation: UInt64, worker: PeerID)>()
    /// Who waits besides each entry's origin: clients joined to an execution, and waiters that gave up.
    var waiters = Waiters()

    /// `jitterSeed` starts the backoffs' jitter (`nextJitter`).
    init(jitterSeed: UInt64 = 0) { retries = RetryQueue(jitterSeed: jitterSeed) }

    var count: Int { entries.count }
    var queuedCount: Int { waiting.count }
    var backingOffCount: Int { retries.count }
    /// When the first backoff ends; nil when none waits.
    var nextDue: UInt64? { retries.nextDue }

    subscript(key: Key) -> Entry {
        _read { yield entries[key.slot] }
    }

    // MARK: Lookups

    /// The awaited entry `origin` waits for (the first, should a client have reused its request id).
    func key(origin: Waiter) -> Key? {
        entries.slot(origin: origin, hash: Self.hash(origin)).map(Key.init)
    }

    /// The awaited entry that runs execution `id` for everyone who shares it.
    func key(execution id: SingleFlight.ExecutionID) -> Key? { entries.slot(execution: id).map(Key.init) }

    /// The running entry of an invocation id, answered or not.
    func key(invocation invocationID: String) -> Key? {
        Self.number(of: invocationID, prefix: "i").flatMap(key(invocation:))
    }

    private func key(invocation number: UInt64) -> Key? {
        byInvocation.find(hash: Self.hash(number)) { slot in
            if case .running(number, _, _, _) = entries[slot].phase { return true }
            return false
        }.value.map(Key.init)
    }

    /// The confirming entry of a confirmation id.
    func key(confirmation confirmationID: String) -> Key? {
        guard let number = Self.number(of: confirmationID, prefix: "c") else { return nil }
        return byConfirmation.find(hash: Self.hash(number)) { slot in
            if case .confirming(number, _, _) = entries[slot].phase { return true }
            return false
        }.value.map(Key.init)
    }

    /// The running entry of `invocationID`.
    func running(_ invocationID: String) -> Running? { key(invocation: invocationID).flatMap(running(at:)) }

    func running(at key: Key) -> Running? {
        guard case .running(let number, let worker, let answered, _) = self[key].phase else { return nil }
        return Running(invocation: number, worker: worker, answered: answered, request: self[key].request)
    }

    /// The keys of the entries that `matches` picks, in slot order.
    func keys(where matches: (Entry) -> Bool) -> [Key] { entries.slots(where: matches).map(Key.init) }

    /// Per worker, the skills of its running entries and how many of each: what it runs now (AGENTS).
    func runningSkills() -> [PeerID: [String: Int]] {
        var skills: [PeerID: [String: Int]] = [:]
        for key in keys(where: { if case .running = $0.phase { true } else { false } }) {
            guard let running = running(at: key) else { continue }
            skills[running.worker, default: [:]][running.request.skill, default: 0] += 1
        }
        return skills
    }

    private mutating func insert(_ request: consuming Request, _ phase: Phase) -> Key {
        let hash = Self.hash(request.origin)
        return Key(slot: entries.insert(Entry(request: request, phase: phase, originHash: hash)))
    }

    // MARK: Confirming

    /// A new request waits for `client`'s approval; returns the confirmation id.
    mutating func confirm(_ request: consuming Request, asking client: PeerID, deadline: UInt64) -> String {
        lastConfirmation &+= 1
        let key = insert(request, .confirming(id: lastConfirmation, client: client, deadline: deadline))
        byConfirmation.insert(hash: Self.hash(lastConfirmation), value: key.slot)
        confirmingCount += 1
        return Self.confirmationID(lastConfirmation)
    }

    /// APPROVE (or a refusal) from the client that was asked: the request leaves, to be routed or refused.
    mutating func approve(_ confirmationID: String, by client: PeerID) -> Request? {
        guard let key = key(confirmation: confirmationID), case .confirming(_, client, _) = self[key].phase else {
            return nil
        }
        return remove(key)
    }

    /// Confirming entries whose approval did not come by `now`: out of the table, with their confirmation ids.
    mutating func removeExpiredConfirmations(now: UInt64) -> [(confirmationID: String, request: Request)] {
        guard confirmingCount > 0 else { return [] }
        let expired = keys { entry in
            if case .confirming(_, _, let deadline) = entry.phase { return deadline <= now }
            return false
        }
        return expired.map { key in
            guard case .confirming(let number, _, _) = self[key].phase else {
                preconditionFailure("picked as confirming")
            }
            return (Self.confirmationID(number), remove(key))
        }
    }

    // MARK: Queued

    /// A new request waits for a slot: for its target agent, or in its skill's lane for its priority.
    mutating func queue(_ request: consuming Request) {
        let queue = WaitQueues.queue(of: request)
        let (client, accepted, deadline) = (request.client, request.accepted, request.deadline)
        let key = insert(request, .queued)
        waiting.append(WaitQueues.Item(key: key, client: client, accepted: accepted, deadline: deadline), to: queue)
    }

    /// The queued entry `worker` should run next (it stays queued): one only it may run first, else the best
    /// waiting for any of its skills it can run now, and that `ready` lets go (its rate limit), by rank, then age.
    func nextQueued(
        for worker: CoordinatorState.Worker, now: UInt64, promotionNanos: UInt64, ready: (Request) -> Bool
    ) -> Key? {
        waiting.next(
            for: worker, now: now, promotionNanos: promotionNanos,
            runnable: { worker.canRun(self[$0].request.skill) && ready(self[$0].request) },
            ready: { ready(self[$0].request) })
    }

    /// Takes every request queued for `skill` (by skill, not for an agent), oldest first.
    mutating func removeQueued(skill: String) -> [Request] {
        waiting.removeAll(skill: skill).map { entries.remove($0.slot).request }
    }

    /// Takes every request queued for `target`, oldest first.
    mutating func removeQueued(target: PeerID) -> [Request] {
        waiting.removeAll(target: target).map { entries.remove($0.slot).request }
    }

    /// Takes the queued requests whose deadline passed by `now`: those queued for one agent (with it), or those
    /// queued by skill.
    mutating func removeExpiredQueued(now: UInt64, targeted: Bool) -> [(target: PeerID?, request: Request)] {
        guard waiting.count > 0 else { return [] }
        return waiting.removeExpired(now: now, targeted: targeted).map {
            ($0.target, entries.remove($0.key.slot).request)
        }
    }

    func forEachQueued(_ body: (Request) -> Void) {
        guard waiting.count > 0 else { return }
        waiting.forEach { body(self[$0].request) }
    }

    // MARK: Backing off

    /// A request whose attempt failed waits until `due` for its next one.
    mutating func backOff(_ request: consuming Request, until due: UInt64) {
        retries.append(insert(request, .backingOff(until: due)), due: due)
    }

    /// A number from 0 to 1 for the jitter of a backoff.
    mutating func nextJitter() -> Double { retries.nextJitter() }

    /// The requests whose backoff is over by `now`, soonest first: they leave, to be routed again.
    mutating func removeDue(now: UInt64) -> [Request] {
        retries.removeDue(now: now).map { key in
            guard case .backingOff = self[key].phase else {
                preconditionFailure("the retry order held an entry that is not backing off")
            }
            return entries.remove(key.slot).request
        }
    }

    // MARK: Running

    /// A new request starts on `peer`, taking one of its slots; returns the invocation id for INVOKE.
    mutating func startRunning(_ request: consuming Request, on peer: PeerID, workers: inout WorkerTable) -> String {
        Self.takeSlot(request.skill, on: peer, &workers)
        lastInvocation &+= 1
        let key = insert(request, .running(invocation: lastInvocation, worker: peer, answered: false, outputBytes: 0))
        byInvocation.insert(hash: Self.hash(lastInvocation), value: key.slot)
        runningCount += 1
        return Self.invocationID(lastInvocation)
    }

    /// A queued request starts on `peer`, taking one of its slots, its attempt counted from `now` until
    /// `attemptDeadline` (0: its deadline); returns the invocation id and the request as it goes.
    mutating func startRunning(
        _ key: Key, on peer: PeerID, now: UInt64, attemptDeadline: UInt64, workers: inout WorkerTable
    ) -> (invocationID: String, request: Request) {
        guard case .queued = self[key].phase else {
            preconditionFailure("a request started running from the table that was not queued: it runs once at a time")
        }
        let queue = WaitQueues.queue(of: self[key].request)
        waiting.remove(key, from: queue)
        Self.takeSlot(self[key].request.skill, on: peer, &workers)
        entries.updateRequest(key.slot) { request in
            request.attemptStarted = now
            request.attemptDeadline = attemptDeadline
        }
        lastInvocation &+= 1
        entries.setPhase(key.slot, .running(invocation: lastInvocation, worker: peer, answered: false, outputBytes: 0))
        byInvocation.insert(hash: Self.hash(lastInvocation), value: key.slot)
        runningCount += 1
        return (Self.invocationID(lastInvocation), self[key].request)
    }

    /// The worker reported: the entry, if `invocationID` is one `peer` runs, out of the table with its slot given
    /// back.
    mutating func finish(_ invocationID: String, from peer: PeerID, workers: inout WorkerTable) -> Running? {
        guard let key = key(invocation: invocationID), case .running(_, peer, _, _) = self[key].phase else {
            return nil
        }
        let running = leaveRunning(key)
        workers.update(peer) { $0.giveSlot(running.request.skill) }
        return running
    }

    /// OUTPUT for an invocation: the request it serves when `peer` runs it, its waiters still wait, and the batch
    /// keeps its output within `limit` bytes (then the batch is counted); nil means drop it.
    mutating func noteOutput(_ invocationID: String, from peer: PeerID, bytes: Int, limit: Int) -> Request? {
        guard let key = key(invocation: invocationID),
            case .running(let number, peer, false, let sent) = self[key].phase, sent + bytes <= limit
        else { return nil }
        entries.setPhase(
            key.slot, .running(invocation: number, worker: peer, answered: false, outputBytes: sent + bytes))
        return self[key].request
    }

    /// A running entry's waiters are answered (its deadline passed, or it was cancelled): it keeps its slot until
    /// the worker reports, and is no longer found by origin or execution. Nil when it was answered already.
    mutating func answer(_ key: Key) -> Running? {
        guard case .running(let number, let worker, false, let sent) = self[key].phase else { return nil }
        entries.setPhase(key.slot, .running(invocation: number, worker: worker, answered: true, outputBytes: sent))
        return Running(invocation: number, worker: worker, answered: true, request: self[key].request)
    }

    /// Answers every unanswered running entry whose request `matches`, in slot order.
    mutating func answerRunning(where matches: (Request) -> Bool) -> [Running] {
        guard runningCount > 0 else { return [] }
        return keys { entry in
            if case .running(_, _, false, _) = entry.phase { return matches(entry.request) }
            return false
        }.compactMap { answer($0) }
    }

    /// Answered entries whose worker stayed silent for `grace` past the deadline: the INVOKE or its RESULT was
    /// lost, or the worker ignores CANCEL. They leave and give their slots back; returns the workers that have a
    /// slot free again.
    mutating func abandon(now: UInt64, grace: UInt64, workers: inout WorkerTable) -> [PeerID] {
        guard runningCount > 0 else { return [] }
        let stale = keys { entry in
            if case .running(_, _, true, _) = entry.phase { return entry.request.deadline &+ grace <= now }
            return false
        }
        var freed: [PeerID] = []
        for key in stale {
            let running = leaveRunning(key)
            if workers.update(running.worker, { $0.giveSlot(running.request.skill) }) != nil {
                freed.append(running.worker)
            }
        }
        return freed
    }

    /// A worker left (and its slots with it): its running entries leave, in slot order.
    mutating func removeRunning(on peer: PeerID) -> [Running] {
        guard runningCount > 0 else { return [] }
        return keys { entry in
            if case .running(_, peer, _, _) = entry.phase { return true }
            return false
        }.map { leaveRunning($0) }
    }

    private mutating func leaveRunning(_ key: Key) -> Running {
        guard case .running(let number, let worker, let answered, _) = self[key].phase else {
            preconditionFailure("a request left running that was not running")
        }
        byInvocation.remove(hash: Self.hash(number), value: key.slot)
        runningCount -= 1
        return Running(
            invocation: number, worker: worker, answered: answered, request: entries.remove(key.slot).request)
    }

    /// CANCEL went to the running entry's worker at `now`: it is watched until the worker reports.
    mutating func watchCancel(_ running: Running, at now: UInt64) {
        cancelWatch.append((running.invocation, running.worker), at: now)
    }

    /// The CANCELs sent `grace` or longer before `now` whose invocation still runs on the worker they went to, with
    /// when each was sent: each is handed out once.
    mutating func removeIgnoredCancels(now: UInt64, grace: UInt64) -> [(running: Running, sent: UInt64)] {
        var ignored: [(Running, UInt64)] = []
        while let (watched, sent) = cancelWatch.oldest, sent &+ grace <= now {
            cancelWatch.removeOldest()
            guard let key = key(invocation: watched.invocation), let running = running(at: key),
                running.worker == watched.worker
            else { continue }
            ignored.append((running, sent))
        }
        return ignored
    }

    private static func takeSlot(_ skill: String, on peer: PeerID, _ workers: inout WorkerTable) {
        guard workers.update(peer, { $0.takeSlot(skill) }) != nil else {
            preconditionFailure("an invocation was started on a worker that is not registered")
        }
    }

    // MARK: Leaving

    /// A request that is not running leaves the table for good (it will not run, or is routed again).
    mutating func remove(_ key: Key) -> Request {
        switch self[key].phase {
        case .confirming(let number, _, _):
            byConfirmation.remove(hash: Self.hash(number), value: key.slot)
            confirmingCount -= 1
        case .queued:
            let queue = WaitQueues.queue(of: self[key].request)
            waiting.remove(key, from: queue)
        case .backingOff:
            retries.remove(key)
        case .running:
            preconditionFailure(
                "a running request left the table other than by its worker's report: its slot would stay taken")
        }
        return entries.remove(key.slot).request
    }

    /// Takes every request that is not running and that `matches` picks, in slot order, with the phase it left.
    mutating func removeUnstarted(where matches: (Entry) -> Bool) -> [(phase: Phase, request: Request)] {
        keys { entry in
            if case .running = entry.phase { return false }
            return matches(entry)
        }.map { key in (self[key].phase, remove(key)) }
    }
}
