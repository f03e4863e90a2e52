import Foundation
import Testing

@testable import Skillbus

/// A turn's STATEs and STEPs that its worker left out of the wire (PROTOCOL §3.7): the bus takes them from the
/// turn document of its TURNEND, after the ones it got, in the order the worker would have sent them. No sockets.
@Suite("Unsent turn reports")
struct UnsentReportsTests {
    let client: PeerID = [0xC1]
    let agent: PeerID = [0xA1]

    /// A bus with a planner agent `alpha` offering echo.
    func bus() -> CoordinatorState {
        var state = CoordinatorState()
        let body: JSONValue = [
            "name": "alpha", "capacity": 2, "heartbeatMs": 1000, "planner": true,
            "skills": [["identifier": "echo", "parameters": []]],
        ]
        _ = state.handleWorker(.ready(body), from: agent, now: 0)
        return state
    }

    func ask(_ state: inout CoordinatorState, progress: Bool = false, timeoutMs: Int? = nil) throws -> TurnRequest {
        let actions = state.handleAsk(
            AskRequest(
                requestID: "a1", roundID: "r1", agent: "alpha", timeoutMs: timeoutMs, message: "say hi",
                progress: progress),
            from: client, now: 0)
        return try #require(
            actions.compactMap { action -> TurnRequest? in
                if case .toWorker(_, .turn(let turn)) = action { return turn }
                return nil
            }.first)
    }

    /// What the reference worker's loop goes through for a one-call turn, and the document it writes of it.
    func oneCallTurn(_ turn: TurnRequest) -> (states: [AgentState], call: TurnCall, document: [UInt8]) {
        let call = TurnCall(
            skill: "echo", parameters: ["text": "hi"], agent: "alpha", durationMs: 0.1,
            outcome: .success(try! SkillResult(json: ["type": "text", "text": "hi"])))
        let states: [AgentState] = [
            .thinking, .selectingSkill, .executingSkill("echo"), .thinking, .streaming, .completed,
        ]
        var record = TurnRecord(turn: turn, agent: "alpha", role: nil)
        record.states = states.map { ($0, Date()) }
        record.calls = [PlannerStep(skill: call.skill, parameters: call.parameters, outcome: call.outcome)]
        record.ran = [call]
        record.reply = "hi"
        return (states, call, record.document(status: "ok"))
    }

    /// The turn's states and calls among `actions`, in order, as text: `state NAME` or `call SKILL`.
    func reports(_ actions: [CoordinatorAction]) -> [String] {
        actions.compactMap { action in
            switch action {
            case .publish(.turnState(_, let state, let turn)):
                let parameters = turn.parameters.map { " " + $0.jsonString } ?? ""
                return "state \(state.name)\(parameters)"
            case .publish(.turnCall(_, _, let call)): return "call \(call.skill)"
            default: return nil
            }
        }
    }

    func progress(_ actions: [CoordinatorAction]) -> Int {
        actions.filter {
            if case .toClient(_, .progress) = $0 { return true }
            return false
        }.count
    }

    func end(_ state: inout CoordinatorState, _ turn: TurnRequest, _ document: [UInt8]) -> [CoordinatorAction] {
        state.handleWorker(
            .turnEnd(turnID: turn.turnID, RelayedAnswer(status: .ok, body: document)), from: agent, now: 1)
    }

    @Test("a TURNEND alone: every state and the call, in the loop's order, the call's parameters on executingSkill")
    func everythingFromTheDocument() throws {
        var state = bus()
        let turn = try ask(&state)
        let actions = end(&state, turn, oneCallTurn(turn).document)
        #expect(
            reports(actions) == [
                "state thinking", "state selectingSkill", #"state executingSkill {"text":"hi"}"#, "call echo",
                "state thinking", "state streaming", "state completed",
            ])
        // They come before the answer to the client.
        let answer = try #require(
            actions.firstIndex {
                if case .toClient(_, .relayedTurn) = $0 { return true }
                return false
            })
        #expect(
            actions.lastIndex {
                if case .publish(.turnState) = $0 { return true }
                return false
            }! < answer)
    }

    @Test("only what the worker did not send comes from the document; nothing twice")
    func onlyTheRest() throws {
        var state = bus()
        let turn = try ask(&state)
        let (states, call, document) = oneCallTurn(turn)
        let ref = TurnRef(session: "", turn: turn.turnID)
        for sent in states.prefix(3) { _ = state.handleWorker(.turnState(sent, ref), from: agent, now: 1) }
        #expect(
            reports(end(&state, turn, document)) == [
                "call echo", "state thinking", "state streaming", "state completed",
            ])

        var again = bus()
        let second = try ask(&again)
        let secondRef = TurnRef(session: "", turn: second.turnID)
        for sent in states.prefix(3) { _ = again.handleWorker(.turnState(sent, secondRef), from: agent, now: 1) }
        _ = again.handleWorker(.step(turnID: second.turnID, call), from: agent, now: 1)
        for sent in states.dropFirst(3) { _ = again.handleWorker(.turnState(sent, secondRef), from: agent, now: 1) }
        #expect(reports(end(&again, second, oneCallTurn(second).document)).isEmpty)
    }

    @Test("nobody watching and no client following: the document is not read; a following client gets PROGRESS")
    func onlyWhenWatched() throws {
        var state = bus()
        state.publishesTurnEvents = false
        let turn = try ask(&state)
        let unwatched = end(&state, turn, oneCallTurn(turn).document)
        #expect(reports(unwatched).isEmpty)
        #expect(progress(unwatched) == 0)

        let followed = try ask(&state, progress: true)
        #expect(progress(end(&state, followed, oneCallTurn(followed).document)) == 7)
    }

    @Test("a failed turn's states come from the document in its error's details")
    func failedTurn() throws {
        var state = bus()
        let turn = try ask(&state)
        var record = TurnRecord(turn: turn, agent: "alpha", role: nil)
        record.states = [(.thinking, Date()), (.failed("the planner failed: boom"), Date())]
        let error = SkillbusError(
            .skillFailed, "the planner failed: boom",
            details: try JSONValue(parsing: record.document(status: "error", error: nil)))
        let actions = state.handleWorker(
            .turnEnd(turnID: turn.turnID, .error(error)), from: agent, now: 1)
        #expect(reports(actions) == ["state thinking", "state failed"])
    }

    /// The agent has the turn's deadline too, a moment later than the bus (the TURN's way to it): the bus gives up
    /// first, and the TURNEND that follows must still put the turn's last states on the feed.
    @Test("a turn whose deadline passed at the bus: a state sent after, and its TURNEND's states, are published")
    func lateTurn() throws {
        var state = bus()
        // Within the agent's heartbeat, so that the bus does not take it for lost first.
        let turn = try ask(&state, timeoutMs: 500)
        let ref = TurnRef(session: "", turn: turn.turnID)
        _ = state.handleWorker(.turnState(.thinking, ref), from: agent, now: 1)
        let gaveUp = state.tick(now: UInt64(turn.deadlineMs) * 1_000_000 + 1)
        #expect(
            gaveUp.contains {
                if case .toClient(_, .turn(_, _, .error(let error))) = $0 { return error.code == .timeout }
                return false
            }, "\(gaveUp)")
        var record = TurnRecord(turn: turn, agent: "alpha", role: nil)
        record.states = [
            (.thinking, Date()), (.selectingSkill, Date()), (.failed("the turn ran out of time"), Date()),
        ]
        let error = SkillbusError(
            .timeout, "the turn ran out of time", details: try JSONValue(parsing: record.document(status: "error")))
        let after = UInt64(turn.deadlineMs + 5) * 1_000_000
        _ = state.handleWorker(.turnState(.selectingSkill, ref), from: agent, now: after)
        let ended = state.handleWorker(.turnEnd(turnID: turn.turnID, .error(error)), from: agent, now: after)
        #expect(reports(ended) == ["state failed"])
        #expect(!ended.contains { if case .toClient = $0 { return true } else { return false } }, "answered once")
        // Once ended, or after the grace, the turn is forgotten: a second TURNEND publishes nothing.
        let again = state.handleWorker(.turnEnd(turnID: turn.turnID, .error(error)), from: agent, now: after)
        #expect(reports(again).isEmpty)
        let other = try ask(&state, timeoutMs: 500)
        _ = state.tick(now: UInt64(other.deadlineMs) * 1_000_000 + 1)
        // The agent is heard from just before, so it is the grace that ends, not the agent that is lost.
        let graceOver = UInt64(other.deadlineMs) * 1_000_000 + TurnTable.lateTurnGraceNanos + 2
        _ = state.handleWorker(.heartbeat(intervalMs: nil, registry: nil), from: agent, now: graceOver - 1)
        _ = state.tick(now: graceOver)
        let tooLate = state.handleWorker(.turnEnd(turnID: other.turnID, .error(error)), from: agent, now: 1)
        #expect(reports(tooLate).isEmpty)
    }
}
