import Testing

@testable import Skillbus

/// Retries on the bus (PROTOCOL §4.13), without sockets and with a hand-driven clock.
@Suite("Retries on the bus")
struct RetryTests {
    static let ms: UInt64 = 1_000_000
    let client: PeerID = [0xC1]
    let other: PeerID = [0xC2]
    let alpha: PeerID = [0xA1]
    let beta: PeerID = [0xB1]
    static let ok = Array(#"{"text":"done","type":"text"}"#.utf8)

    /// `safe`: idempotent with a retry policy (no jitter: exact backoffs); `risky`: neither; `pure`: idempotent
    /// only; `flaky`: retries its own code `upstream_down`, twice at most; `slow`: attempts time out after 100 ms.
    static let skills: JSONValue = [
        ["identifier": "safe", "idempotent": true, "retry": ["backoffMs": 100, "jitter": 0]],
        ["identifier": "risky"],
        ["identifier": "pure", "idempotent": true],
        ["identifier": "flaky", "retry": ["attempts": 2, "backoffMs": 50, "jitter": 0, "on": ["upstream_down"]]],
        ["identifier": "slow", "idempotent": true, "retry": ["backoffMs": 10, "jitter": 0, "attemptTimeoutMs": 100]],
    ]

    func state(workers: [(String, PeerID)]? = nil) -> CoordinatorState {
        var state = CoordinatorState(epoch: "e1")
        for (name, peer) in workers ?? [("alpha", alpha), ("beta", beta)] {
            _ = state.handleWorker(
                .ready(["name": .string(name), "capacity": 4, "heartbeatMs": 100_000, "skills": Self.skills]), from: peer,
                now: 0)
        }
        return state
    }

    func request(_ id: String, _ skill: String, round: String = "R", timeoutMs: Int = 10_000) -> InvokeRequest {
        InvokeRequest(requestID: id, roundID: round, skill: skill, timeoutMs: timeoutMs, parameters: Array("{}".utf8))
    }

    func invocations(_ actions: [CoordinatorAction]) -> [(peer: PeerID, invocation: Invocation)] {
        actions.compactMap { if case .toWorker(let peer, .invoke(let invocation)) = $0 { (peer, invocation) } else { nil } }
    }

    /// REPLYs as "request: ok" or "request: code".
    func replies(_ actions: [CoordinatorAction]) -> [String] {
        actions.compactMap {
            guard case .toClient(_, .reply(let reply)) = $0 else { return nil }
            let code = (try? JSONValue(parsing: reply.payload))?["code"]?.stringValue ?? "?"
            return "\(reply.requestID): \(reply.status == .ok ? "ok" : code)"
        }
    }

    func retrying(_ actions: [CoordinatorAction]) -> [String] {
        actions.compactMap {
            if case .publish(.requestRetrying(_, let request, _, let agent, let attempt, let error, let backoff)) = $0 {
                return "\(request) attempt \(attempt) on \(agent): \(error.code) (\(backoff / 1000) ms)"
            }
            return nil
        }
    }

    func error(_ code: String) -> [UInt8] { Array(#"{"code":"\#(code)","message":"no"}"#.utf8) }

    @Test("a lost agent's idempotent invocation is retried on the other agent after its backoff, answered once")
    func lostAgent() {
        var state = state()
        let sent = invocations(state.handleInvoke(request("q", "safe"), from: client, now: 0))
        let lost = sent[0].peer
        let gone = state.handleWorker(.disconnect, from: lost, now: 10 * Self.ms)
        #expect(replies(gone).isEmpty)
        #expect(retrying(gone) == ["q attempt 1 on \(lost == alpha ? "alpha" : "beta"): agent_lost (100 ms)"])
        #expect(state.retryingCount == 1 && state.nextTimer == 110 * Self.ms)
        #expect(invocations(state.fireTimers(now: 109 * Self.ms)).isEmpty)
        let again = invocations(state.fireTimers(now: 110 * Self.ms))
        #expect(again.count == 1 && again[0].peer != lost)
        let done = state.handleWorker(
            .result(invocationID: again[0].invocation.invocationID, status: .ok, payload: Self.ok), from: again[0].peer,
            now: 120 * Self.ms)
        #expect(replies(done) == ["q: ok"])
        // A success is kept as usual.
        #expect(replies(state.handleInvoke(request("q2", "safe"), from: client, now: 130 * Self.ms)) == ["q2: ok"])
    }

    @Test("no retry for a skill that is not idempotent, and its agent_lost is kept; an idempotent one's is not")
    func notRetried() {
        var state = state(workers: [("alpha", alpha)])
        _ = state.handleInvoke(request("r1", "risky"), from: client, now: 0)
        _ = state.handleInvoke(request("p1", "pure"), from: client, now: 0)
        let gone = state.handleWorker(.disconnect, from: alpha, now: 1)
        #expect(Set(replies(gone)) == ["r1: agent_lost", "p1: agent_lost"])
        #expect(retrying(gone).isEmpty)
        _ = state.handleWorker(
            .ready(["name": "alpha", "capacity": 4, "heartbeatMs": 100_000, "skills": Self.skills]), from: alpha, now: 2)
        // The same round again: risky's loss is its answer; pure runs again.
        #expect(replies(state.handleInvoke(request("r2", "risky"), from: client, now: 3)) == ["r2: agent_lost"])
        #expect(invocations(state.handleInvoke(request("p2", "pure"), from: client, now: 3)).count == 1)
    }

    @Test("a code of the skill's own is retried on another agent; the last failure is the answer and is not kept")
    func ownCode() {
        var state = state()
        var sent = invocations(state.handleInvoke(request("f", "flaky"), from: client, now: 0))
        let first = sent[0].peer
        let failed = state.handleWorker(
            .result(invocationID: sent[0].invocation.invocationID, status: .error, payload: error("upstream_down")),
            from: first, now: 1 * Self.ms)
        #expect(replies(failed).isEmpty && retrying(failed).count == 1)
        sent = invocations(state.fireTimers(now: 51 * Self.ms))
        #expect(sent.count == 1 && sent[0].peer != first)  // the other agent, though both are free
        let last = state.handleWorker(
            .result(invocationID: sent[0].invocation.invocationID, status: .error, payload: error("upstream_down")),
            from: sent[0].peer, now: 60 * Self.ms)
        #expect(replies(last) == ["f: upstream_down"])  // attempts: 2
        #expect(invocations(state.handleInvoke(request("f2", "flaky"), from: client, now: 70 * Self.ms)).count == 1)
        // Another code is not retried, and is kept.
        let other = invocations(state.handleInvoke(request("g", "flaky", round: "R2"), from: client, now: 0))
        let plain = state.handleWorker(
            .result(invocationID: other[0].invocation.invocationID, status: .error, payload: error("skill_failed")),
            from: other[0].peer, now: 80 * Self.ms)
        #expect(replies(plain) == ["g: skill_failed"])
        #expect(replies(state.handleInvoke(request("g2", "flaky", round: "R2"), from: client, now: 90 * Self.ms)) == ["g2: skill_failed"])
    }

    @Test("no retry when the backoff would end past the deadline")
    func deadline() {
        var state = state()
        let sent = invocations(state.handleInvoke(request("q", "safe", timeoutMs: 150), from: client, now: 0))
        let gone = state.handleWorker(.disconnect, from: sent[0].peer, now: 60 * Self.ms)
        #expect(replies(gone) == ["q: agent_lost"] && state.retryingCount == 0)
    }

    @Test("an attempt that outlives attemptTimeoutMs is cancelled and retried; its late RESULT answers nobody")
    func attemptTimeout() {
        var state = state()
        let first = invocations(state.handleInvoke(request("s", "slow"), from: client, now: 0))
        #expect(first[0].invocation.deadlineMs == 100)
        let timedOut = state.tick(now: 100 * Self.ms)
        #expect(timedOut.contains(.toWorker(first[0].peer, .cancel(invocationID: first[0].invocation.invocationID))))
        #expect(replies(timedOut).isEmpty && state.retryingCount == 1)
        let second = invocations(state.fireTimers(now: 110 * Self.ms))
        #expect(second.count == 1 && second[0].peer != first[0].peer)
        let late = state.handleWorker(
            .result(invocationID: first[0].invocation.invocationID, status: .ok, payload: Self.ok), from: first[0].peer,
            now: 120 * Self.ms)
        #expect(replies(late).isEmpty)
        let done = state.handleWorker(
            .result(invocationID: second[0].invocation.invocationID, status: .ok, payload: Self.ok), from: second[0].peer,
            now: 130 * Self.ms)
        #expect(replies(done) == ["s: ok"])
    }

    @Test("identical requests wait through the retry together; cancelling one between attempts leaves the other")
    func sharedAndCancelled() {
        var state = state()
        let sent = invocations(state.handleInvoke(request("a", "safe"), from: client, now: 0))
        _ = state.handleInvoke(request("b", "safe"), from: other, now: 0)
        _ = state.handleWorker(.disconnect, from: sent[0].peer, now: 1)
        // "a" gives up while its execution backs off: "b" still wants it.
        #expect(replies(state.handleCancel(requestID: "a", from: client, now: 2)) == ["a: cancelled"])
        let again = invocations(state.fireTimers(now: 200 * Self.ms))
        let done = state.handleWorker(
            .result(invocationID: again[0].invocation.invocationID, status: .ok, payload: Self.ok), from: again[0].peer,
            now: 210 * Self.ms)
        #expect(replies(done) == ["b: ok"])
        // Alone while it backs off: it leaves the queue and never runs.
        let lone = invocations(state.handleInvoke(request("c", "safe", round: "R3"), from: client, now: 300 * Self.ms))
        _ = state.handleWorker(
            .result(invocationID: lone[0].invocation.invocationID, status: .error, payload: error("timeout")),
            from: lone[0].peer, now: 301 * Self.ms)
        #expect(state.retryingCount == 1)
        #expect(replies(state.handleCancel(requestID: "c", from: client, now: 302 * Self.ms)) == ["c: cancelled"])
        #expect(state.retryingCount == 0 && state.nextTimer == nil)
    }

    @Test("a round's retries: every attempt in the document and on the feed; retries 0 turns them off; not kept when it failed retryably")
    func roundRetries() throws {
        var state = state()
        func round(_ id: String, _ body: JSONValue) -> RoundRequest {
            RoundRequest(requestID: id, roundID: id, timeoutMs: 10_000, body: body.serialized())
        }
        // pure has no policy of its own: the round asks for two retries.
        let sent = invocations(state.handleRound(round("R1", ["invoke": ["skill": "pure", "retries": 2]]), from: client, now: 0))
        let gone = state.handleWorker(.disconnect, from: sent[0].peer, now: 5 * Self.ms)
        #expect(gone.contains { if case .publish(.invocationRetrying(_, "pure", _, _, 1, _, _)) = $0 { true } else { false } })
        let again = invocations(state.fireTimers(now: state.nextTimer ?? 0))
        let done = state.handleWorker(
            .result(invocationID: again[0].invocation.invocationID, status: .ok, payload: Self.ok), from: again[0].peer,
            now: 400 * Self.ms)
        let document = try #require(
            done.compactMap { if case .toClient(_, .round(_, _, let bytes)) = $0 { try? RoundDocument(parsing: bytes) } else { nil } }.first)
        #expect(document.status == .ok)
        let attempts = document.invocations.first?.attempts ?? []
        #expect(attempts.map(\.status) == [.error, .ok] && attempts.first?.error?.code == .agentLost)
        #expect(attempts.first?.durationMs == 5 && attempts.first?.agent != attempts.last?.agent)

        // retries 0: the loss is the answer at once, and the document is not kept.
        var state2 = self.state()
        let body: JSONValue = ["invoke": ["skill": "safe", "retries": 0]]
        let once = invocations(state2.handleRound(round("R2", body), from: client, now: 0))
        let lost = state2.handleWorker(.disconnect, from: once[0].peer, now: 1)
        #expect(lost.contains { if case .toClient(_, .round) = $0 { true } else { false } } && state2.retryingCount == 0)
        #expect(invocations(state2.handleRound(round("R2", body), from: client, now: 2)).count == 1)
        // A bad count refuses the round.
        let refused = state2.handleRound(round("R3", ["invoke": ["skill": "safe", "retries": 11]]), from: client, now: 3)
        #expect(refused.contains { action in
            guard case .toClient(_, .round(_, _, let bytes)) = action else { return false }
            return (try? JSONValue(parsing: bytes))?["error"]?["code"] == "invalid_round"
        })
    }

    @Test("a fan-out loser waiting out its backoff when another agent wins is cancelled, not run")
    func loserBackingOff() throws {
        var state = state()
        let body: JSONValue = ["fanout": ["skill": "flaky", "aggregate": "first"]]
        let sent = invocations(
            state.handleRound(RoundRequest(requestID: "q", roundID: "F", timeoutMs: 10_000, body: body.serialized()), from: client, now: 0))
        let (loser, winner) = (sent[0], sent[1])
        _ = state.handleWorker(
            .result(invocationID: loser.invocation.invocationID, status: .error, payload: error("upstream_down")),
            from: loser.peer, now: 1)
        #expect(state.retryingCount == 1)
        let won = state.handleWorker(
            .result(invocationID: winner.invocation.invocationID, status: .ok, payload: Self.ok), from: winner.peer, now: 2)
        #expect(state.retryingCount == 0 && invocations(state.fireTimers(now: 100 * Self.ms)).isEmpty)
        let document = try #require(
            won.compactMap { if case .toClient(_, .round(_, _, let bytes)) = $0 { try? RoundDocument(parsing: bytes) } else { nil } }.first)
        #expect(document.status == .ok)
        #expect(document.invocations.map(\.status).sorted { $0.rawValue < $1.rawValue } == [.cancelled, .ok])
    }
}
