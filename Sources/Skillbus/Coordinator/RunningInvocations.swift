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

    /// An invocation's number, the digits of its id (`i` and the number).
    private struct Number: SlotKey {
        let value: UInt64
        /// Numbers are consecutive: a multiplicative hash spreads them over the buckets. Workers cannot add
        /// entries, so no chosen id can crowd the table.
        var slotHash: UInt32 { UInt32(truncatingIfNeeded: (value &* 0x9E37_79B9_7F4A_7C15) >> 32) | 1 }
    }

    /// By number, not by id: no String is hashed or kept per invocation, and an entry is moved in once and
    /// out once.
    private var entries = SlotTable<Number, Entry>()
    private var lastNumber: UInt64 = 0

    var count: Int { entries.count }

    /// Records the invocation and takes a slot on its worker; returns the invocation id for INVOKE.
    mutating func start(_ request: CoordinatorState.Request, on peer: PeerID, workers: inout WorkerTable) -> String {
        guard workers.update(peer, { $0.takeSlot(request.skill) }) != nil else {
            preconditionFailure("an invocation was started on a worker that is not registered")
        }
        lastNumber &+= 1
        _ = entries.slot(of: Number(value: lastNumber)) { Entry(request: request, worker: peer) }
        return Self.invocationID(lastNumber)
    }

    /// The worker reported: the entry, if the invocation is one it runs, with its slot given back.
    mutating func end(_ invocationID: String, from peer: PeerID, workers: inout WorkerTable) -> Entry? {
        guard let slot = slot(of: invocationID), entries[slot].worker == peer else { return nil }
        let entry = entries.remove(slot: slot)
        workers.update(peer) { $0.giveSlot(entry.request.skill) }
        return entry
    }

    /// OUTPUT for an invocation: the request it serves when the worker runs it, its caller still waits, and
    /// the batch keeps its output within `limit` bytes (then the batch is counted); nil means drop it.
    mutating func noteOutput(
        _ invocationID: String, from peer: PeerID, bytes: Int, limit: Int
    ) -> CoordinatorState.Request? {
        guard let slot = slot(of: invocationID), entries[slot].worker == peer, !entries[slot].answered,
            entries[slot].outputBytes + bytes <= limit
        else { return nil }
        entries[slot].outputBytes += bytes
        return entries[slot].request
    }

    /// A worker left: its entries, which no longer hold any slot.
    mutating func removeAll(of peer: PeerID) -> [(invocationID: String, entry: Entry)] {
        entries.occupiedSlots.filter { entries[$0].worker == peer }.map { slot in
            (Self.invocationID(entries.key(slot).value), entries.remove(slot: slot))
        }
    }

    /// Marks unanswered entries that match as answered; returns them. Their slots stay taken.
    mutating func answer(where matches: (Entry) -> Bool) -> [(invocationID: String, entry: Entry)] {
        var answered: [(String, Entry)] = []
        for slot in entries.occupiedSlots where !entries[slot].answered && matches(entries[slot]) {
            entries[slot].answered = true
            answered.append((Self.invocationID(entries.key(slot).value), entries[slot]))
        }
        return answered
    }

    subscript(invocationID: String) -> Entry? { slot(of: invocationID).map { entries[$0] } }

    /// The first unanswered entry that matches, with its invocation id.
    func firstUnanswered(where matches: (Entry) -> Bool) -> (invocationID: String, entry: Entry)? {
        entries.occupiedSlots.first { !entries[$0].answered && matches(entries[$0]) }.map {
            (Self.invocationID(entries.key($0).value), entries[$0])
        }
    }

    func forEachUnanswered(_ body: (Entry) -> Void) {
        for slot in entries.occupiedSlots where !entries[slot].answered { body(entries[slot]) }
    }

    /// Marks one unanswered entry answered (its slot stays taken until the worker reports) and returns it.
    mutating func markAnswered(_ invocationID: String) -> Entry? {
        guard let slot = slot(of: invocationID), !entries[slot].answered else { return nil }
        entries[slot].answered = true
        return entries[slot]
    }

    /// Answered entries whose worker stayed silent for `grace` past the deadline: the INVOKE or its RESULT
    /// was lost, or the worker ignores CANCEL. They are forgotten and their slots given back; returns
    /// the workers that have a slot free again.
    mutating func abandon(now: UInt64, grace: UInt64, workers: inout WorkerTable) -> [PeerID] {
        let stale = entries.occupiedSlots.filter {
            entries[$0].answered && entries[$0].request.deadline &+ grace <= now
        }
        var freed: [PeerID] = []
        for slot in stale {
            let entry = entries.remove(slot: slot)
            if workers.update(entry.worker, { $0.giveSlot(entry.request.skill) }) != nil { freed.append(entry.worker) }
        }
        return freed
    }

    /// The slot of a running invocation's id; nil for an id this table never gave or no longer holds.
    private func slot(of invocationID: String) -> Int? {
        Self.number(of: invocationID).flatMap { entries.slot(of: Number(value: $0)) }
    }

    static func invocationID(_ number: UInt64) -> String { "i" + String(number) }

    /// The number of an id as `invocationID` writes it (`i`, then digits without a leading zero).
    static func number(of invocationID: String) -> UInt64? {
        var utf8 = invocationID.utf8.makeIterator()
        guard utf8.next() == UInt8(ascii: "i"), let first = utf8.next(), (49...57).contains(first) else { return nil }
        var number = UInt64(first - 48)
        while let byte = utf8.next() {
            guard (48...57).contains(byte) else { return nil }
            let (times10, overflow) = number.multipliedReportingOverflow(by: 10)
            let (sum, carry) = times10.addingReportingOverflow(UInt64(byte - 48))
            guard !overflow, !carry else { return nil }
            number = sum
        }
        return number
    }
}
