import Testing

@testable import Skillbus

/// Routing, capacity, queueing, deadlines and liveness, with no sockets and a hand-driven clock.
@Suite("Coordinator state machine")
struct CoordinatorStateTests {
    static let ms: UInt64 = 1_000_000
    let client: PeerID = [0xC1]
    let alpha: PeerID = [0xA1]
    let beta: PeerID = [0xB1]

    func registration(_ name: String, skills: [String], capacity: Int = 2, heartbeatMs: Int = 1000) -> WorkerMessage {
        .ready([
            "name": .string(name), "capacity": .number(Double(capacity)), "heartbeatMs": .number(Double(heartbeatMs)),
            "skills": .array(skills.map { ["identifier": .string($0), "parameters": []] }),
        ])
    }

    func request(_ id: String, skill: String = "echo", timeoutMs: Int? = nil) -> InvokeRequest {
        // Each request its own round: these tests are about routing, not single-flight.
        InvokeRequest(
            requestID: id, roundID: "round-" + id, skill: skill, timeoutMs: timeoutMs, parameters: Array("{}".utf8))
    }

    func invocations(_ actions: [CoordinatorAction]) -> [(PeerID, Invocation)] {
        actions.compactMap {
            if case .toWorker(let peer, .invoke(let invocation)) = $0 { return (peer, invocation) }
            return nil
        }
    }

    func replies(_ actions: [CoordinatorAction]) -> [InvokeReply] {
        actions.compactMap {
            if case .toClient(_, .reply(let reply)) = $0 { return reply }
            return nil
        }
    }

    func errorCode(_ reply: InvokeReply?) -> String? {
        guard let reply else { return nil }
        return (try? JSONValue(parsing: reply.payload))?["code"]?.stringValue
    }

    @Test("registration welcomes the worker and announces it on the feed")
    func registers() {
        var state = CoordinatorState()
        let actions = state.handleWorker(registration("alpha", skills: ["echo", "sleep"]), from: alpha, now: 0)
        #expect(actions.contains { if case .toWorker(_, .welcome) = $0 { true } else { false } })
        #expect(actions.contains(.publish(.agentJoined(agent: "alpha", skills: ["echo", "sleep"], capacity: 2))))
        #expect(state.workers[alpha]?.skills.count == 2)
    }

    @Test("the same READY twice is welcomed again without dropping the agent; a different one re-registers")
    func repeatedReady() {
        var state = CoordinatorState()
        _ = state.handleWorker(registration("alpha", skills: ["echo"]), from: alpha, now: 0)
        _ = state.handleInvoke(request("r1"), from: client, now: 0)
        let again = state.handleWorker(registration("alpha", skills: ["echo"]), from: alpha, now: 1)
        #expect(again.count == 1)
        #expect(again.contains { if case .toWorker(_, .welcome) = $0 { true } else { false } })
        #expect(state.runningCount == 1)
        let changed = state.handleWorker(registration("alpha", skills: ["echo", "sleep"]), from: alpha, now: 2)
        #expect(errorCode(replies(changed).first) == "agent_lost")
        #expect(state.workers[alpha]?.skills.count == 2)
    }

    @Test("AGENTS counts each worker's RESULTs by skill and status, and the requests waiting for each skill")
    func resultCounts() throws {
        var state = CoordinatorState()
        _ = state.handleWorker(registration("alpha", skills: ["echo", "sleep"], capacity: 2), from: alpha, now: 0)
        _ = state.handleWorker(registration("beta", skills: ["sleep"], capacity: 1), from: beta, now: 0)
        let okResult = Array(#"{"type":"text","text":"x"}"#.utf8)
        // An ok RESULT that is no result form is answered as an error, and counted as one.
        let outcomes: [(ReplyStatus, [UInt8])] = [(.ok, okResult), (.error, Array("{}".utf8)), (.ok, [])]
        for (index, (status, payload)) in outcomes.enumerated() {
            let sent = invocations(state.handleInvoke(request("e\(index)"), from: client, now: 1))
            #expect(sent.first?.0 == alpha)
            let invocationID = try #require(sent.first?.1.invocationID)
            _ = state.handleWorker(
                .result(invocationID: invocationID, status: status, payload: payload), from: alpha, now: 2)
        }
        // beta runs one sleep, alpha two more; the fourth waits.
        for index in 0..<4 { _ = state.handleInvoke(request("s\(index)", skill: "sleep"), from: client, now: 3) }
        let listing = state.agentsListing(now: 4)
        let agents = listing["agents"]?.arrayValue ?? []
        #expect(agents.first { $0["agent"] == "alpha" }?["results"] == ["ok": 1, "error": 2])
        #expect(agents.first { $0["agent"] == "beta" }?["results"] == ["ok": 0, "error": 0])
        // What each runs now, from the bus's own slots (a worker's state names only the skill started last).
        #expect(agents.first { $0["agent"] == "alpha" }?["running"] == ["sleep": 2])
        #expect(agents.first { $0["agent"] == "beta" }?["running"] == ["sleep": 1])
        #expect(
            listing["bySkill"]
                == ["echo": ["ok": 1, "error": 2, "waiting": 0], "sleep": ["ok": 0, "error": 0, "waiting": 1]])
        // The counts go with the worker.
        _ = state.handleWorker(.disconnect, from: alpha, now: 5)
        #expect(state.agentsListing(now: 6)["bySkill"]?["echo"] == nil)
    }

    @Test("least in-flight first, spreading over providers")
    func leastLoaded() {
        var state = CoordinatorState()
        _ = state.handleWorker(registration("alpha", skills: ["echo"], capacity: 4), from: alpha, now: 0)
        _ = state.handleWorker(registration("beta", skills: ["echo"], capacity: 4), from: beta, now: 0)
        var counts: [PeerID: Int] = [:]
        for index in 0..<6 {
            for (peer, _) in invocations(state.handleInvoke(request("r\(index)"), from: client, now: 0)) {
                counts[peer, default: 0] += 1
            }
        }
        #expect(counts[alpha] == 3 && counts[beta] == 3)
    }

    @Test("never more than capacity: the rest wait, then run as slots free")
    func capacityAndQueue() {
        var state = CoordinatorState()
        _ = state.handleWorker(registration("alpha", skills: ["echo"], capacity: 1), from: alpha, now: 0)
        let first = invocations(state.handleInvoke(request("r1"), from: client, now: 0))
        #expect(first.count == 1)
        let queued = state.handleInvoke(request("r2"), from: client, now: 0)
        #expect(invocations(queued).isEmpty)
        #expect(state.waitingCount == 1)
        let done = state.handleWorker(
            .result(
                invocationID: first[0].1.invocationID, status: .ok, payload: Array(#"{"type":"text","text":"x"}"#.utf8)),
            from: alpha, now: 5 * Self.ms)
        #expect(replies(done).map(\.requestID) == ["r1"])
        #expect(replies(done).first?.agent == "alpha")
        #expect(replies(done).first?.durationMicros == 5000)
        #expect(invocations(done).count == 1)
        #expect(state.waitingCount == 0)
    }

    @Test("a full queue answers busy")
    func busy() {
        var settings = CoordinatorState.Settings()
        settings.queueLimit = 1
        var state = CoordinatorState(settings: settings)
        _ = state.handleWorker(registration("alpha", skills: ["echo"], capacity: 1), from: alpha, now: 0)
        _ = state.handleInvoke(request("r1"), from: client, now: 0)
        _ = state.handleInvoke(request("r2"), from: client, now: 0)
        let third = replies(state.handleInvoke(request("r3"), from: client, now: 0))
        #expect(errorCode(third.first) == "busy")
    }

    @Test("an unknown skill names itself and lists what is offered")
    func unknownSkill() throws {
        var state = CoordinatorState()
        _ = state.handleWorker(registration("alpha", skills: ["echo", "math.eval"]), from: alpha, now: 0)
        let reply = replies(state.handleInvoke(request("r", skill: "translate"), from: client, now: 0)).first
        let error = try JSONValue(parsing: reply!.payload)
        #expect(error["code"] == "unknown_skill")
        #expect(error["message"]?.stringValue == "no agent offers skill 'translate'; offered: echo, math.eval")
    }

    @Test("a silent worker is dead after 3 of its intervals; its clients get agent_lost")
    func liveness() {
        var state = CoordinatorState()
        _ = state.handleWorker(registration("alpha", skills: ["echo"], heartbeatMs: 100), from: alpha, now: 0)
        _ = state.handleInvoke(request("r1", timeoutMs: 60_000), from: client, now: 0)
        #expect(replies(state.tick(now: 250 * Self.ms)).isEmpty)
        _ = state.handleWorker(.heartbeat(intervalMs: nil, registry: nil), from: alpha, now: 250 * Self.ms)
        #expect(replies(state.tick(now: 500 * Self.ms)).isEmpty)
        let actions = state.tick(now: 551 * Self.ms)
        #expect(errorCode(replies(actions).first) == "agent_lost")
        #expect(actions.contains { if case .publish(.agentLeft(agent: "alpha", _)) = $0 { true } else { false } })
        #expect(state.workers.isEmpty)
        #expect(
            errorCode(replies(state.handleInvoke(request("r2"), from: client, now: 600 * Self.ms)).first)
                == "unknown_skill")
    }

    @Test("a worker whose connection closed is lost at once, long before its heartbeats run out")
    func connectionClosed() {
        var state = CoordinatorState()
        _ = state.handleWorker(registration("alpha", skills: ["echo"], heartbeatMs: 1000), from: alpha, now: 0)
        _ = state.handleInvoke(request("r1", timeoutMs: 60_000), from: client, now: 0)
        let actions = state.connectionClosed(alpha, now: 5 * Self.ms)
        let reply = replies(actions).first
        #expect(errorCode(reply) == "agent_lost")
        #expect(reply.map { String(decoding: $0.payload, as: UTF8.self).contains("connection closed") } == true)
        #expect(actions.contains(.publish(.agentLeft(agent: "alpha", reason: "connection closed"))))
        #expect(state.workers.isEmpty)
        // A peer the bus no longer knows (removed already, or a client's) changes nothing.
        #expect(state.connectionClosed(alpha, now: 6 * Self.ms).isEmpty)
        #expect(state.connectionClosed(client, now: 6 * Self.ms).isEmpty)
    }

    @Test("a request past its deadline is answered timeout and cancelled on the worker; the slot stays taken")
    func deadline() {
        var state = CoordinatorState()
        _ = state.handleWorker(
            registration("alpha", skills: ["sleep"], capacity: 1, heartbeatMs: 100_000), from: alpha, now: 0)
        let sent = invocations(state.handleInvoke(request("r1", skill: "sleep", timeoutMs: 100), from: client, now: 0))
        let actions = state.tick(now: 101 * Self.ms)
        #expect(errorCode(replies(actions).first) == "timeout")
        #expect(actions.contains(.toWorker(alpha, .cancel(invocationID: sent[0].1.invocationID))))
        // Still busy until the worker reports: a new request waits.
        #expect(
            invocations(state.handleInvoke(request("r2", skill: "sleep"), from: client, now: 102 * Self.ms)).isEmpty)
        let late = state.handleWorker(
            .result(invocationID: sent[0].1.invocationID, status: .error, payload: Array("{}".utf8)), from: alpha,
            now: 103 * Self.ms)
        #expect(replies(late).isEmpty)  // the first client was answered already
        #expect(invocations(late).count == 1)  // r2 runs now
    }

    @Test("a timed-out invocation the worker never reports frees its slot after the grace period")
    func abandonedSlot() {
        var state = CoordinatorState()
        _ = state.handleWorker(
            registration("alpha", skills: ["sleep"], capacity: 1, heartbeatMs: 100_000), from: alpha, now: 0)
        _ = state.handleInvoke(request("r1", skill: "sleep", timeoutMs: 100), from: client, now: 0)
        _ = state.tick(now: 101 * Self.ms)
        _ = state.handleInvoke(request("r2", skill: "sleep", timeoutMs: 60_000), from: client, now: 102 * Self.ms)
        #expect(invocations(state.tick(now: 4_000 * Self.ms)).isEmpty)
        let freed = state.tick(now: 5_101 * Self.ms)
        #expect(invocations(freed).map { $0.1.skill } == ["sleep"])
        #expect(state.workers[alpha]?.inFlight == 1)
    }

    @Test(
        "registrations with out-of-range numbers are refused, not trusted",
        arguments: [
            JSONValue.object(["name": "a", "capacity": 0, "skills": []]),
            ["name": "a", "capacity": 1, "heartbeatMs": 9_999_999_999_999, "skills": []],
            ["name": "a", "capacity": 1, "heartbeatMs": "fast", "skills": []],
            ["name": "a", "capacity": 1.5, "skills": []],
            ["name": "a", "capacity": 1, "skills": "echo"],
            ["name": "bad name", "capacity": 1, "skills": []],
        ])
    func badNumbers(body: JSONValue) {
        var state = CoordinatorState()
        let actions = state.handleWorker(.ready(body), from: alpha, now: 0)
        #expect(
            actions.contains {
                if case .toWorker(_, .error(let e)) = $0 { e.code == .invalidRegistration } else { false }
            })
        #expect(state.workers.isEmpty)
        _ = state.tick(now: UInt64.max / 2)  // and nothing traps later
    }

    @Test("a waiting request times out too")
    func waitingTimeout() {
        var state = CoordinatorState()
        _ = state.handleWorker(
            registration("alpha", skills: ["sleep"], capacity: 1, heartbeatMs: 100_000), from: alpha, now: 0)
        _ = state.handleInvoke(request("r1", skill: "sleep", timeoutMs: 10_000), from: client, now: 0)
        _ = state.handleInvoke(request("r2", skill: "sleep", timeoutMs: 50), from: client, now: 0)
        let reply = replies(state.tick(now: 60 * Self.ms)).first
        #expect(reply?.requestID == "r2")
        #expect(errorCode(reply) == "timeout")
        #expect(state.waitingCount == 0)
    }

    @Test("a live name cannot be taken; unregistered peers are told to register")
    func namesAndStrangers() {
        var state = CoordinatorState()
        _ = state.handleWorker(registration("alpha", skills: ["echo"]), from: alpha, now: 0)
        let taken = state.handleWorker(registration("alpha", skills: ["echo"]), from: beta, now: 0)
        #expect(taken.contains { if case .toWorker(_, .error(let e)) = $0 { e.code == .nameTaken } else { false } })
        let stranger = state.handleWorker(.heartbeat(intervalMs: nil, registry: nil), from: beta, now: 0)
        #expect(
            stranger.contains { if case .toWorker(_, .error(let e)) = $0 { e.code == .notRegistered } else { false } })
    }

    @Test("results from the wrong worker or for unknown invocations are ignored")
    func foreignResults() {
        var state = CoordinatorState()
        _ = state.handleWorker(registration("alpha", skills: ["echo"]), from: alpha, now: 0)
        _ = state.handleWorker(registration("beta", skills: ["other"]), from: beta, now: 0)
        let sent = invocations(state.handleInvoke(request("r1"), from: client, now: 0))
        #expect(
            state.handleWorker(
                .result(invocationID: sent[0].1.invocationID, status: .ok, payload: []), from: beta, now: 0
            ).isEmpty)
        #expect(
            state.handleWorker(.result(invocationID: "i999", status: .ok, payload: []), from: alpha, now: 0).isEmpty)
        #expect(state.runningCount == 1)
    }

    @Test("state changes are published once each")
    func states() {
        var state = CoordinatorState()
        _ = state.handleWorker(registration("alpha", skills: ["echo"]), from: alpha, now: 0)
        let first = state.handleWorker(.state(.executingSkill("echo")), from: alpha, now: 0)
        #expect(first == [.publish(.agentState(agent: "alpha", state: .executingSkill("echo")))])
        #expect(state.handleWorker(.state(.executingSkill("echo")), from: alpha, now: 0).isEmpty)
    }

    @Test("a disconnecting worker fails its running requests and leaves the catalog")
    func disconnect() throws {
        var state = CoordinatorState()
        _ = state.handleWorker(registration("alpha", skills: ["echo"]), from: alpha, now: 0)
        _ = state.handleInvoke(request("r1"), from: client, now: 0)
        let actions = state.handleWorker(.disconnect, from: alpha, now: 0)
        #expect(errorCode(replies(actions).first) == "agent_lost")
        #expect(state.catalog().json == ["skills": []])
    }

    @Test("heartbeats go to every worker once per interval")
    func heartbeats() {
        var state = CoordinatorState()
        _ = state.handleWorker(registration("alpha", skills: ["echo"], heartbeatMs: 100_000), from: alpha, now: 0)
        let beat = { (actions: [CoordinatorAction]) in
            actions.filter { $0 == .toWorker(self.alpha, .heartbeat(intervalMs: 1000)) }.count
        }
        #expect(beat(state.tick(now: 1000 * Self.ms)) == 1)
        #expect(beat(state.tick(now: 1500 * Self.ms)) == 0)
        #expect(beat(state.tick(now: 2000 * Self.ms)) == 1)
    }
}

extension CoordinatorStateTests {
    @Test(
        "an ok RESULT that is no result form reaches the client as malformed_result naming the agent",
        arguments: ["{not json", #"{"type":"picture"}"#, #"{"type":"text","text":7}"#])
    func malformedResult(payload: String) throws {
        var state = CoordinatorState()
        _ = state.handleWorker(registration("alpha", skills: ["echo"]), from: alpha, now: 0)
        let sent = invocations(state.handleInvoke(request("r1"), from: client, now: 1))
        let answer = replies(
            state.handleWorker(
                .result(invocationID: try #require(sent.first).1.invocationID, status: .ok, payload: Array(payload.utf8)),
                from: alpha, now: 2))
        #expect(answer.first?.status == .error && errorCode(answer.first) == "malformed_result")
        let message = try JSONValue(parsing: try #require(answer.first).payload)["message"]?.stringValue ?? ""
        #expect(message.contains("agent 'alpha'") && message.contains("'echo'"))
        // The slot is free again and the bus keeps serving.
        #expect(state.workers[alpha]?.inFlight == 0 && invocations(state.handleInvoke(request("r2"), from: client, now: 3)).count == 1)
    }
}
