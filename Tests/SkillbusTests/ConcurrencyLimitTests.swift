import Testing

@testable import Skillbus

/// A skill's `concurrency` on the bus: never more of it at once on one agent than its limit; the rest wait
/// within their deadline, and the agent's other skills are not held up.
@Suite("Per-skill concurrency on the bus")
struct ConcurrencyLimitTests {
    static let ms: UInt64 = 1_000_000
    let client: PeerID = [0xC1]
    let alpha: PeerID = [0xA1]
    let beta: PeerID = [0xB1]
    static let ok = Array(#"{"type":"text","text":"x"}"#.utf8)

    /// `sleep` limited to `limit` at once, `echo` not.
    func register(_ state: inout CoordinatorState, _ name: String, _ peer: PeerID, limit: Int = 1, capacity: Int = 4) {
        _ = state.handleWorker(
            .ready([
                "name": .string(name), "capacity": .number(Double(capacity)), "heartbeatMs": 100_000,
                "skills": [["identifier": "sleep", "concurrency": .number(Double(limit))], ["identifier": "echo"]],
            ]), from: peer, now: 0)
    }

    func request(_ id: String, _ skill: String = "sleep", timeoutMs: Int = 60_000) -> InvokeRequest {
        InvokeRequest(
            requestID: id, roundID: "round-" + id, skill: skill, timeoutMs: timeoutMs, parameters: Array("{}".utf8))
    }

    func invocations(_ actions: [CoordinatorAction]) -> [(peer: PeerID, invocation: Invocation)] {
        actions.compactMap {
            if case .toWorker(let peer, .invoke(let invocation)) = $0 { return (peer, invocation) }
            return nil
        }
    }

    func errorCodes(_ actions: [CoordinatorAction]) -> [String] {
        actions.compactMap {
            guard case .toClient(_, .reply(let reply)) = $0, reply.status == .error else { return nil }
            return (try? JSONValue(parsing: reply.payload))?["code"]?.stringValue
        }
    }

    @Test("one at a time: the second waits though the agent has free slots; echo still runs; the slot passes on")
    func oneAtATime() {
        var state = CoordinatorState()
        register(&state, "alpha", alpha)
        let first = invocations(state.handleInvoke(request("s1"), from: client, now: 0))
        #expect(first.count == 1)
        #expect(invocations(state.handleInvoke(request("s2"), from: client, now: 0)).isEmpty)
        #expect(state.waitingCount == 1)
        let echo = invocations(state.handleInvoke(request("e1", "echo"), from: client, now: 0))
        #expect(echo.count == 1)
        // echo's end frees a slot, but not one sleep may take.
        let echoEnd = state.handleWorker(
            .result(invocationID: echo[0].invocation.invocationID, status: .ok, payload: Self.ok), from: alpha, now: 1)
        #expect(invocations(echoEnd).isEmpty)
        let next = invocations(
            state.handleWorker(
                .result(invocationID: first[0].invocation.invocationID, status: .ok, payload: Self.ok), from: alpha,
                now: 2))
        #expect(next.map(\.invocation.skill) == ["sleep"])
        #expect(state.workers[alpha]?.limitedInFlight["sleep"] == 1)
    }

    @Test("the limit is per agent: with two agents, two run at once")
    func perAgent() {
        var state = CoordinatorState()
        register(&state, "alpha", alpha)
        register(&state, "beta", beta)
        let sent = (1...3).flatMap { invocations(state.handleInvoke(request("s\($0)"), from: client, now: 0)) }
        #expect(Set(sent.map(\.peer)) == [alpha, beta])
        #expect(sent.count == 2 && state.waitingCount == 1)
    }

    @Test("a limit of two lets two run, and one that waits past its deadline is answered timeout")
    func waitsWithinDeadline() {
        var state = CoordinatorState()
        register(&state, "alpha", alpha, limit: 2)
        #expect(invocations(state.handleInvoke(request("s1"), from: client, now: 0)).count == 1)
        #expect(invocations(state.handleInvoke(request("s2"), from: client, now: 0)).count == 1)
        #expect(invocations(state.handleInvoke(request("s3", timeoutMs: 100), from: client, now: 0)).isEmpty)
        #expect(errorCodes(state.tick(now: 101 * Self.ms)) == ["timeout"])
        #expect(state.waitingCount == 0)
    }

    @Test("a fan-out queued for its agent passes over an invocation held by a limit to one it can run")
    func targetedQueue() {
        var state = CoordinatorState()
        register(&state, "alpha", alpha, capacity: 2)
        _ = state.handleInvoke(request("s1"), from: client, now: 0)
        let echo = invocations(state.handleInvoke(request("e1", "echo"), from: client, now: 0))
        for (id, skill) in [("fan-sleep", "sleep"), ("fan-echo", "echo")] {
            let body = #"{"fanout":{"skill":"\#(skill)","agents":["alpha"]}}"#
            let round = RoundRequest(requestID: id, roundID: id, timeoutMs: 60_000, body: Array(body.utf8))
            #expect(invocations(state.handleRound(round, from: client, now: 0)).isEmpty)
        }
        let next = invocations(
            state.handleWorker(
                .result(invocationID: echo[0].invocation.invocationID, status: .ok, payload: Self.ok), from: alpha,
                now: 1))
        #expect(next.map(\.invocation.skill) == ["echo"])
        #expect(state.waitingCount == 1)
    }

    @Test("a limit that goes with SKILLS leaves its running count to end by itself")
    func limitWithdrawn() {
        var state = CoordinatorState()
        register(&state, "alpha", alpha)
        let first = invocations(state.handleInvoke(request("s1"), from: client, now: 0))
        _ = state.handleWorker(.skills([["identifier": "sleep"], ["identifier": "echo"]]), from: alpha, now: 1)
        #expect(invocations(state.handleInvoke(request("s2"), from: client, now: 2)).count == 1)
        _ = state.handleWorker(
            .result(invocationID: first[0].invocation.invocationID, status: .ok, payload: Self.ok), from: alpha, now: 3)
        #expect(state.workers[alpha]?.limitedInFlight.isEmpty == true && state.workers[alpha]?.inFlight == 1)
    }
}
