/// The `RequestTable`'s storage: its entries in numbered slots that stay put while an entry lives (the table's keys
/// are slot numbers), and the two indices every awaited entry is in — by origin (who waits for it; an origin may
/// repeat, should a client reuse a request id) and, when identical invocations share it, by execution. It owns
/// that index invariant: an entry is in both exactly while it is awaited (all but a running entry already
/// answered), so every phase change goes through `setPhase`.
///
/// Not a `SlotTable`: that one keeps one index by one unique key, and none of these is unique or covers every
/// entry. Each index is a `HashBuckets` over the slots, as in `SlotTable`.
struct RequestSlots: Sendable {
    typealias Entry = RequestTable.Entry

    private var slots: [Entry?] = []
    private var freeSlots: [UInt32] = []
    private var byOrigin = HashBuckets()
    private var byExecution = HashBuckets()

    var count: Int { slots.count - freeSlots.count }

    /// The entry in an occupied slot, read in place.
    subscript(slot: UInt32) -> Entry {
        _read {
            guard slots[Int(slot)] != nil else { preconditionFailure(Self.freeSlot) }
            yield slots[Int(slot)]!
        }
    }

    private static var freeSlot: String { "a request table key outlived its entry: keys are kept within one operation" }

    mutating func insert(_ entry: consuming Entry) -> UInt32 {
        let slot: UInt32
        if let free = freeSlots.popLast() {
            slot = free
        } else {
            slot = UInt32(slots.count)
            slots.append(nil)
        }
        // Moved in, not copied: a copy retained every array of the request once more.
        slots[Int(slot)] = consume entry
        if self[slot].isAwaited { index(slot) }
        return slot
    }

    /// Empties an occupied slot and returns its entry; the slot may be given to another entry.
    mutating func remove(_ slot: UInt32) -> Entry {
        if self[slot].isAwaited { unindex(slot) }
        guard let entry = slots[Int(slot)].take() else { preconditionFailure(Self.freeSlot) }
        freeSlots.append(slot)
        return entry
    }

    /// The entry's new phase; into or out of the indices when that changes whether it is awaited.
    mutating func setPhase(_ slot: UInt32, _ phase: RequestTable.Phase) {
        let wasAwaited = self[slot].isAwaited
        slots[Int(slot)]!.phase = phase
        switch (wasAwaited, self[slot].isAwaited) {
        case (true, false): unindex(slot)
        case (false, true): preconditionFailure("a running request that was answered was awaited again")
        default: break
        }
    }

    /// Changes the entry's request: only what no index is built from (its attempt, not its origin or execution).
    mutating func updateRequest<Result>(_ slot: UInt32, _ body: (inout CoordinatorState.Request) -> Result) -> Result {
        guard slots[Int(slot)] != nil else { preconditionFailure(Self.freeSlot) }
        return body(&slots[Int(slot)]!.request)
    }

    /// The first awaited entry of `origin`.
    func slot(origin: Waiter, hash: UInt32) -> UInt32? {
        byOrigin.find(hash: hash) { slots[Int($0)]?.request.origin == origin }.value
    }

    /// The awaited entry that runs execution `id`.
    func slot(execution id: SingleFlight.ExecutionID) -> UInt32? {
        byExecution.find(hash: RequestTable.hash(id)) { slots[Int($0)]?.request.shared == id }.value
    }

    /// The occupied slots whose entry `matches`, in slot order.
    func slots(where matches: (Entry) -> Bool) -> [UInt32] {
        var found: [UInt32] = []
        for slot in slots.indices { if let entry = slots[slot], matches(entry) { found.append(UInt32(slot)) } }
        return found
    }

    private mutating func index(_ slot: UInt32) {
        byOrigin.insert(hash: self[slot].originHash, value: slot)
        if let shared = self[slot].request.shared { byExecution.insert(hash: RequestTable.hash(shared), value: slot) }
    }

    private mutating func unindex(_ slot: UInt32) {
        byOrigin.remove(hash: self[slot].originHash, value: slot)
        if let shared = self[slot].request.shared { byExecution.remove(hash: RequestTable.hash(shared), value: slot) }
    }
}

/// How the table names its running and confirming entries (`i` or `c` and a number) and hashes its index keys.
extension RequestTable {
    static func invocationID(_ number: UInt64) -> String { "i" + String(number) }

    static func confirmationID(_ number: UInt64) -> String { "c" + String(number) }

    /// The number of an id as the table writes it (`prefix`, then digits without a leading zero).
    static func number(of id: String, prefix: Unicode.Scalar) -> UInt64? {
        var utf8 = id.utf8.makeIterator()
        guard utf8.next() == UInt8(ascii: prefix), let first = utf8.next(), (49...57).contains(first) else {
            return nil
        }
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

    /// Numbers are consecutive: a multiplicative hash spreads them over the buckets. Nobody else chooses them, so
    /// no chosen id can crowd the index.
    static func hash(_ number: UInt64) -> UInt32 {
        UInt32(truncatingIfNeeded: (number &* 0x9E37_79B9_7F4A_7C15) >> 32) | 1
    }

    static func hash(_ execution: SingleFlight.ExecutionID) -> UInt32 {
        hash(UInt64(truncatingIfNeeded: execution.slot) << 32 ^ UInt64(truncatingIfNeeded: execution.execution))
    }

    /// A client chooses its request ids: they are hashed with the seeded `Hasher`, as bytes (the synthesized hash
    /// of `Waiter` fed an array to it byte by byte).
    static func hash(_ origin: Waiter) -> UInt32 {
        var hasher = Hasher()
        switch origin {
        case .client(let client, let requestID):
            hasher.combine(client)
            requestID.withUnsafeBytes { hasher.combine(bytes: $0) }
        case .step(let round, let index):
            hasher.combine(round)
            hasher.combine(index)
        case .claim, .offer:
            break
        }
        return UInt32(truncatingIfNeeded: hasher.finalize()) | 1
    }
}
