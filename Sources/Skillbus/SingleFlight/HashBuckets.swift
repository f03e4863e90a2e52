/// The index under `SlotTable` and `FinishedRounds`: one compact array of 64-bit buckets, each a key's
/// 32-bit hash (high half) and a 32-bit value naming where the key is kept (low half). Linear probing, at
/// most half full. The keys themselves live with their owner, which says whether a candidate is the one.
///
/// Hashes come from the standard library's seeded `Hasher`, so keys chosen by a client (round ids) cannot
/// be made to collide. Bit 0 of every stored hash is set: a bucket of 0 is empty, whatever its value.
struct HashBuckets: Sendable {
    private var buckets = [UInt64](repeating: 0, count: 16)
    private(set) var count = 0

    private var mask: Int { buckets.count - 1 }

    static func hash(_ key: UnsafeRawBufferPointer) -> UInt32 {
        var hasher = Hasher()
        hasher.combine(bytes: key)
        return UInt32(truncatingIfNeeded: hasher.finalize()) | 1
    }

    static func hash(_ key: [UInt8]) -> UInt32 { key.withUnsafeBytes { hash($0) } }

    /// The value of the first entry with this hash that `isKey` accepts, or else the empty bucket where
    /// the key would go (for `insert`).
    func find(hash: UInt32, isKey: (UInt32) -> Bool) -> (value: UInt32?, bucket: Int) {
        var bucket = Int(hash) & mask
        while true {
            let entry = buckets[bucket]
            if entry == 0 { return (nil, bucket) }
            if UInt32(truncatingIfNeeded: entry >> 32) == hash, isKey(UInt32(truncatingIfNeeded: entry)) {
                return (UInt32(truncatingIfNeeded: entry), bucket)
            }
            bucket = (bucket + 1) & mask
        }
    }

    /// Stores an entry whose key is known not to be there yet.
    mutating func insert(hash: UInt32, value: UInt32) {
        var bucket = Int(hash) & mask
        while buckets[bucket] != 0 { bucket = (bucket + 1) & mask }
        insert(hash: hash, value: value, at: bucket)
    }

    /// Stores a new entry in the empty bucket `find` gave for its hash.
    mutating func insert(hash: UInt32, value: UInt32, at bucket: Int) {
        buckets[bucket] = UInt64(hash) << 32 | UInt64(value)
        count += 1
        if count * 2 > buckets.count { grow() }
    }

    /// Removes the entry with this hash and value, which must be there.
    mutating func remove(hash: UInt32, value: UInt32) {
        let entry = UInt64(hash) << 32 | UInt64(value)
        var hole = Int(hash) & mask
        while buckets[hole] != entry { hole = (hole + 1) & mask }
        // Backward shift: pull later entries of the probe run into the hole, so no lookup stops early.
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
        count -= 1
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
}
