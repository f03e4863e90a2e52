import Testing

@testable import Skillbus
@testable import SkillbusCommands

/// What `skillbus history` and `skillbus sessions` make of several agents' answers, without a bus.
@Suite("Session views: one session from several agents")
struct SessionViewsTests {
    func message(_ index: Int, _ role: String, _ time: String) -> JSONValue {
        ["index": .number(Double(index)), "role": .string(role), "content": "x", "time": .string(time), "round": "r"]
    }

    @Test("histories merge in time order, each message naming its agent; ties keep the agents' order, then index")
    func mergedHistory() {
        let alpha = [message(0, "user", "2026-12-01T10:00:00.001Z"), message(1, "agent", "2026-12-01T10:00:00.300Z")]
        let beta = [
            message(0, "skillCall", "2026-12-01T10:00:00.100Z"), message(1, "skillResult", "2026-12-01T10:00:00.300Z"),
            message(2, "user", "2026-12-01T10:00:01.000Z"),
        ]
        let merged = SessionViews.mergedHistory([("alpha", alpha), ("beta", beta)])
        #expect(
            merged.map { "\($0["agent"]?.stringValue ?? "") \($0["role"]?.stringValue ?? "")" } == [
                "alpha user", "beta skillCall", "alpha agent", "beta skillResult", "beta user",
            ])
        // Nothing of the message is lost: it is the agent's, plus its name.
        #expect(merged.first == ["index": 0, "role": "user", "content": "x", "time": "2026-12-01T10:00:00.001Z", "round": "r", "agent": "alpha"])
        #expect(SessionViews.mergedHistory([]).isEmpty)
    }

    @Test("sessions join the roster's members with what each agent's store says; store-only sessions are listed too")
    func listing() {
        let roster: [JSONValue] = [
            [
                "session": "s1",
                "agents": [
                    ["agent": "alpha", "role": "", "first": "2026-12-01T10:00:00.000Z", "last": "2026-12-01T10:00:05.000Z"],
                    ["agent": "gone", "role": "critic", "first": "2026-12-01T10:00:01.000Z", "last": "2026-12-01T10:00:02.000Z"],
                ],
            ]
        ]
        let stores: [(agent: String, sessions: [JSONValue])] = [
            ("beta", [["session": "old", "turns": 1, "messages": 2, "updated": "2026-11-30T09:00:00.000Z"]]),
            (
                "alpha",
                [
                    ["session": "s1", "turns": 2, "messages": 8, "updated": "2026-12-01T10:00:05.010Z"],
                    ["session": "s0", "turns": 0, "messages": 2, "updated": "2026-12-01T11:00:00.000Z"],
                ]
            ),
        ]
        let sessions = SessionViews.listing(roster: roster, stores: stores)
        // The most recently active first: s0 (only alpha's store knows it) is newer than s1.
        #expect(sessions.map { $0["session"]?.stringValue ?? "" } == ["s0", "s1", "old"])
        let s1 = sessions[1]["agents"]?.arrayValue ?? []
        #expect(
            s1 == [
                [
                    "agent": "alpha", "role": "", "first": "2026-12-01T10:00:00.000Z", "last": "2026-12-01T10:00:05.000Z",
                    "turns": 2, "messages": 8, "updated": "2026-12-01T10:00:05.010Z",
                ],
                // Not live: the roster's word only.
                ["agent": "gone", "role": "critic", "first": "2026-12-01T10:00:01.000Z", "last": "2026-12-01T10:00:02.000Z"],
            ])
        #expect(sessions[0]["agents"] == [["agent": "alpha", "turns": 0, "messages": 2, "updated": "2026-12-01T11:00:00.000Z"]])
        #expect(SessionViews.listing(roster: [], stores: []).isEmpty)
    }
}
