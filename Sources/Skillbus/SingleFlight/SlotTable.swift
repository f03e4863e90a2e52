/// Values under byte-string keys (round ids), each in a numbered slot that stays put until it is removed,
/// so that a caller may keep the number and reach the value again without hashing the key.
///
/// Built for single-flight's hot path, where a `Dictionary` keyed by byte arrays cost a retain and release
/// per compared key: here a lookup hashes the key once (the standard library's seeded `Hasher`, so ids
/// chosen by a client cannot be made to collide), probes one compact array of 64-bit buckets (linear
/// probing, at most half full), and compares a key's bytes only when 32 bits of its hash match.
struct SlotTable<Value: Sendable>: Sendable {
    private struct Slot {
        var key: [UInt8]
        var hash: UInt32
        var value: Value?
    }

    private var slots: [Slot] = []
    private var freeSlots: [Int] = []
    /// 0 is empty; else the key's hash in the high 32 bits and its slot + 1 in the low 32. The hash bits
    /// also give the bucket a key belongs in, so that buckets can move without touching the slots.
    private var buckets = [UInt64](repeating: 0, count: 16)

    var count: Int { slots.count - freeSlots.count }

    private var mask: Int { buckets.count - 1 }

    /// The slot holding `key`, if any.
    func slot(of key: [UInt8]) -> Int? {
        find(key, hash: Self.hash(key)).slot
    }

    /// The slot holding `key`, made with `make()` if there was none.
    mutating func slot(of key: [UInt8], orInsert make: () -> Value) -> (slot: Int, inserted: Bool) {
        let hash = Self.hash(key)
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
        buckets[bucket] = UInt64(hash) << 32 | UInt64(slot + 1)
        if count * 2 > buckets.count { grow() }
        return (slot, true)
    }

    /// Whether `slot` holds a value now.
    func isOccupied(_ slot: Int) -> Bool { slot < slots.count && slots[slot].value != nil }

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
        var bucket = Int(slots[slot].hash) & mask
        while buckets[bucket] & 0xFFFF_FFFF != UInt64(slot + 1) { bucket = (bucket + 1) & mask }
        // Backward shift: pull later entries of the probe run into the hole, so no lookup stops early.
        var hole = bucket
        var next = (hole + 1) & mask
        while buckets[next] != 0 {
            let home = Int(truncatingIfNeeded: buckets[next] >> 32) & mask
            if (next - home) & mask >= (next - hole) & mask {
                buckets[hole] = buckets[next]
                hole = next
            }
            next = (next + 1) & mask
        }
        buckets[hole] = 0
        guard let value = slots[slot].value else { preconditionFailure(Self.freeSlot) }
        slots[slot] = Slot(key: [], hash: 0, value: nil)
        freeSlots.append(slot)
        return value
    }

    /// The key's slot, or else the empty bucket where it would go.
    private func find(_ key: [UInt8], hash: UInt32) -> (slot: Int?, bucket: Int) {
        var bucket = Int(hash) & mask
        while true {
            let entry = buckets[bucket]
            if entry == 0 { return (nil, bucket) }
            if UInt32(truncatingIfNeeded: entry >> 32) == hash {
                let slot = Int(entry & 0xFFFF_FFFF) - 1
                if slots[slot].key == key { return (slot, bucket) }
            }
            bucket = (bucket + 1) & mask
        }
    }

    private mutating func grow() {
        let old = buckets
        buckets = [UInt64](repeating: 0, count: old.count * 2)
        for entry in old where entry != 0 {
            var bucket = Int(truncatingIfNeeded: entry >> 32) & mask
            while buckets[bucket] != 0 { bucket = (bucket + 1) & mask }
            buckets[bucket] = entry
        }
    }

    private static func hash(_ key: [UInt8]) -> UInt32 {
        var hasher = Hasher()
        key.withUnsafeBytes { hasher.combine(bytes: $0) }
        return UInt32(truncatingIfNeeded: hasher.finalize())
    }
}
