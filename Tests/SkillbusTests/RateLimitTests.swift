import Foundation
import Testing

@testable import Skillbus

/// Rate limits on the state machine, with `now` driven by hand: over the limit requests wait in the queue
/// and go out as tokens come, within their deadline.
@Suite("Rate limits")
struct RateLimitTests {
    let alpha: PeerID = [0xA1]
    let ms: UInt64 = 1_000_000

    func state(_ limits: RateLimits) -> CoordinatorState {
        var settings = CoordinatorState.Settings()
        settings.rateLimits = limits
        var state = CoordinatorState(settings: settings, epoch: "e1")
        _ = state.handleWorker(
            .ready([
                "name": "alpha", "capacity": 100,
                "skills": [["identifier": "echo"], ["identifier": "stats"]],
            ]), from: alpha, now: 0)
        return state
    }

    func request(_ id: String, skill: String = "echo", timeoutMs: Int = 60_000) -> InvokeRequest {
        InvokeRequest(requestID: id, roundID: "", skill: skill, timeoutMs: timeoutMs, parameters: Array("{}".utf8))
    }

    func dispatched(_ actions: [CoordinatorAction]) -> Int {
        actions.filter { if case .toWorker(_, .invoke) = $0 { true } else { false } }.count
    }

    @Test("a skill at 10/s with a burst of 2: two at once, the rest one every 100 ms, woken by the timer")
    func skillRate() {
        var state = state(RateLimits(skills: ["echo": RateLimit(perSecond: 10, burst: 2)]))
        let client: PeerID = [0xC1]
        var sent = 0
        for index in 0..<5 { sent += dispatched(state.handleInvoke(request("r\(index)"), from: client, now: 0)) }
        #expect(sent == 2 && state.waitingCount == 3)
        // Another skill is not held up.
        #expect(dispatched(state.handleInvoke(request("s", skill: "stats"), from: client, now: 0)) == 1)
        #expect(state.nextTimer == 100 * ms)
        #expect(dispatched(state.fireTimers(now: 50 * ms)) == 0)
        #expect(dispatched(state.fireTimers(now: 100 * ms)) == 1)
        #expect(state.nextTimer == 200 * ms)
        // A new request waits behind those that wait for a token, though one is there.
        #expect(dispatched(state.handleInvoke(request("late"), from: client, now: 200 * ms)) == 0)
        #expect(dispatched(state.fireTimers(now: 400 * ms)) == 2)
        #expect(dispatched(state.fireTimers(now: 500 * ms)) == 1)
        #expect(state.waitingCount == 0 && state.nextTimer == nil)
    }

    @Test("a request waiting for a token past its deadline is answered timeout")
    func deadline() {
        var state = state(RateLimits(skills: ["echo": RateLimit(perSecond: 1, burst: 1)]))
        let client: PeerID = [0xC1]
        #expect(dispatched(state.handleInvoke(request("r0"), from: client, now: 0)) == 1)
        #expect(dispatched(state.handleInvoke(request("r1", timeoutMs: 50), from: client, now: 0)) == 0)
        let expired = state.tick(now: 60 * ms)
        let timedOut = expired.contains {
            if case .toClient(_, .reply(let reply)) = $0 { reply.status == .error } else { false }
        }
        #expect(timedOut && state.waitingCount == 0)
    }

    @Test("a request a rate limit holds says so: request.queued waits for rateLimit, and the timeout names the limit")
    func saysWhatItWaitedFor() throws {
        var state = state(RateLimits(skills: ["echo": RateLimit(perSecond: 1, burst: 1)]))
        let client: PeerID = [0xC1]
        #expect(dispatched(state.handleInvoke(request("r0"), from: client, now: 0)) == 1)
        let queued = state.handleInvoke(request("r1", timeoutMs: 50), from: client, now: 0)
        let event = queued.compactMap { if case .publish(let event) = $0 { event } else { nil } }.first
        #expect(event == .requestQueued(round: "", request: "r1", skill: "echo", waiting: 1, waitingFor: "rateLimit"))
        // The agent is idle: "had no free slot" was untrue.
        let payload = try #require(
            state.tick(now: 60 * ms).compactMap { if case .toClient(_, .reply(let reply)) = $0 { reply.payload } else { nil } }
                .first)
        let error = try JSONValue(parsing: payload)
        #expect(
            error["message"] == "'echo' is over its rate limit (1 per second, burst 1), and it did not start within 50 ms")
        #expect(error["details"]?["waitedFor"] == "rateLimit")
    }

    @Test("a round's invocation that waits publishes request.queued too, named by its id in the round")
    func roundInvocationQueued() {
        var state = state(RateLimits(skills: ["echo": RateLimit(perSecond: 1, burst: 1)]))
        let client: PeerID = [0xC1]
        #expect(dispatched(state.handleInvoke(request("r0"), from: client, now: 0)) == 1)
        let body: JSONValue = ["plan": ["steps": [["id": "a", "skill": "echo", "params": [:]]]]]
        let actions = state.handleRound(
            RoundRequest(requestID: "q", roundID: "R", timeoutMs: 5000, body: body.serialized()), from: client, now: 0)
        let queued = actions.contains {
            if case .publish(.requestQueued(round: "R", request: "a", skill: "echo", _, "rateLimit")) = $0 { true } else { false }
        }
        #expect(queued, "\(actions)")
    }

    @Test("each client connection has its own bucket: one over its rate does not hold up another")
    func clientRate() {
        var state = state(RateLimits(perClient: RateLimit(perSecond: 10, burst: 1)))
        let flooder: PeerID = [0xF1]
        let other: PeerID = [0xC2]
        #expect(dispatched(state.handleInvoke(request("f0"), from: flooder, now: 0)) == 1)
        #expect(dispatched(state.handleInvoke(request("f1"), from: flooder, now: 0)) == 0)
        #expect(dispatched(state.handleInvoke(request("o0"), from: other, now: 0)) == 1)
        #expect(dispatched(state.fireTimers(now: 100 * ms)) == 1)
    }

    @Test("the coordinator file sets rate limits; a bad one is refused with its key")
    func configuration() async throws {
        try await withTemporaryDirectory { path in
            let good = path + "/good.json"
            try #"{"version": 1, "rateLimits": {"skills": {"echo": {"perSecond": 100, "burst": 20}}, "clients": {"perSecond": 5}}}"#
                .write(toFile: good, atomically: true, encoding: .utf8)
            let limits = try CoordinatorConfiguration.load(path: good).stateSettings.rateLimits
            #expect(limits.skills["echo"] == RateLimit(perSecond: 100, burst: 20))
            #expect(limits.perClient == RateLimit(perSecond: 5, burst: 1))
            let bad = path + "/bad.json"
            try #"{"version": 1, "rateLimits": {"skills": {"echo": {"perSecond": 0}}}}"#
                .write(toFile: bad, atomically: true, encoding: .utf8)
            #expect {
                try CoordinatorConfiguration.load(path: bad)
            } throws: { error in
                (error as? SkillbusError)?.message.contains("rateLimits.skills.echo.perSecond") == true
            }
        }
    }
}
