import Foundation
import Testing

@testable import Skillbus

@Suite("The dashboard's latest sessions, folded from turn events")
struct RecentSessionsTests {
    static let start = Date(timeIntervalSince1970: 1_800_000_000)

    static func time(_ milliseconds: Double) -> Date { start.addingTimeInterval(milliseconds / 1000) }

    /// Folds a typed event as the operator site does.
    static func apply(_ event: FeedEvent, at milliseconds: Double, to sessions: inout RecentSessions) {
        sessions.apply(topic: event.topic, fields: event.fields, time: time(milliseconds))
    }

    static func state(_ agent: String, _ state: AgentState, _ session: String, _ turn: String) -> FeedEvent {
        .turnState(agent: agent, state: state, turn: TurnRef(session: session, turn: turn))
    }

    @Test("two agents' turns in one session: their events in order, live while a turn runs, calls without results")
    func twoAgents() throws {
        var sessions = RecentSessions()
        Self.apply(Self.state("a", .thinking, "s1", "t1"), at: 0, to: &sessions)
        Self.apply(Self.state("a", .executingSkill("echo"), "s1", "t1"), at: 1, to: &sessions)
        let call = TurnCall(
            skill: "echo", parameters: ["text": "hi"], agent: "a", durationMs: 0.5, outcome: .success(.text("hi")))
        Self.apply(.turnCall(agent: "a", turn: TurnRef(session: "s1", turn: "t1"), call: call), at: 2.5, to: &sessions)
        #expect(sessions.newestFirst.first?.live == true)
        #expect(sessions.newestFirst.first?.running == ["t1": "a"])
        Self.apply(Self.state("a", .completed, "s1", "t1"), at: 3, to: &sessions)
        Self.apply(Self.state("b", .thinking, "s1", "t2"), at: 1000, to: &sessions)
        Self.apply(Self.state("b", .failed("the planner broke"), "s1", "t2"), at: 1001, to: &sessions)
        // Neither an agent's state outside a turn nor a turn without a session belongs to a session.
        Self.apply(.agentState(agent: "a", state: .idle), at: 1002, to: &sessions)
        Self.apply(Self.state("c", .thinking, "", "t3"), at: 1003, to: &sessions)
        let session = try #require(sessions.newestFirst.first)
        #expect(sessions.newestFirst.count == 1)
        #expect(session.id == "s1" && session.agents == ["a", "b"] && !session.live)
        #expect((session.first, session.last) == (Self.time(0), Self.time(1001)))
        #expect(
            session.events.map { $0["type"]?.stringValue ?? "" } == [
                "agent.state", "agent.state", "turn.call", "agent.state", "agent.state", "agent.state",
            ])
        #expect(
            session.events.map { $0["state"]?.stringValue } == [
                "thinking", "executingSkill", nil, "completed", "thinking", "failed",
            ])
        let stored = session.events[2]
        #expect(stored["time"]?.stringValue == "2027-01-15T08:00:00.002Z")
        #expect(stored["call"]?["skill"] == "echo" && stored["call"]?["status"] == "ok")
        #expect(stored["call"]?["result"] == nil && stored["call"]?["parameters"] == nil)
        #expect(session.events[1]["parameters"] == nil)
        let json = sessions.json
        #expect(json["sessions"]?.arrayValue?.first?["session"] == "s1")
        #expect(json["sessions"]?.arrayValue?.first?["running"] == [:])
        #expect(json["sessions"]?.arrayValue?.first?["events"]?.arrayValue?.count == 6)
    }

    @Test("nested turns, delegations and handoffs are kept as they come, their long texts cut")
    func teams() throws {
        var sessions = RecentSessions()
        let message = String(repeating: "m", count: 1000)
        sessions.apply(
            topic: "turn.delegated",
            fields: [
                "agent": "lead", "session": "s1", "turn": "t1", "round": "r", "to": "writer", "role": "writer",
                "message": .string(message), "child": "t2",
            ], time: Self.time(0))
        sessions.apply(
            topic: "agent.state",
            fields: [
                "agent": "writer", "session": "s1", "turn": "t2", "parent": "t1", "depth": 1, "state": "thinking",
            ],
            time: Self.time(1))
        sessions.apply(
            topic: "turn.handoff",
            fields: ["agent": "lead", "session": "s1", "turn": "t1", "to": "closer", "note": "yours", "next": "t3"],
            time: Self.time(2))
        let session = try #require(sessions.newestFirst.first)
        #expect(session.agents == ["lead", "writer", "closer"])
        #expect(session.running == ["t2": "writer"])
        #expect(session.events[0]["child"] == "t2")
        #expect(session.events[0]["message"]?.stringValue?.count == RecentSessions.textLimit + 1)
        #expect(session.events[1]["parent"] == "t1" && session.events[1]["depth"] == 1)
        #expect(session.events[2]["next"] == "t3" && session.events[2]["type"] == "turn.handoff")
    }

    @Test("bounded: the least recently active session goes first, a long session keeps its latest events")
    func bounds() throws {
        var sessions = RecentSessions(limit: 2, eventLimit: 3)
        Self.apply(Self.state("a", .thinking, "s1", "t1"), at: 0, to: &sessions)
        Self.apply(Self.state("b", .thinking, "s2", "t2"), at: 1, to: &sessions)
        Self.apply(Self.state("a", .completed, "s1", "t1"), at: 2, to: &sessions)
        Self.apply(Self.state("c", .thinking, "s3", "t3"), at: 3, to: &sessions)
        #expect(sessions.newestFirst.map(\.id) == ["s3", "s1"], "s2 was the least recently active")
        for (index, state) in [AgentState.selectingSkill, .streaming, .completed].enumerated() {
            Self.apply(Self.state("c", state, "s3", "t3"), at: 4 + Double(index), to: &sessions)
        }
        let long = try #require(sessions.newestFirst.first)
        #expect(long.events.map { $0["state"]?.stringValue } == ["selectingSkill", "streaming", "completed"])
        #expect(long.dropped == 1 && long.json["dropped"] == 1)
    }

    @Test("an agent that leaves ends its running turns, in every session")
    func agentLeft() {
        var sessions = RecentSessions()
        Self.apply(Self.state("a", .executingSkill("sleep"), "s1", "t1"), at: 0, to: &sessions)
        Self.apply(Self.state("b", .thinking, "s1", "t2"), at: 0, to: &sessions)
        Self.apply(Self.state("a", .thinking, "s2", "t3"), at: 0, to: &sessions)
        Self.apply(.agentLeft(agent: "a", reason: "disconnected"), at: 1, to: &sessions)
        #expect(sessions.newestFirst.map(\.running) == [[:], ["t2": "b"]])
    }

    @Test("the site serves /sessions from the events it collected")
    func site() throws {
        let board = try OperatorBoard()
        defer { board.wakePipe.close() }
        let site = OperatorSite(board: board)
        board.post(Self.state("a", .thinking, "s1", "t1"))
        board.post(Self.state("a", .completed, "s1", "t1"))
        _ = site.collect(streaming: false)
        let answer = site.respond(
            to: HTTPRequestHead(method: "GET", path: "/sessions", version: "HTTP/1.1", headers: [:]))
        #expect(answer.status == 200 && answer.contentType == "application/json")
        let json = try JSONValue(parsing: String(decoding: answer.body, as: UTF8.self))
        #expect(
            json["sessions"]?.arrayValue?.first?["agents"] == ["a"]
                && json["sessions"]?.arrayValue?.first?["live"] == false)
        #expect(json["sessions"]?.arrayValue?.first?["events"]?.arrayValue?.count == 2)
    }
}
