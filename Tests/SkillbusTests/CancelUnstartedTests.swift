import Testing

@testable import Skillbus

/// CANCEL for what the bus accepted but has not started, without sockets: a ROUND waiting for the journal's
/// commit (PROTOCOL §3.5.9), and a ROUND or REQUEST waiting in the startup grace for an agent (§4.17).
extension CancelTests {
    static let beta: PeerID = [0xB1]
    static let roundR = Array("R".utf8)

    /// alpha (sleep, echo) on a bus with a journal, a startup grace of `graceMs` (begun at 0), or both.
    func bus(journaled: Bool = false, graceMs: Int = 0) -> CoordinatorState {
        var settings = CoordinatorState.Settings()
        settings.journaled = journaled
        settings.startupGraceMs = graceMs
        var state = CoordinatorState(settings: settings, epoch: "e1")
        state.beginStartupGrace(now: 0)
        _ = state.handleWorker(
            .ready([
                "name": "alpha", "capacity": 4, "heartbeatMs": 100_000,
                "skills": [["identifier": "sleep"], ["identifier": "echo"]],
            ]),
            from: alpha, now: 0)
        return state
    }

    func roundRequest(_ id: String, skill: String = "echo", requestID: String = "q") -> RoundRequest {
        RoundRequest(
            requestID: requestID, roundID: id, timeoutMs: 60_000,
            body: (["invoke": ["skill": .string(skill)]] as JSONValue).serialized())
    }

    /// beta comes and offers `late`, the skill nobody offered before.
    func betaJoins(_ state: inout CoordinatorState, now: UInt64 = 10) -> [CoordinatorAction] {
        state.handleWorker(
            .ready(["name": "beta", "capacity": 4, "heartbeatMs": 100_000, "skills": [["identifier": "late"]]]),
            from: Self.beta, now: now)
    }

    func journalEntries(_ actions: [CoordinatorAction]) -> [JournalEntry] {
        actions.compactMap { if case .journal(let entry) = $0 { entry } else { nil } }
    }

    func summaries(_ actions: [CoordinatorAction]) -> [JSONValue] {
        actions.compactMap { if case .toClient(_, .cancelled(_, let summary)) = $0 { summary } else { nil } }
    }

    func requestsDone(_ actions: [CoordinatorAction]) -> [String] {
        actions.compactMap {
            if case .publish(.requestDone(_, let request, _, _, _, _, _)) = $0 { request } else { nil }
        }
    }

    func expectCancelled(_ document: JSONValue?, sourceLocation: SourceLocation = #_sourceLocation) {
        #expect(document?["status"] == "error", sourceLocation: sourceLocation)
        #expect(document?["error"]?["code"] == "cancelled", sourceLocation: sourceLocation)
        #expect(document?["error"]?["details"] == ["reason": "client"], sourceLocation: sourceLocation)
    }

    @Test("a ROUND waiting for the journal, cancelled by round id: answered cancelled, forgotten there, never started")
    func journalPendingByRoundID() {
        var state = bus(journaled: true)
        #expect(journalEntries(state.handleRound(roundRequest("R"), from: client, now: 0)).count == 1)
        let actions = state.handleCancelRound(requestID: "c", roundID: "R", from: other, now: 1)
        #expect(summaries(actions) == [["round": "R", "requests": 0, "rounds": 1, "turns": 0, "stopped": 0]])
        #expect(documents(actions).count == 1)
        expectCancelled(documents(actions).first)
        // The journal committed the accept before it saw anything else: the row is deleted, nothing runs.
        let late = state.journalAnswered([.accepted(roundID: Self.roundR)], now: 2)
        #expect(journalEntries(late) == [.forget(roundID: Self.roundR)])
        #expect(invocations(late).isEmpty && documents(late).isEmpty)
        // Not kept: the same ROUND sent again runs.
        #expect(journalEntries(state.handleRound(roundRequest("R"), from: client, now: 3)).count == 1)
        #expect(invocations(state.journalAnswered([.accepted(roundID: Self.roundR)], now: 4)).count == 1)
    }

    @Test("a ROUND waiting for the journal, cancelled by its client and sent again before the journal answered")
    func journalPendingResent() {
        var state = bus(journaled: true)
        _ = state.handleRound(roundRequest("R", requestID: "q1"), from: client, now: 0)
        let gaveUp = state.handleCancel(requestID: "q1", from: client, now: 1)
        #expect(documents(gaveUp).count == 1)
        expectCancelled(documents(gaveUp).first)
        // The journal holds one accept of an id at a time: the round sent again waits for the first answer.
        #expect(state.handleRound(roundRequest("R", requestID: "q2"), from: client, now: 2).isEmpty)
        let first = state.journalAnswered([.accepted(roundID: Self.roundR)], now: 3)
        #expect(journalEntries(first).map(\.kind) == ["forget", "accept"])
        #expect(invocations(first).isEmpty && documents(first).isEmpty)
        let second = state.journalAnswered([.accepted(roundID: Self.roundR)], now: 4)
        #expect(invocations(second).count == 1)

        // An answer that is not `accepted` (the id finished under an earlier coordinator) leaves the journal be.
        _ = state.handleRound(roundRequest("S", requestID: "q3"), from: client, now: 5)
        _ = state.handleCancelRound(requestID: "c", roundID: "S", from: other, now: 6)
        let stored = state.journalAnswered([.stored(roundID: Array("S".utf8), document: [])], now: 7)
        #expect(stored.isEmpty)
    }

    @Test("a ROUND and a REQUEST waiting in the startup grace, cancelled by round id, never run when the agent comes")
    func graceByRoundID() {
        var state = bus(graceMs: 5000)
        #expect(state.handleRound(roundRequest("R", skill: "late"), from: client, now: 0).isEmpty)
        #expect(state.handleInvoke(request("sub", round: "R", skill: "late"), from: other, now: 0).isEmpty)
        let actions = state.handleCancelRound(requestID: "c", roundID: "R", from: [0xEE], now: 1)
        #expect(summaries(actions) == [["round": "R", "requests": 1, "rounds": 1, "turns": 0, "stopped": 0]])
        #expect(replies(actions) == ["sub": "cancelled"] && requestsDone(actions) == ["sub"])
        expectCancelled(documents(actions).first)
        #expect(invocations(betaJoins(&state)).isEmpty)
    }

    @Test("with a journal, a ROUND cancelled in the startup grace is forgotten in the journal at once")
    func graceJournaled() {
        var state = bus(journaled: true, graceMs: 5000)
        _ = state.handleRound(roundRequest("R", skill: "late"), from: client, now: 0)
        #expect(state.journalAnswered([.accepted(roundID: Self.roundR)], now: 1).isEmpty)
        let actions = state.handleCancelRound(requestID: "c", roundID: "R", from: other, now: 2)
        #expect(journalEntries(actions) == [.forget(roundID: Self.roundR)])
        expectCancelled(documents(actions).first)
        #expect(invocations(betaJoins(&state)).isEmpty)
    }

    @Test(
        "a REQUEST waiting in the startup grace, cancelled by its client: REPLY cancelled and request.done, never run")
    func graceRequestByItsClient() {
        var state = bus(graceMs: 5000)
        #expect(state.handleInvoke(request("q1", round: "R1", skill: "late"), from: client, now: 0).isEmpty)
        // Another connection's request with the same id is not touched.
        #expect(state.handleCancel(requestID: "q1", from: other, now: 1).isEmpty)
        let actions = state.handleCancel(requestID: "q1", from: client, now: 2)
        #expect(replies(actions) == ["q1": "cancelled"] && requestsDone(actions) == ["q1"])
        #expect(invocations(betaJoins(&state)).isEmpty)
    }

    @Test("a ROUND two clients wait for in the startup grace goes on for the other when one gives up")
    func graceRoundWithTwoClients() {
        var state = bus(graceMs: 5000)
        _ = state.handleRound(roundRequest("R", skill: "late", requestID: "q1"), from: client, now: 0)
        _ = state.handleRound(roundRequest("R", skill: "late", requestID: "q2"), from: other, now: 0)
        let gaveUp = state.handleCancel(requestID: "q1", from: client, now: 1)
        #expect(documents(gaveUp).count == 1 && documents(gaveUp).first?["error"]?["code"] == "cancelled")
        let sent = invocations(betaJoins(&state))
        #expect(sent.count == 1)
        let done = state.handleWorker(
            .result(invocationID: sent.first?.invocationID ?? "", status: .ok, payload: Self.ok), from: Self.beta,
            now: 11)
        let answered = done.compactMap { if case .toClient(let peer, .round) = $0 { peer } else { nil } }
        #expect(answered == [other] && documents(done).first?["status"] == "ok")
    }
}

extension JournalEntry {
    var kind: String {
        switch self {
        case .accept: "accept"
        case .finish: "finish"
        case .forget: "forget"
        case .member: "member"
        case .forgetSession: "forgetSession"
        }
    }
}
