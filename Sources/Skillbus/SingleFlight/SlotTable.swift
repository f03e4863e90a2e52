/// A key a `SlotTable` can hold: compared for equality, and hashed to 32 bits with bit 0 set (as
/// `HashBuckets` needs).
protocol SlotKey: Equatable, Sendable {
    var slotHash: UInt32 { get }
}

/// Byte strings (round ids, canonical keys) hash with the seeded `Hasher`: a client chooses them.
extension Array: SlotKey where Element == UInt8 {
    var slotHash: UInt32 { HashBuckets.hash(self) }
}

/// Values under keys, each in a numbered slot that stays put until it is removed, so that a caller may
/// keep the number and reach the value again without hashing the key.
///
/// Built for the coordinator's hot paths, where a `Dictionary` keyed by byte arrays cost a retain and
/// release per compared key: a lookup hashes the key once and probes `HashBuckets`, comparing a key only
/// when its 32-bit hash matches.
struct SlotTable<Key: SlotKey, Value: Sendable>: Sendable {
    private struct Slot {
        /// Both nil while the slot is free. Apart, not one optional pair: a read of either is then in place,
        /// where a pair was copied whole (key and value retained) to read one of them.
        var key: Key?
        var hash: UInt32
        var value: Value?
    }

    private var slots: [Slot] = []
    private var freeSlots: [Int] = []
    /// Hash → slot.
    private var index = HashBuckets()

    var count: Int { slots.count - freeSlots.count }

    /// The slot holding `key`, if any.
    func slot(of key: Key) -> Int? {
        find(key, hash: key.slotHash).slot
    }

    /// The slot holding `key`, made with `make()` if there was none; `hash`, when the caller has it, is
    /// `key.slotHash`.
    mutating func slot(
        of key: Key, hash: UInt32? = nil, orInsert make: () -> Value
    ) -> (slot: Int, inserted: Bool) {
        let hash = hash ?? key.slotHash
        let (found, bucket) = find(key, hash: hash)
        if let found { return (found, false) }
        let slot: Int
        if let free = freeSlots.popLast() {
            slot = free
            slots[slot] = Slot(key: key, hash: hash, value: make())
        } else {
            slot = slots.count
            slots.append(Slot(key: key, hash: hash, value: make()))
        }
        index.insert(hash: hash, value: UInt32(slot), at: bucket)
        return (slot, true)
    }

    /// The key of an occupied slot.
    func key(_ slot: Int) -> Key {
        guard let key = slots[slot].key else { preconditionFailure(Self.freeSlot) }
        return key
    }

    /// Whether `slot` holds a value now.
    func isOccupied(_ slot: Int) -> Bool { slot < slots.count && slots[slot].value != nil }

    /// The slots that hold a value, in slot order.
    var occupiedSlots: [Int] { slots.indices.filter { slots[$0].value != nil } }

    /// The value in an occupied slot (read in place: reading one field copies nothing else).
    subscript(slot: Int) -> Value {
        _read {
            guard let value = slots[slot].value else { preconditionFailure(Self.freeSlot) }
            yield value
        }
        _modify {
            guard slots[slot].value != nil else { preconditionFailure(Self.freeSlot) }
            yield &slots[slot].value!
        }
    }

    private static var freeSlot: String { "a free slot was used: callers keep only the slots they were given" }

    /// Empties an occupied slot and returns its value; the slot number may be given to another key.
    @discardableResult
    mutating func remove(slot: Int) -> Value {
        index.remove(hash: slots[slot].hash, value: UInt32(slot))
        slots[slot].key = nil
        guard let value = slots[slot].value.take() else { preconditionFailure(Self.freeSlot) }
        freeSlots.append(slot)
        return value
    }

    /// The key's slot, or else the empty bucket where it would go.
    private func find(_ key: Key, hash: UInt32) -> (slot: Int?, bucket: Int) {
        let (value, bucket) = index.find(hash: hash) { slots[Int($0)].key == key }
        return (value.map { Int($0) }, bucket)
    }
}
