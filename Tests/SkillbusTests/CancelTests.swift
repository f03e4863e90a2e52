import Testing

@testable import Skillbus

/// Cancellation on the bus (PROTOCOL §3.10), without sockets: a client's CANCEL for a REQUEST or ROUND, by
/// round id, under single-flight, and an agent that ignores CANCEL.
@Suite("Cancellation on the bus")
struct CancelTests {
    static let ms: UInt64 = 1_000_000
    let client: PeerID = [0xC1]
    let other: PeerID = [0xC2]
    let alpha: PeerID = [0xA1]
    static let ok = Array(#"{"text":"done","type":"text"}"#.utf8)

    func state(capacity: Int = 4) -> CoordinatorState {
        var state = CoordinatorState(epoch: "e1")
        _ = state.handleWorker(
            .ready([
                "name": "alpha", "capacity": .number(Double(capacity)), "heartbeatMs": 100_000,
                "skills": [["identifier": "sleep"], ["identifier": "echo"]],
            ]), from: alpha, now: 0)
        return state
    }

    func request(_ id: String, round: String, skill: String = "sleep", parameters: String = "{}") -> InvokeRequest {
        InvokeRequest(requestID: id, roundID: round, skill: skill, timeoutMs: 60_000, parameters: Array(parameters.utf8))
    }

    func invocations(_ actions: [CoordinatorAction]) -> [Invocation] {
        actions.compactMap { if case .toWorker(_, .invoke(let invocation)) = $0 { invocation } else { nil } }
    }

    func cancels(_ actions: [CoordinatorAction]) -> [String] {
        actions.compactMap { if case .toWorker(_, .cancel(let id)) = $0 { id } else { nil } }
    }

    /// REPLYs as request id → error code (or "ok").
    func replies(_ actions: [CoordinatorAction]) -> [String: String] {
        var answers: [String: String] = [:]
        for action in actions {
            guard case .toClient(_, .reply(let reply)) = action else { continue }
            let code = (try? JSONValue(parsing: reply.payload))?["code"]?.stringValue
            answers[reply.requestID] = reply.status == .ok ? "ok" : code ?? "?"
        }
        return answers
    }

    func documents(_ actions: [CoordinatorAction]) -> [JSONValue] {
        actions.compactMap {
            if case .toClient(_, .round(_, _, let document)) = $0 { try? JSONValue(parsing: document) } else { nil }
        }
    }

    func result(_ invocation: Invocation, _ state: inout CoordinatorState, now: UInt64 = 1) -> [CoordinatorAction] {
        state.handleWorker(.result(invocationID: invocation.invocationID, status: .ok, payload: Self.ok), from: alpha, now: now)
    }

    @Test("a running REQUEST: answered cancelled at once, CANCEL to its agent, the late RESULT dropped, nothing kept")
    func runningRequest() throws {
        var state = state()
        let sent = invocations(state.handleInvoke(request("q1", round: "R"), from: client, now: 0))
        let actions = state.handleCancel(requestID: "q1", from: client, now: 5 * Self.ms)
        #expect(replies(actions) == ["q1": "cancelled"])
        #expect(cancels(actions) == [sent[0].invocationID])
        #expect(actions.contains(.publish(.requestCancelled(round: "R", request: "q1", skill: "sleep", agent: "alpha", reason: "client"))))
        let reply = try #require(actions.compactMap { if case .toClient(_, .reply(let r)) = $0 { r } else { nil } }.first)
        #expect(reply.agent == "alpha" && reply.durationMicros == 5000)
        #expect(try JSONValue(parsing: reply.payload)["details"] == ["reason": "client"])
        // The slot stays taken until the agent reports; its RESULT reaches nobody.
        #expect(state.workers[alpha]?.inFlight == 1)
        #expect(replies(result(sent[0], &state)).isEmpty && state.workers[alpha]?.inFlight == 0)
        // A cancelled execution is no answer: the same REQUEST in the same round runs again.
        #expect(invocations(state.handleInvoke(request("q2", round: "R"), from: client, now: 2)).count == 1)
        // A CANCEL for a request the bus no longer holds changes nothing.
        #expect(state.handleCancel(requestID: "q1", from: client, now: 3).isEmpty)
        #expect(state.handleCancel(requestID: "q2", from: other, now: 3).isEmpty)
    }

    @Test("a waiting REQUEST leaves its queue without running")
    func waitingRequest() {
        var state = state(capacity: 1)
        _ = state.handleInvoke(request("q1", round: "R1"), from: client, now: 0)
        _ = state.handleInvoke(request("q2", round: "R2"), from: client, now: 0)
        #expect(state.waitingCount == 1)
        let actions = state.handleCancel(requestID: "q2", from: client, now: 1)
        #expect(replies(actions) == ["q2": "cancelled"] && cancels(actions).isEmpty && state.waitingCount == 0)
    }

    @Test("single-flight: the execution goes on while an identical request still wants it, and stops when none does")
    func sharedExecution() {
        var state = state()
        let sent = invocations(state.handleInvoke(request("first", round: "R"), from: client, now: 0))
        _ = state.handleInvoke(request("joined", round: "R"), from: other, now: 0)
        // The first gives up: it is answered, the execution goes on for the other.
        let gaveUp = state.handleCancel(requestID: "first", from: client, now: 1)
        #expect(replies(gaveUp) == ["first": "cancelled"] && cancels(gaveUp).isEmpty)
        #expect(replies(result(sent[0], &state)) == ["joined": "ok"])
        #expect(state.requests.waiters.isEmpty)

        // The joiner gives up first, then the one that started it: the last one out stops it.
        let again = invocations(state.handleInvoke(request("a", round: "R2"), from: client, now: 2))
        _ = state.handleInvoke(request("b", round: "R2"), from: other, now: 2)
        let joinerOut = state.handleCancel(requestID: "b", from: other, now: 3)
        #expect(replies(joinerOut) == ["b": "cancelled"] && cancels(joinerOut).isEmpty)
        let lastOut = state.handleCancel(requestID: "a", from: client, now: 4)
        #expect(replies(lastOut) == ["a": "cancelled"] && cancels(lastOut) == [again[0].invocationID])
        #expect(replies(result(again[0], &state)).isEmpty)
        #expect(state.requests.waiters.isEmpty)
    }

    @Test("a ROUND cancelled by its client: CANCEL to the running step, the rest skipped, the document says cancelled and is not kept")
    func roundByItsClient() throws {
        var state = state()
        let body: JSONValue = [
            "plan": ["steps": [["id": "nap", "skill": "sleep"], ["id": "after", "skill": "echo", "after": ["nap"]]]]
        ]
        let round = RoundRequest(requestID: "q", roundID: "R", timeoutMs: 60_000, body: body.serialized())
        let sent = invocations(state.handleRound(round, from: client, now: 0))
        let actions = state.handleCancel(requestID: "q", from: client, now: 1)
        #expect(cancels(actions) == [sent[0].invocationID])
        let document = try #require(documents(actions).first)
        #expect(document["status"] == "error" && document["error"]?["code"] == "cancelled")
        #expect(document["error"]?["details"] == ["reason": "client"])
        let steps = document["invocations"]?.arrayValue ?? []
        #expect(steps.map { $0["status"]?.stringValue ?? "" } == ["cancelled", "skipped"])
        #expect(steps.first?["error"]?["details"]?["reason"] == "client")
        let order = actions.compactMap { action -> String? in
            switch action {
            case .publish(.invocationCancelled(_, let id, _, let reason)): "cancelled \(id) (\(reason))"
            case .publish(.invocationDone(_, let id, _, _, let status, _, _)): "\(status.documentName) \(id)"
            case .publish(.roundDone): "round"
            default: nil
            }
        }
        #expect(order == ["cancelled nap (client)", "cancelled nap", "skipped after", "round"])
        // Not kept: the same ROUND runs again.
        #expect(invocations(state.handleRound(round, from: client, now: 2)).count == 1)
    }

    @Test("a ROUND two clients wait for goes on when one of them gives up")
    func roundWithTwoClients() {
        var state = state()
        let body: JSONValue = ["invoke": ["skill": "sleep"]]
        let sent = invocations(
            state.handleRound(
                RoundRequest(requestID: "q1", roundID: "R", timeoutMs: 60_000, body: body.serialized()), from: client,
                now: 0))
        _ = state.handleRound(
            RoundRequest(requestID: "q2", roundID: "R", timeoutMs: 60_000, body: body.serialized()), from: other, now: 0)
        let gaveUp = state.handleCancel(requestID: "q1", from: client, now: 1)
        #expect(cancels(gaveUp).isEmpty && documents(gaveUp).first?["error"]?["code"] == "cancelled")
        let done = result(sent[0], &state)
        #expect(documents(done).count == 1 && documents(done).first?["status"] == "ok")
    }

    @Test("CANCEL by round id stops the ROUND and every REQUEST of the round, and says what it stopped")
    func byRoundID() {
        var state = state()
        let round = RoundRequest(
            requestID: "q", roundID: "R", timeoutMs: 60_000, body: (["invoke": ["skill": "sleep"]] as JSONValue).serialized())
        let step = invocations(state.handleRound(round, from: client, now: 0))
        let sub = invocations(state.handleInvoke(request("sub", round: "R", skill: "echo"), from: other, now: 0))
        let joined = state.handleInvoke(request("same", round: "R", skill: "echo"), from: other, now: 0)
        #expect(invocations(joined).isEmpty)
        let actions = state.handleCancelRound(requestID: "c", roundID: "R", from: [0xEE], now: 1)
        #expect(Set(cancels(actions)) == [step[0].invocationID, sub[0].invocationID])
        #expect(replies(actions) == ["sub": "cancelled", "same": "cancelled"])
        #expect(documents(actions).first?["status"] == "error")
        let summary = actions.compactMap { if case .toClient([0xEE], .cancelled(_, let summary)) = $0 { summary } else { nil } }
        #expect(summary == [["round": "R", "requests": 2, "rounds": 1, "turns": 0, "stopped": 2]])
        let nothing = state.handleCancelRound(requestID: "c2", roundID: "R", from: [0xEE], now: 2)
        #expect(nothing.count == 1)
    }

    @Test("an agent that does not answer CANCEL within the grace period is reported once; one that answers is not")
    func ignoredCancel() {
        var state = state()
        let sent = invocations(state.handleInvoke(request("q1", round: "R1"), from: client, now: 0))
        let polite = invocations(state.handleInvoke(request("q2", round: "R2"), from: client, now: 0))
        _ = state.handleCancel(requestID: "q1", from: client, now: 0)
        _ = state.handleCancel(requestID: "q2", from: client, now: 0)
        _ = result(polite[0], &state, now: 10 * Self.ms)
        #expect(state.tick(now: 1_999 * Self.ms).allSatisfy { if case .publish(.cancelIgnored) = $0 { false } else { true } })
        let late = state.tick(now: 2_000 * Self.ms)
        let reported = late.compactMap { if case .publish(.cancelIgnored(_, let request, _, _, let id, _)) = $0 { "\(request) \(id)" } else { nil } }
        #expect(reported == ["q1 \(sent[0].invocationID)"])
        #expect(!state.tick(now: 3_000 * Self.ms).contains { if case .publish(.cancelIgnored) = $0 { true } else { false } })
    }

    @Test("at the deadline the running step's CANCEL is announced with reason deadline, before its timeout")
    func deadline() {
        var state = state()
        _ = state.handleRound(
            RoundRequest(
                requestID: "q", roundID: "R", timeoutMs: 100, body: (["invoke": ["skill": "sleep"]] as JSONValue).serialized()),
            from: client, now: 0)
        let actions = state.tick(now: 101 * Self.ms)
        let order = actions.compactMap { action -> String? in
            switch action {
            case .publish(.invocationCancelled(_, _, _, let reason)): "cancelled (\(reason))"
            case .publish(.invocationDone(_, _, _, _, let status, _, _)): status.documentName
            default: nil
            }
        }
        #expect(order == ["cancelled (deadline)", "error"])
        #expect(documents(actions).first?["error"]?["code"] == "timeout")
    }
}
