/// Invocations sent to workers and not yet reported back, by invocation id. Every start takes a slot
/// of its worker and every end gives it back, so a worker's `inFlight` always equals its entries here,
/// and its count of a skill with a concurrency limit its entries of that skill.
struct RunningInvocations: Sendable {
    struct Entry: Sendable {
        let request: CoordinatorState.Request
        let worker: PeerID
        /// The client was already answered (deadline passed, or cancelled); the slot stays taken until
        /// the worker reports.
        var answered = false
        /// Partial output forwarded so far, in bytes: beyond the bus's limit the rest is dropped.
        var outputBytes = 0
    }

    private var entries: [String: Entry] = [:]
    private var lastNumber: UInt64 = 0

    var count: Int { entries.count }

    /// Records the invocation and takes a slot on its worker; returns the invocation id for INVOKE.
    mutating func start(_ request: CoordinatorState.Request, on peer: PeerID, workers: inout WorkerTable) -> String {
        guard workers.update(peer, { $0.takeSlot(request.skill) }) != nil else {
            preconditionFailure("an invocation was started on a worker that is not registered")
        }
        lastNumber &+= 1
        let invocationID = "i" + String(lastNumber)
        entries[invocationID] = Entry(request: request, worker: peer)
        return invocationID
    }

    /// The worker reported: the entry, if the invocation is one it runs, with its slot given back.
    mutating func end(_ invocationID: String, from peer: PeerID, workers: inout WorkerTable) -> Entry? {
        guard let index = entries.index(forKey: invocationID), entries.values[index].worker == peer else { return nil }
        let entry = entries.remove(at: index).value
        workers.update(peer) { $0.giveSlot(entry.request.skill) }
        return entry
    }

    /// OUTPUT for an invocation: the request it serves when the worker runs it, its caller still waits, and
    /// the batch keeps its output within `limit` bytes (then the batch is counted); nil means drop it.
    mutating func noteOutput(
        _ invocationID: String, from peer: PeerID, bytes: Int, limit: Int
    ) -> CoordinatorState.Request? {
        guard let index = entries.index(forKey: invocationID), entries.values[index].worker == peer,
            !entries.values[index].answered, entries.values[index].outputBytes + bytes <= limit
        else { return nil }
        entries.values[index].outputBytes += bytes
        return entries.values[index].request
    }

    /// A worker left: its entries, which no longer hold any slot.
    mutating func removeAll(of peer: PeerID) -> [(invocationID: String, entry: Entry)] {
        let gone = entries.filter { $0.value.worker == peer }
        for invocationID in gone.keys { entries[invocationID] = nil }
        return gone.map { ($0.key, $0.value) }
    }

    /// Marks unanswered entries that match as answered; returns them. Their slots stay taken.
    mutating func answer(where matches: (Entry) -> Bool) -> [(invocationID: String, entry: Entry)] {
        var answered: [(String, Entry)] = []
        for index in entries.indices where !entries.values[index].answered && matches(entries.values[index]) {
            entries.values[index].answered = true
            answered.append((entries.keys[index], entries.values[index]))
        }
        return answered
    }

    subscript(invocationID: String) -> Entry? { entries[invocationID] }

    /// The first unanswered entry that matches, with its invocation id.
    func firstUnanswered(where matches: (Entry) -> Bool) -> (invocationID: String, entry: Entry)? {
        entries.first { !$0.value.answered && matches($0.value) }.map { ($0.key, $0.value) }
    }

    func forEachUnanswered(_ body: (Entry) -> Void) {
        for entry in entries.values where !entry.answered { body(entry) }
    }

    /// Marks one unanswered entry answered (its slot stays taken until the worker reports) and returns it.
    mutating func markAnswered(_ invocationID: String) -> Entry? {
        guard let index = entries.index(forKey: invocationID), !entries.values[index].answered else { return nil }
        entries.values[index].answered = true
        return entries.values[index]
    }

    /// Answered entries whose worker stayed silent for `grace` past the deadline: the INVOKE or its RESULT
    /// was lost, or the worker ignores CANCEL. They are forgotten and their slots given back; returns
    /// the workers that have a slot free again.
    mutating func abandon(now: UInt64, grace: UInt64, workers: inout WorkerTable) -> [PeerID] {
        let stale = entries.filter { $0.value.answered && $0.value.request.deadline &+ grace <= now }
        var freed: [PeerID] = []
        for (invocationID, entry) in stale {
            entries[invocationID] = nil
            if workers.update(entry.worker, { $0.giveSlot(entry.request.skill) }) != nil { freed.append(entry.worker) }
        }
        return freed
    }
}
