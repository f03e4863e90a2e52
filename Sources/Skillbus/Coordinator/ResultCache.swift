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
    /// Use stamp → key, oldest first from `oldest`: a stamp whose key was used again since is gone.
    private var order: [UInt64: ByteKey] = [:]
    private var oldest: UInt64 = 0
    private var nextStamp: UInt64 = 0
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
        order[entries.values[index].used] = nil
        let stamp = stamp()
        entries.values[index].used = stamp
        order[stamp] = key
        skipGoneStamps()
        hits += 1
        return entries.values[index].outcome
    }

    /// Keeps `outcome` (an `ok` one) under `key` for `lifetimeMs`; then drops the least recently used
    /// entries until the cache fits its budget. One larger than the whole budget is not kept.
    mutating func store(_ key: ByteKey, _ outcome: Outcome, lifetimeMs: Int, now: UInt64) {
        let size = key.bytes.count + outcome.payload.count + outcome.agent.count + Self.entryOverhead
        guard outcome.status == .ok, size <= limitBytes else { return }
        remove(key)
        let stamp = stamp()
        entries[key] = Entry(
            outcome: outcome, expires: now &+ UInt64(lifetimeMs) * 1_000_000, bytes: size, used: stamp)
        order[stamp] = key
        bytes += size
        // `oldest` is always a live stamp (or the next one to be given): its key is the least recently used.
        while bytes > limitBytes, let victim = order[oldest] { remove(victim) }
    }

    private mutating func stamp() -> UInt64 {
        defer { nextStamp += 1 }
        return nextStamp
    }

    private mutating func remove(_ key: ByteKey) {
        guard let entry = entries.removeValue(forKey: key) else { return }
        order[entry.used] = nil
        bytes -= entry.bytes
        skipGoneStamps()
    }

    /// Moves `oldest` past stamps whose key was used again or removed: each stamp is passed once.
    private mutating func skipGoneStamps() {
        while oldest < nextStamp, order[oldest] == nil { oldest += 1 }
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
