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

    /// Canonical key → entry, each in a slot that keeps its number until it is removed.
    private var entries = SlotTable<[UInt8], Entry>()
    /// Slots by use stamp, oldest first: `uses[i]` holds the slot used at stamp `firstStamp + i`, or
    /// `unused` once that slot was used again or removed. An array rather than a second hash table: stamps
    /// only grow; slot numbers rather than keys: nothing to retain per use.
    private var uses: [Int32] = []
    private static let unused: Int32 = -1
    private var firstStamp: UInt64 = 0
    /// Index in `uses` of the least recently used entry (every slot before it is unused).
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
        guard let slot = entries.slot(of: key.bytes) else {
            misses += 1
            return nil
        }
        guard entries[slot].expires > now else {
            remove(slot: slot)
            misses += 1
            return nil
        }
        forgetUse(entries[slot].used)
        entries[slot].used = use(slot)
        hits += 1
        return entries[slot].outcome
    }

    /// Keeps `outcome` (an `ok` one) under `key` for `lifetimeMs`; then drops the least recently used
    /// entries until the cache fits its budget. One larger than the whole budget is not kept.
    mutating func store(_ key: ByteKey, _ outcome: Outcome, lifetimeMs: Int, now: UInt64) {
        let size = key.bytes.count + outcome.payload.count + outcome.agent.count + Self.entryOverhead
        guard outcome.status == .ok, size <= limitBytes else { return }
        let entry = Entry(outcome: outcome, expires: now &+ UInt64(lifetimeMs) * 1_000_000, bytes: size, used: 0)
        // One hash lookup: replace whatever was stored under the key.
        let (slot, inserted) = entries.slot(of: key.bytes) { entry }
        if !inserted {
            forgetUse(entries[slot].used)
            bytes -= entries[slot].bytes
            entries[slot] = entry
        }
        entries[slot].used = use(slot)
        bytes += size
        while bytes > limitBytes, oldest < uses.count { remove(slot: Int(uses[oldest])) }
    }

    /// A new use of the entry in `slot`: its stamp.
    private mutating func use(_ slot: Int) -> UInt64 {
        // Hits leave unused stamps behind the least recently used entry: when they are most of the array,
        // it is rebuilt with only the live ones (amortized: after as many uses as there are entries).
        if uses.count > 1024 && uses.count - oldest > 2 * (entries.count + 1) { compactUses() }
        uses.append(Int32(slot))
        return firstStamp + UInt64(uses.count - 1)
    }

    /// Keeps only the live stamps, in their order, renumbered past every old one.
    private mutating func compactUses() {
        var kept: [Int32] = []
        kept.reserveCapacity(2 * entries.count + 1)
        let base = firstStamp + UInt64(uses.count)
        for slot in uses[oldest...] where slot != Self.unused {
            entries[Int(slot)].used = base + UInt64(kept.count)
            kept.append(slot)
        }
        uses = kept
        firstStamp = base
        oldest = 0
    }

    /// Stamps in the use order, live or not (for tests: it stays near the number of entries).
    var useSlots: Int { uses.count }

    private mutating func remove(slot: Int) {
        let entry = entries.remove(slot: slot)
        forgetUse(entry.used)
        bytes -= entry.bytes
    }

    /// Marks a stamp unused, then moves `oldest` past unused ones (each is passed once) and now and then
    /// drops the unused head of the array, so it never shifts on every use.
    private mutating func forgetUse(_ stamp: UInt64) {
        uses[Int(stamp - firstStamp)] = Self.unused
        while oldest < uses.count, uses[oldest] == Self.unused { oldest += 1 }
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
