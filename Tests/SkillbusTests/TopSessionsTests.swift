import Foundation
import Testing

@testable import Skillbus
@testable import SkillbusCommands

@Suite("skillbus top: the sessions view")
struct TopSessionsTests {
    static func state(_ agent: String, _ state: String, _ session: String, _ turn: String) -> JSONValue {
        ["agent": .string(agent), "state": .string(state), "session": .string(session), "turn": .string(turn)]
    }

    /// s1: a's turn asks b (a nested turn), which runs echo; s2: c's turn ended long ago.
    static func model() -> TopModel {
        var model = TopModel(started: 0)
        model.apply(topic: "agent.state", event: state("c", "thinking", "s2", "t0"), at: 1)
        model.apply(topic: "agent.state", event: state("c", "completed", "s2", "t0"), at: 2)
        model.apply(topic: "agent.state", event: state("a", "thinking", "s1", "t1"), at: 10)
        model.apply(
            topic: "turn.delegated",
            event: ["agent": "a", "session": "s1", "turn": "t1", "to": "b", "child": "t2", "message": "help"], at: 11)
        var nested = state("b", "executingSkill", "s1", "t2")
        if case .object(var fields) = nested {
            fields["skill"] = "echo"
            fields["parent"] = "t1"
            fields["depth"] = 1
            nested = .object(fields)
        }
        model.apply(topic: "agent.state", event: nested, at: 12)
        model.apply(
            topic: "turn.call",
            event: ["agent": "b", "session": "s1", "turn": "t2", "call": ["skill": "echo", "status": "ok"]], at: 13)
        // Events of no session change no session.
        model.apply(topic: "agent.state", event: ["agent": "a", "state": "idle"], at: 13)
        model.apply(topic: "turn.call", event: ["agent": "a", "session": "", "turn": "t9"], at: 13)
        return model
    }

    @Test("sessions from turn events: agents with their states, nested turns, calls, running ones first")
    func rows() throws {
        var model = Self.model()
        let rows = model.frame(now: 20).sessions
        #expect(rows.map(\.session.id) == ["s1", "s2"])
        let first = try #require(rows.first)
        #expect(
            first.session.members == [
                .init(agent: "a", state: "thinking", askedBy: nil, ended: false),
                .init(agent: "b", state: "executingSkill(echo)", askedBy: "a", ended: false),
            ])
        #expect(first.session.calls == 1 && first.session.note == "a→b")
        #expect((first.age, first.quiet) == (10, 7))
        #expect(rows[1].session.members == [.init(agent: "c", state: "completed", askedBy: nil, ended: true)])
    }

    @Test("a quiet session drops off: after a minute once its turns ended, after ten whatever it shows")
    func dropOff() {
        var model = Self.model()
        #expect(model.frame(now: 62).sessions.map(\.session.id) == ["s1", "s2"])
        #expect(model.frame(now: 63).sessions.map(\.session.id) == ["s1"], "s2 ended at 2 and was quiet since")
        #expect(model.frame(now: 613).sessions.map(\.session.id) == ["s1"])
        #expect(model.frame(now: 614).sessions.isEmpty, "s1 still showed a turn running, but for ten minutes nothing")
    }

    @Test("an agent that leaves ends its turns; a handoff is noted")
    func leaveAndHandoff() throws {
        var model = Self.model()
        model.apply(
            topic: "turn.handoff", event: ["agent": "a", "session": "s1", "turn": "t1", "to": "d", "next": "t3"], at: 14
        )
        model.apply(topic: "agent.left", event: ["agent": "b", "reason": "disconnected"], at: 15)
        let session = try #require(model.frame(now: 16).sessions.first { $0.session.id == "s1" }?.session)
        #expect(session.members.map(\.state) == ["thinking", "left"])
        #expect(session.note == "a⇒d" && session.running)
    }

    @Test("the layout lists sessions below the skills, or alone with v; the filter takes sessions and agents")
    func layout() throws {
        var model = Self.model()
        let frame = model.frame(now: 20)
        var view = TopView()
        let all = TopLayout.lines(frame, view: view, width: 120, title: "title")
        let header = try #require(all.firstIndex { $0.hasPrefix("SESSION") })
        #expect(try header > #require(all.firstIndex { $0.hasPrefix("SKILL") }))
        #expect(
            all[header + 1].hasPrefix("s1 ") && all[header + 1].contains("a: thinking, b (for a): executingSkill(echo)")
        )
        #expect(all[header + 1].hasSuffix("[a→b]"))
        #expect(all[header + 1].split(separator: " ").prefix(4) == ["s1", "10s", "7s", "1"])
        #expect(all[header + 2].hasPrefix("s2 ") && all[header + 2].contains("c: completed"))
        #expect(all.last?.contains("v sessions") == true)
        let quits = view.handle(key: UInt8(ascii: "v"))
        #expect(!quits)
        #expect(view.sessionsOnly)
        let alone = TopLayout.lines(frame, view: view, width: 120, title: "title")
        #expect(!alone.contains { $0.hasPrefix("AGENT") || $0.hasPrefix("SKILL") })
        #expect(alone.contains { $0.hasPrefix("s1 ") } && alone.last?.contains("v all") == true)
        view.filter = "C"
        let filtered = TopLayout.lines(frame, view: view, width: 120, title: "title")
        #expect(filtered.contains { $0.hasPrefix("s2 ") } && !filtered.contains { $0.hasPrefix("s1 ") })
        view.filter = "zz"
        #expect(TopLayout.lines(frame, view: view, width: 120, title: "title").contains("(no session matches)"))
        var empty = TopModel(started: 0)
        #expect(
            TopLayout.lines(empty.frame(now: 1), view: TopView(), width: 80, title: "t")
                .contains("(no session with turns lately)"))
        #expect(TopLayout.lines(frame, view: TopView(), width: 30, title: "title").allSatisfy { $0.count <= 30 })
    }

    @Test("ages in seconds, minutes or hours", arguments: [(0.4, "0s"), (59.9, "59s"), (60, "1m"), (7199, "1h")])
    func ages(_ seconds: Double, _ text: String) {
        #expect(TopLayout.age(seconds) == text)
    }
}
