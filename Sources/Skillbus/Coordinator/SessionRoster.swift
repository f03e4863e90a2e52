/// Which agents took part in each session: every agent the bus gave an invocation or a turn of the session
/// to, the role it had then, and when it served the session first and last (milliseconds since 1970). Each
/// agent keeps its own history of the session; the roster is how the bus finds all of them (PROTOCOL §3.6).
///
/// Bounded like `SessionAffinity`: beyond `limit` sessions the least recently served is forgotten, and
/// `forget(servedBeforeMs:)` forgets those idle too long. With `journaled`, it also keeps what changed since
/// the last `takeChanges()`, for the coordinator's journal: a member when it joins a session, when the session
/// moves to another agent, and else at most once per `saveIntervalMs`; a session when it is forgotten.
struct SessionRoster: Sendable {
    struct Member: Sendable, Equatable {
        var agent: String
        /// The role the agent had when it last served the session; "" for none.
        var role: String
        var firstMs: Int64
        var lastMs: Int64
    }

    enum Change: Sendable, Equatable {
        case served(SessionMembership)
        case forgotten(session: [UInt8])
    }

    private struct Entry {
        /// In the order they first served the session; the last to serve it is `members[latest]`.
        var members: [Member]
        var latest: Int
        var use: UInt64
        /// Each member's `lastMs` as last handed to the journal (nil: never), by index in `members`.
        var saved: [Int64?]
    }

    private struct PendingKey: Hashable {
        let session: ByteKey
        let agent: String
    }

    private var bySession: [ByteKey: Entry] = [:]
    /// Sessions in the order they were served, oldest first; an entry is stale when the session was served
    /// again since (its `use` is no longer the session's).
    private var order: [(session: ByteKey, use: UInt64)] = []
    private var head = 0
    private var lastUse: UInt64 = 0
    private var pending: Set<PendingKey> = []
    private var forgottenSessions: [ByteKey] = []
    let limit: Int
    let journaled: Bool
    static let saveIntervalMs: Int64 = 1000

    init(limit: Int, journaled: Bool) {
        self.limit = max(1, limit)
        self.journaled = journaled
    }

    var count: Int { bySession.count }

    /// The session's members in the order they first served it; empty for a session the roster does not know.
    func members(of session: [UInt8]) -> [Member] { bySession[ByteKey(session)]?.members ?? [] }

    /// The member that served the session last.
    func latest(of session: [UInt8]) -> Member? {
        bySession[ByteKey(session)].map { $0.members[$0.latest] }
    }

    /// `agent` (in `role`) served `session` at `nowMs`.
    mutating func record(_ session: [UInt8], agent: String, role: String, nowMs: Int64) {
        let key = ByteKey(session)
        lastUse &+= 1
        var entry = bySession[key] ?? Entry(members: [], latest: 0, use: 0, saved: [])
        let index: Int
        if let known = entry.members.firstIndex(where: { $0.agent == agent }) {
            index = known
            // An invocation says no role (""): the role a turn noted stays.
            if !role.isEmpty { entry.members[index].role = role }
            entry.members[index].lastMs = max(entry.members[index].lastMs, nowMs)
        } else {
            index = entry.members.count
            entry.members.append(Member(agent: agent, role: role, firstMs: nowMs, lastMs: nowMs))
            entry.saved.append(nil)
        }
        let moved = entry.latest != index
        entry.latest = index
        entry.use = lastUse
        if journaled {
            let saved = entry.saved[index]
            if moved || saved == nil || entry.members[index].lastMs - (saved ?? 0) >= Self.saveIntervalMs {
                pending.insert(PendingKey(session: key, agent: agent))
            }
        }
        bySession[key] = entry
        order.append((key, lastUse))
        evictBeyondLimit()
    }

    /// Puts back a member read from the journal (oldest `lastMs` first), as saved already.
    mutating func restore(_ row: SessionMembership) {
        let member = Member(agent: row.agent, role: row.role, firstMs: row.firstMs, lastMs: row.lastMs)
        let key = ByteKey(row.session)
        lastUse &+= 1
        var entry = bySession[key] ?? Entry(members: [], latest: 0, use: 0, saved: [])
        if let known = entry.members.firstIndex(where: { $0.agent == member.agent }) {
            entry.members[known] = member
            entry.saved[known] = member.lastMs
        } else {
            entry.members.append(member)
            entry.saved.append(member.lastMs)
        }
        // Rows may come in any order of first service: keep the members in that order, the latest by `lastMs`.
        let latest = entry.members.indices.max { entry.members[$0].lastMs < entry.members[$1].lastMs } ?? 0
        let agent = entry.members[latest].agent
        let sorted = entry.members.indices.sorted { entry.members[$0].firstMs < entry.members[$1].firstMs }
        entry.members = sorted.map { entry.members[$0] }
        entry.saved = sorted.map { entry.saved[$0] }
        entry.latest = entry.members.firstIndex { $0.agent == agent } ?? 0
        entry.use = lastUse
        bySession[key] = entry
        order.append((key, lastUse))
        evictBeyondLimit()
    }

    /// Forgets every session no agent served since `cutoffMs`.
    mutating func forget(servedBeforeMs cutoffMs: Int64) {
        while head < order.count {
            let oldest = order[head]
            guard let entry = bySession[oldest.session], entry.use == oldest.use else {
                head += 1
                continue
            }
            guard entry.members[entry.latest].lastMs < cutoffMs else { return }
            head += 1
            remove(oldest.session)
        }
    }

    /// Up to `limit` sessions, the most recently served first, with how many the roster holds.
    func newest(_ limit: Int, session: [UInt8]? = nil) -> [(session: [UInt8], members: [Member])] {
        if let session {
            return bySession[ByteKey(session)].map { [(session, $0.members)] } ?? []
        }
        var sessions: [(session: [UInt8], members: [Member])] = []
        var index = order.count - 1
        while index >= head, sessions.count < limit {
            let (key, use) = order[index]
            if let entry = bySession[key], entry.use == use { sessions.append((key.bytes, entry.members)) }
            index -= 1
        }
        return sessions
    }

    /// What changed since the last call, for the journal: forgotten sessions first, then the members to write.
    mutating func takeChanges() -> [Change] {
        guard !pending.isEmpty || !forgottenSessions.isEmpty else { return [] }
        var changes = forgottenSessions.map { Change.forgotten(session: $0.bytes) }
        for key in pending {
            guard var entry = bySession[key.session],
                let index = entry.members.firstIndex(where: { $0.agent == key.agent })
            else { continue }
            let member = entry.members[index]
            changes.append(
                .served(
                    SessionMembership(
                        session: key.session.bytes, agent: member.agent, role: member.role, firstMs: member.firstMs,
                        lastMs: member.lastMs)))
            entry.saved[index] = entry.members[index].lastMs
            bySession[key.session] = entry
        }
        pending = []
        forgottenSessions = []
        return changes
    }

    private mutating func evictBeyondLimit() {
        while bySession.count > limit, head < order.count {
            let oldest = order[head]
            head += 1
            if bySession[oldest.session]?.use == oldest.use { remove(oldest.session) }
        }
        // Stale entries pile up when the same sessions come back: keep the order at most about twice as long
        // as the table, by dropping what is already behind the head and every stale entry.
        if order.count - head > 2 * bySession.count + 1024 {
            order = order[head...].filter { bySession[$0.session]?.use == $0.use }
            head = 0
        }
    }

    private mutating func remove(_ session: ByteKey) {
        guard let entry = bySession.removeValue(forKey: session) else { return }
        guard journaled else { return }
        for member in entry.members { pending.remove(PendingKey(session: session, agent: member.agent)) }
        forgottenSessions.append(session)
    }
}
