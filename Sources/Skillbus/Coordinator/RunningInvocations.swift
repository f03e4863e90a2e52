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

    /// Entries in numbered slots, reached from an invocation id (`i` and its number) through `index`: no
    /// String is hashed or kept per invocation, and an entry is moved in once and out once.
    private var slots: [(number: UInt64, entry: Entry?)] = []
    private var freeSlots: [Int] = []
    /// Hash of the number → slot.
    private var index = HashBuckets()
    private var lastNumber: UInt64 = 0

    var count: Int { index.count }

    /// Records the invocation and takes a slot on its worker; returns the invocation id for INVOKE.
    mutating func start(_ request: CoordinatorState.Request, on peer: PeerID, workers: inout WorkerTable) -> String {
        guard workers.update(peer, { $0.takeSlot(request.skill) }) != nil else {
            preconditionFailure("an invocation was started on a worker that is not registered")
        }
        lastNumber &+= 1
        let entry = Entry(request: request, worker: peer)
        let slot: Int
        if let free = freeSlots.popLast() {
            slot = free
            slots[slot] = (lastNumber, entry)
        } else {
            slot = slots.count
            slots.append((lastNumber, entry))
        }
        index.insert(hash: Self.hash(lastNumber), value: UInt32(slot))
        return Self.invocationID(lastNumber)
    }

    /// The worker reported: the entry, if the invocation is one it runs, with its slot given back.
    mutating func end(_ invocationID: String, from peer: PeerID, workers: inout WorkerTable) -> Entry? {
        guard let slot = slot(of: invocationID), slots[slot].entry?.worker == peer else { return nil }
        let entry = remove(slot)
        workers.update(peer) { $0.giveSlot(entry.request.skill) }
        return entry
    }

    /// OUTPUT for an invocation: the request it serves when the worker runs it, its caller still waits, and
    /// the batch keeps its output within `limit` bytes (then the batch is counted); nil means drop it.
    mutating func noteOutput(
        _ invocationID: String, from peer: PeerID, bytes: Int, limit: Int
    ) -> CoordinatorState.Request? {
        guard let slot = slot(of: invocationID), let entry = slots[slot].entry, entry.worker == peer,
            !entry.answered, entry.outputBytes + bytes <= limit
        else { return nil }
        slots[slot].entry?.outputBytes += bytes
        return entry.request
    }

    /// A worker left: its entries, which no longer hold any slot.
    mutating func removeAll(of peer: PeerID) -> [(invocationID: String, entry: Entry)] {
        occupied.filter { slots[$0].entry?.worker == peer }.map { (Self.invocationID(slots[$0].number), remove($0)) }
    }

    /// Marks unanswered entries that match as answered; returns them. Their slots stay taken.
    mutating func answer(where matches: (Entry) -> Bool) -> [(invocationID: String, entry: Entry)] {
        var answered: [(String, Entry)] = []
        for slot in occupied {
            guard var entry = slots[slot].entry, !entry.answered, matches(entry) else { continue }
            entry.answered = true
            slots[slot].entry = entry
            answered.append((Self.invocationID(slots[slot].number), entry))
        }
        return answered
    }

    subscript(invocationID: String) -> Entry? { slot(of: invocationID).flatMap { slots[$0].entry } }

    /// The first unanswered entry that matches, with its invocation id.
    func firstUnanswered(where matches: (Entry) -> Bool) -> (invocationID: String, entry: Entry)? {
        for slot in occupied {
            if let entry = slots[slot].entry, !entry.answered, matches(entry) {
                return (Self.invocationID(slots[slot].number), entry)
            }
        }
        return nil
    }

    func forEachUnanswered(_ body: (Entry) -> Void) {
        for slot in occupied { if let entry = slots[slot].entry, !entry.answered { body(entry) } }
    }

    /// Marks one unanswered entry answered (its slot stays taken until the worker reports) and returns it.
    mutating func markAnswered(_ invocationID: String) -> Entry? {
        guard let slot = slot(of: invocationID), slots[slot].entry?.answered == false else { return nil }
        slots[slot].entry?.answered = true
        return slots[slot].entry
    }

    /// Answered entries whose worker stayed silent for `grace` past the deadline: the INVOKE or its RESULT
    /// was lost, or the worker ignores CANCEL. They are forgotten and their slots given back; returns
    /// the workers that have a slot free again.
    mutating func abandon(now: UInt64, grace: UInt64, workers: inout WorkerTable) -> [PeerID] {
        let stale = occupied.filter {
            guard let entry = slots[$0].entry else { return false }
            return entry.answered && entry.request.deadline &+ grace <= now
        }
        var freed: [PeerID] = []
        for slot in stale {
            let entry = remove(slot)
            if workers.update(entry.worker, { $0.giveSlot(entry.request.skill) }) != nil { freed.append(entry.worker) }
        }
        return freed
    }

    /// Slots holding an entry, in slot order.
    private var occupied: [Int] { slots.indices.filter { slots[$0].entry != nil } }

    private mutating func remove(_ slot: Int) -> Entry {
        index.remove(hash: Self.hash(slots[slot].number), value: UInt32(slot))
        freeSlots.append(slot)
        guard let entry = slots[slot].entry.take() else { preconditionFailure("an empty slot was removed") }
        return entry
    }

    /// The slot of a running invocation's id; nil for an id this table never gave or no longer holds.
    private func slot(of invocationID: String) -> Int? {
        guard let number = Self.number(of: invocationID) else { return nil }
        return index.find(hash: Self.hash(number)) { slots[Int($0)].number == number }
            .value.map { Int($0) }
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

    /// Numbers are consecutive: a multiplicative hash spreads them over the buckets (bit 0 set, as
    /// `HashBuckets` needs). Workers cannot add entries, so no chosen id can crowd the table.
    private static func hash(_ number: UInt64) -> UInt32 {
        UInt32(truncatingIfNeeded: (number &* 0x9E37_79B9_7F4A_7C15) >> 32) | 1
    }
}
