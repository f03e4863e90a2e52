/// The session roster (PROTOCOL §3.6): every agent that served a session, noted where affinity is; handed to
/// the journal once a tick when it changed; put back from the journal at start, with each session's affinity;
/// and answered to a `roster` QUERY by the bus itself.
extension CoordinatorState {
    /// The most sessions one `roster` answer lists.
    public static let rosterLimit = 1000

    /// Milliseconds since 1970 at monotonic `now`.
    func wallClockMs(_ now: UInt64) -> Int64 { settings.wallClockAtZeroMs &+ Int64(now / 1_000_000) }

    /// `agent` took an invocation or a turn of `session` now, in `role` (nil: it declared none); no session: nothing.
    mutating func noteServed(_ session: [UInt8], agent: String, role: String?, now: UInt64) {
        guard !session.isEmpty else { return }
        roster.record(session, agent: agent, role: role ?? "", nowMs: wallClockMs(now))
    }

    /// Sessions idle past `sessionRetentionMs` are forgotten; with a journal, what changed goes to it.
    mutating func saveRoster(now: UInt64) -> [CoordinatorAction] {
        roster.forget(servedBeforeMs: wallClockMs(now) &- Int64(settings.sessionRetentionMs))
        guard settings.journaled else { return [] }
        return roster.takeChanges().map { change in
            switch change {
            case .served(let membership): .journal(.member(membership))
            case .forgotten(let session): .journal(.forgetSession(session))
            }
        }
    }

    /// The roster as the journal kept it (oldest `lastMs` first), put back at start: a session keeps its agents
    /// and goes on to its last one across a restart.
    public mutating func restoreSessions(_ rows: [SessionMembership]) {
        for row in rows { roster.restore(row) }
        restoreAffinity()
    }

    /// Each session's affinity from the roster, least recently served first so that the affinity's own order of
    /// use is the roster's: its invocations' to the agent that served it last; its turns' to the last agent with a
    /// role (else the last agent: `turnTaker` passes over one without a planner); each role's to its last player.
    mutating func restoreAffinity() {
        for (session, members) in roster.newest(Int.max).reversed() {
            let byTime = members.sorted { $0.lastMs < $1.lastMs }
            guard let latest = byTime.last else { continue }
            affinity.record(session, agent: latest.agent)
            for member in byTime where !member.role.isEmpty {
                affinity.record(Self.roleKey(session, member.role), agent: member.agent)
            }
            affinity.record(Self.turnKey(session), agent: (byTime.last { !$0.role.isEmpty } ?? latest).agent)
        }
    }

    /// The answer to `{"query":"roster"}`: the sessions the bus knows, the most recently served first, with
    /// their agents (§5.17).
    func rosterAnswer(session: String?, limit: Int) -> AgentAnswer {
        let listed = roster.newest(limit, session: session.map { Array($0.utf8) })
        let sessions: [JSONValue] = listed.map { session, members in
            [
                "session": .string(String(decoding: session, as: UTF8.self)),
                "agents": .array(
                    members.map { member in
                        [
                            "agent": .string(member.agent), "role": .string(member.role),
                            "first": .string(FeedEvent.timestamp(milliseconds: member.firstMs)),
                            "last": .string(FeedEvent.timestamp(milliseconds: member.lastMs)),
                        ]
                    }),
            ]
        }
        return .ok(["sessions": .array(sessions), "total": .number(Double(session == nil ? roster.count : listed.count))])
    }
}
