import Testing

@testable import Skillbus

/// The session roster without sockets: which agents served a session, in which role and when; its limits; what
/// it hands the journal; and, through the state machine, where it is noted, how a `roster` QUERY is answered,
/// and how affinity comes back from it after a restart.
@Suite("Session roster")
struct SessionRosterTests {
    static let ms: UInt64 = 1_000_000
    let s1 = Array("s1".utf8)
    let s2 = Array("s2".utf8)
    let s3 = Array("s3".utf8)

    func membership(_ session: [UInt8], _ agent: String, _ first: Int64, _ last: Int64, role: String = "") -> SessionMembership {
        SessionMembership(session: session, agent: agent, role: role, firstMs: first, lastMs: last)
    }

    @Test("each agent once per session, in the order it first served, with its role and first and last times")
    func members() {
        var roster = SessionRoster(limit: 10, journaled: false)
        roster.record(s1, agent: "alpha", role: "", nowMs: 100)
        roster.record(s1, agent: "beta", role: "critic", nowMs: 200)
        roster.record(s1, agent: "alpha", role: "writer", nowMs: 300)
        #expect(
            roster.members(of: s1) == [
                .init(agent: "alpha", role: "writer", firstMs: 100, lastMs: 300),
                .init(agent: "beta", role: "critic", firstMs: 200, lastMs: 200),
            ])
        #expect(roster.latest(of: s1)?.agent == "alpha")
        #expect(roster.members(of: s2).isEmpty && roster.latest(of: s2) == nil)
    }

    @Test("beyond its limit the least recently served session is forgotten; newest lists the most recent first")
    func limit() {
        var roster = SessionRoster(limit: 2, journaled: false)
        roster.record(s1, agent: "alpha", role: "", nowMs: 1)
        roster.record(s2, agent: "alpha", role: "", nowMs: 2)
        roster.record(s1, agent: "beta", role: "", nowMs: 3)  // s1 is the most recent again
        roster.record(s3, agent: "alpha", role: "", nowMs: 4)  // s2 goes
        #expect(roster.count == 2 && roster.members(of: s2).isEmpty)
        #expect(roster.newest(10).map(\.session) == [s3, s1])
        #expect(roster.newest(1).map(\.session) == [s3])
        #expect(roster.newest(10, session: s1).first?.members.map(\.agent) == ["alpha", "beta"])
        #expect(roster.newest(10, session: s2).isEmpty)
        // Many uses of the same sessions keep the order bounded and the listing right.
        for round in 0..<5000 { roster.record(round % 2 == 0 ? s1 : s3, agent: "alpha", role: "", nowMs: 10 + Int64(round)) }
        #expect(roster.newest(10).map(\.session) == [s3, s1] && roster.count == 2)
    }

    @Test("sessions nobody served since the cutoff are forgotten, the others stay")
    func idle() {
        var roster = SessionRoster(limit: 10, journaled: true)
        roster.record(s1, agent: "alpha", role: "", nowMs: 100)
        roster.record(s2, agent: "alpha", role: "", nowMs: 200)
        roster.record(s1, agent: "beta", role: "", nowMs: 300)
        _ = roster.takeChanges()
        roster.forget(servedBeforeMs: 250)
        #expect(roster.newest(10).map(\.session) == [s1])
        #expect(roster.takeChanges() == [.forgotten(session: s2)])
    }

    @Test("the journal hears of a new member and of a move at once, of the same agent again at most once a second")
    func changes() {
        var roster = SessionRoster(limit: 10, journaled: true)
        roster.record(s1, agent: "alpha", role: "", nowMs: 1000)
        #expect(roster.takeChanges() == [.served(membership(s1, "alpha", 1000, 1000))])
        roster.record(s1, agent: "alpha", role: "", nowMs: 1500)
        #expect(roster.takeChanges().isEmpty)
        roster.record(s1, agent: "alpha", role: "", nowMs: 2000)
        #expect(roster.takeChanges() == [.served(membership(s1, "alpha", 1000, 2000))])
        roster.record(s1, agent: "beta", role: "critic", nowMs: 2100)
        roster.record(s1, agent: "alpha", role: "", nowMs: 2200)  // the session moved back: written at once
        let both = roster.takeChanges()
        #expect(both.count == 2)
        #expect(both.contains(.served(membership(s1, "beta", 2100, 2100, role: "critic"))))
        #expect(both.contains(.served(membership(s1, "alpha", 1000, 2200))))
        // Not journaled: nothing is kept for it.
        var memoryOnly = SessionRoster(limit: 10, journaled: false)
        memoryOnly.record(s1, agent: "alpha", role: "", nowMs: 1)
        #expect(memoryOnly.takeChanges().isEmpty)
    }

    @Test("a session forgotten and served again reaches the journal as forgotten first, then served")
    func forgottenThenServed() {
        var roster = SessionRoster(limit: 1, journaled: true)
        roster.record(s1, agent: "alpha", role: "", nowMs: 1)
        _ = roster.takeChanges()
        roster.record(s2, agent: "alpha", role: "", nowMs: 2)  // s1 goes
        roster.record(s1, agent: "beta", role: "", nowMs: 3)  // s2 goes, s1 is back with beta alone
        let changes = roster.takeChanges()
        #expect(changes.prefix(2) == [.forgotten(session: s1), .forgotten(session: s2)])
        #expect(changes.dropFirst(2) == [.served(membership(s1, "beta", 3, 3))])
        #expect(roster.members(of: s1).map(\.agent) == ["beta"])
    }

    @Test("rows read back from the journal make the same roster, saved already; beyond the limit they are forgotten")
    func restore() {
        var roster = SessionRoster(limit: 2, journaled: true)
        // As the journal reads them: oldest last first, so a member that served first may come later.
        for row in [
            membership(s3, "alpha", 10, 10), membership(s1, "beta", 50, 60, role: "critic"),
            membership(s2, "alpha", 70, 70), membership(s1, "alpha", 20, 80),
        ] { roster.restore(row) }
        #expect(roster.newest(10).map(\.session) == [s1, s2])
        #expect(roster.members(of: s1).map(\.agent) == ["alpha", "beta"])
        #expect(roster.latest(of: s1)?.agent == "alpha")
        #expect(roster.takeChanges() == [.forgotten(session: s3)])
    }

    // MARK: - In the state machine

    let client: PeerID = [0xC1]
    let alpha: PeerID = [0xA1]
    let beta: PeerID = [0xB1]

    func cluster(journaled: Bool = true) -> CoordinatorState {
        var settings = CoordinatorState.Settings()
        settings.journaled = journaled
        settings.wallClockAtZeroMs = 1_000_000
        var state = CoordinatorState(settings: settings)
        for (name, peer) in [("alpha", alpha), ("beta", beta)] {
            let body: JSONValue = ["name": .string(name), "capacity": 4, "skills": [["identifier": "echo"]]]
            _ = state.handleWorker(.ready(body), from: peer, now: 0)
        }
        return state
    }

    func invoke(_ id: String, session: String, agent: String? = nil) -> InvokeRequest {
        InvokeRequest(requestID: id, roundID: "round-" + id, sessionID: session, skill: "echo", parameters: Array("{}".utf8))
    }

    func rosterAnswer(_ state: inout CoordinatorState, session: String? = nil) -> JSONValue? {
        let query = QueryRequest(requestID: "q", agent: "", query: .roster(session: session, limit: 100))
        let actions = state.handleQuery(query, from: client, now: 0)
        guard case .toClient(_, .answer(_, let agent, .ok(let body)))? = actions.first, agent.isEmpty else { return nil }
        return body
    }

    func journaled(_ actions: [CoordinatorAction]) -> [JournalEntry] {
        actions.compactMap { if case .journal(let entry) = $0 { entry } else { nil } }
    }

    @Test("every agent an invocation of a session goes to is noted, answered to roster, and journaled at the tick")
    func noted() throws {
        var state = cluster()
        let first = state.handleInvoke(invoke("r1", session: "s1"), from: client, now: 5 * Self.ms)
        let took = try #require(first.compactMap { if case .toWorker(let peer, .invoke) = $0 { peer } else { nil } }.first)
        let (holder, other) = took == alpha ? ("alpha", beta) : ("beta", alpha)
        // The holder leaves: the session moves to the other agent.
        _ = state.handleWorker(.disconnect, from: took, now: 6 * Self.ms)
        _ = state.handleInvoke(invoke("r2", session: "s1"), from: client, now: 7 * Self.ms)
        _ = state.handleInvoke(invoke("r3", session: ""), from: client, now: 8 * Self.ms)
        let answer = try #require(rosterAnswer(&state))
        let agents = answer["sessions"]?.arrayValue?.first?["agents"]?.arrayValue ?? []
        #expect(answer["total"] == 1 && answer["sessions"]?.arrayValue?.first?["session"] == "s1")
        #expect(agents.map { $0["agent"]?.stringValue ?? "" } == [holder, state.workers[other]?.name ?? ""])
        #expect(agents.first?["first"] == .string(FeedEvent.timestamp(milliseconds: 1_000_005)))
        #expect(agents.first?["role"] == "")
        #expect(rosterAnswer(&state, session: "nobody")?["sessions"] == [])
        let entries = journaled(state.tick(now: 9 * Self.ms))
        #expect(entries.count == 2 && entries.allSatisfy { if case .member = $0 { true } else { false } })
        #expect(journaled(state.tick(now: 10 * Self.ms)).isEmpty)
        // Without a journal the roster is answered all the same, and nothing is journaled.
        var memoryOnly = cluster(journaled: false)
        _ = memoryOnly.handleInvoke(invoke("r1", session: "s1"), from: client, now: 1)
        #expect(rosterAnswer(&memoryOnly)?["total"] == 1 && journaled(memoryOnly.tick(now: 2)).isEmpty)
    }

    @Test("restored from the journal, a session goes back to the agent that served it last")
    func restoredAffinity() {
        var state = cluster()
        // alpha served s1 first, beta last; s2 only alpha.
        state.restoreSessions([membership(s1, "alpha", 10, 20), membership(s2, "alpha", 12, 25), membership(s1, "beta", 15, 30)])
        #expect(state.affinity.agent(of: s1) == "beta" && state.affinity.agent(of: s2) == "alpha")
        // beta gets busier and busier, and still takes every invocation of s1.
        for index in 0..<3 {
            let actions = state.handleInvoke(invoke("r\(index)", session: "s1"), from: client, now: 2)
            #expect(actions.contains { if case .toWorker(beta, .invoke) = $0 { true } else { false } })
        }
        #expect(state.workers[beta]?.inFlight == 3 && state.workers[alpha]?.inFlight == 0)
        #expect(journaled(state.tick(now: 3)).allSatisfy { if case .member(let row) = $0 { row.agent == "beta" } else { false } })
    }
}
