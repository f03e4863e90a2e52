/// Which agent each session went to last: a session's context lives on that agent, so its later
/// invocations go back there. Bounded: beyond `limit` sessions the least recently used is forgotten.
struct SessionAffinity: Sendable {
    private var bySession: [ByteKey: (agent: String, use: UInt64)] = [:]
    /// Sessions in the order they were used, oldest first; an entry is stale when the session was used
    /// again since (its `use` is no longer the session's).
    private var order: [(session: ByteKey, use: UInt64)] = []
    private var head = 0
    private var lastUse: UInt64 = 0
    let limit: Int

    init(limit: Int) { self.limit = max(1, limit) }

    var count: Int { bySession.count }

    func agent(of session: [UInt8]) -> String? { bySession[ByteKey(session)]?.agent }

    /// The session went to `agent` now.
    mutating func record(_ session: [UInt8], agent: String) {
        let key = ByteKey(session)
        lastUse &+= 1
        bySession[key] = (agent, lastUse)
        order.append((key, lastUse))
        while bySession.count > limit, head < order.count {
            let oldest = order[head]
            head += 1
            if bySession[oldest.session]?.use == oldest.use { bySession[oldest.session] = nil }
        }
        // Stale entries pile up when the same sessions come back: keep the order at most twice as long
        // as the table, by dropping what is already behind the head and every stale entry.
        if order.count - head > 2 * bySession.count + 1024 {
            order = order[head...].filter { bySession[$0.session]?.use == $0.use }
            head = 0
        }
    }
}
