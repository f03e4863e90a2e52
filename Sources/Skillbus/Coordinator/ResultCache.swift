/// The bus's result cache across rounds (PROTOCOL §4.16): `ok` outcomes of pure skills by canonical key
/// (skill and canonical parameters), each until its expiry, within a byte budget — the least recently used
/// go first. It owns its byte count and the use order.
struct ResultCache: Sendable {
    struct Entry: Sendable {
        let outcome: Outcome
        let expires: UInt64
        let bytes: Int
        var used: UInt64
    }

    private var entries: [ByteKey: Entry] = [:]
    /// Keys by use stamp, oldest first: `uses[i]` holds stamp `firstStamp + i`, nil once its key was used
    /// again or removed. An array rather than a second hash table: stamps only grow.
    private var uses: [ByteKey?] = []
    private var firstStamp: UInt64 = 0
    /// Index in `uses` of the least recently used key (every slot before it is nil).
    private var oldest = 0
    let limitBytes: Int
    private(set) var bytes = 0
    private(set) var hits = 0
    private(set) var misses = 0

    /// What one entry costs besides its key and payload (the entry, the order slot, the tables' overhead).
    static let entryOverhead = 96

    init(limitBytes: Int) { self.limitBytes = limitBytes }

    var count: Int { entries.count }

    /// The outcome stored under `key` while it has not expired; a hit counts as a use.
    mutating func lookup(_ key: ByteKey, now: UInt64) -> Outcome? {
        guard let index = entries.index(forKey: key) else {
            misses += 1
            return nil
        }
        guard entries.values[index].expires > now else {
            remove(key)
            misses += 1
            return nil
        }
        forgetUse(entries.values[index].used)
        entries.values[index].used = use(key)
        hits += 1
        return entries.values[index].outcome
    }

    /// Keeps `outcome` (an `ok` one) under `key` for `lifetimeMs`; then drops the least recently used
    /// entries until the cache fits its budget. One larger than the whole budget is not kept.
    mutating func store(_ key: ByteKey, _ outcome: Outcome, lifetimeMs: Int, now: UInt64) {
        let size = key.bytes.count + outcome.payload.count + outcome.agent.count + Self.entryOverhead
        guard outcome.status == .ok, size <= limitBytes else { return }
        let entry = Entry(
            outcome: outcome, expires: now &+ UInt64(lifetimeMs) * 1_000_000, bytes: size, used: use(key))
        // One hash lookup: replace whatever was stored under the key.
        if let replaced = entries.updateValue(entry, forKey: key) {
            forgetUse(replaced.used)
            bytes -= replaced.bytes
        }
        bytes += size
        while bytes > limitBytes, oldest < uses.count, let victim = uses[oldest] { remove(victim) }
    }

    /// A new use of `key`: its stamp.
    private mutating func use(_ key: ByteKey) -> UInt64 {
        // Hits leave cleared slots behind the least recently used entry: when they are most of the array,
        // it is rebuilt with only the live ones (amortized: after as many uses as there are entries).
        if uses.count > 1024 && uses.count - oldest > 2 * (entries.count + 1) { compactUses() }
        uses.append(key)
        return firstStamp + UInt64(uses.count - 1)
    }

    /// Keeps only the live slots, in their order, under new stamps past every old one.
    private mutating func compactUses() {
        var kept: [ByteKey?] = []
        kept.reserveCapacity(2 * entries.count + 1)
        let base = firstStamp + UInt64(uses.count)
        for case let key? in uses[oldest...] {
            entries[key]?.used = base + UInt64(kept.count)
            kept.append(key)
        }
        uses = kept
        firstStamp = base
        oldest = 0
    }

    /// Slots in the use order, live or cleared (for tests: it stays near the number of entries).
    var useSlots: Int { uses.count }

    private mutating func remove(_ key: ByteKey) {
        guard let entry = entries.removeValue(forKey: key) else { return }
        forgetUse(entry.used)
        bytes -= entry.bytes
    }

    /// Clears a stamp, then moves `oldest` past cleared ones (each is passed once) and now and then drops
    /// the cleared head of the array, so it never shifts on every use.
    private mutating func forgetUse(_ stamp: UInt64) {
        uses[Int(stamp - firstStamp)] = nil
        while oldest < uses.count, uses[oldest] == nil { oldest += 1 }
        if oldest > 1024 && oldest * 2 > uses.count {
            uses.removeFirst(oldest)
            firstStamp += UInt64(oldest)
            oldest = 0
        }
    }

    /// Entries, bytes, budget, hits and misses, for the agents listing and the bench.
    var json: JSONValue {
        [
            "entries": .number(Double(count)), "bytes": .number(Double(bytes)),
            "limitBytes": .number(Double(limitBytes)), "hits": .number(Double(hits)),
            "misses": .number(Double(misses)),
        ]
    }
}
