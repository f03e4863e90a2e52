import Testing

@testable import Skillbus

/// A turn's lease on its round (PROTOCOL §4.2), on the state machine with no sockets: the turn runs its
/// calls on its agent and reports them; everything else of the round waits until the round comes back,
/// and then sees those calls as executions of the round.
@Suite("Turn leases")
struct TurnLeaseTests {
    static let ms: UInt64 = 1_000_000
    let client: PeerID = [0xC1]
    let other: PeerID = [0xC2]
    let agent: PeerID = [0xA1]
    let helper: PeerID = [0xB1]
    let hi = Array(#"{"text":"hi"}"#.utf8)

    /// A bus with a planner agent `alpha` (offering echo) and a plain agent `beta` (echo too).
    func bus() -> CoordinatorState {
        var state = CoordinatorState()
        for (peer, name, planner) in [(agent, "alpha", true), (helper, "beta", false)] {
            var body: [String: JSONValue] = [
                "name": .string(name), "capacity": 2, "heartbeatMs": 1000,
                "skills": [["identifier": "echo", "parameters": []]],
            ]
            if planner { body["planner"] = true }
            _ = state.handleWorker(.ready(.object(body)), from: peer, now: 0)
        }
        return state
    }

    func ask(_ state: inout CoordinatorState, round: String, now: UInt64 = 0) -> TurnRequest? {
        let actions = state.handleAsk(
            AskRequest(requestID: "a1", roundID: round, agent: "alpha", message: "say hi"), from: client, now: now)
        return actions.compactMap { action -> TurnRequest? in
            if case .toWorker(_, .turn(let turn)) = action { return turn }
            return nil
        }.first
    }

    func request(_ id: String, round: String, text: String = "hi", timeoutMs: Int? = nil) -> InvokeRequest {
        InvokeRequest(
            requestID: id, roundID: round, skill: "echo", timeoutMs: timeoutMs,
            parameters: Array(#"{"text":"\#(text)"}"#.utf8))
    }

    func replies(_ actions: [CoordinatorAction]) -> [InvokeReply] {
        actions.compactMap {
            if case .toClient(_, .reply(let reply)) = $0 { return reply }
            return nil
        }
    }

    func invokes(_ actions: [CoordinatorAction]) -> Int {
        actions.filter {
            if case .toWorker(_, .invoke) = $0 { return true }
            return false
        }.count
    }

    @Test("a turn in a fresh round holds it; in a round that already ran something, or a held one, it does not")
    func leaseOnlyForFreshRounds() throws {
        var state = bus()
        #expect(try #require(ask(&state, round: "r1")).leased)
        #expect(try #require(ask(&state, round: "r1")).leased == false)  // held by the first turn
        _ = state.handleInvoke(request("x", round: "r2"), from: other, now: 0)
        #expect(try #require(ask(&state, round: "r2")).leased == false)
    }

    @Test("another REQUEST of a held round waits; after RELEASE it joins the call the turn claimed")
    func parkedRequestJoinsClaim() throws {
        var state = bus()
        let turn = try #require(ask(&state, round: "r1"))
        _ = state.handleWorker(
            .claim(turnID: turn.turnID, claimID: "c1", skill: "echo", parameters: Array(#"{"text":"hi"}"#.utf8)),
            from: agent, now: 1 * Self.ms)
        // Identical to the claimed call: it waits while the round is held, then joins the claim.
        let parked = state.handleInvoke(request("r", round: "r1"), from: other, now: 2 * Self.ms)
        #expect(parked.isEmpty)
        let released = state.handleWorker(.release(turnID: turn.turnID), from: agent, now: 3 * Self.ms)
        #expect(invokes(released) == 0)  // not executed again
        #expect(replies(released).isEmpty)  // the claim still runs
        let result = Array(#"{"text":"hi","type":"text"}"#.utf8)
        let called = state.handleWorker(
            .called(turnID: turn.turnID, claimID: "c1", skill: "echo", parameters: hi, status: .ok, payload: result), from: agent, now: 4 * Self.ms)
        let reply = try #require(replies(called).first)
        #expect(reply.requestID == "r" && reply.status == .ok && reply.payload == result && reply.agent == "alpha")
    }

    @Test("after the turn ends, an identical REQUEST of its round reuses a call it ran itself (CALLED alone)")
    func finishedClaimIsReused() throws {
        var state = bus()
        let turn = try #require(ask(&state, round: "r1"))
        let result = Array(#"{"text":"hi","type":"text"}"#.utf8)
        // A call that ended while the turn held its round needs no CLAIM: CALLED enters it, ended.
        _ = state.handleWorker(
            .called(turnID: turn.turnID, claimID: "c1", skill: "echo", parameters: hi, status: .ok, payload: result), from: agent, now: 1 * Self.ms)
        _ = state.handleWorker(.turnEnd(turnID: turn.turnID, .ok([:])), from: agent, now: 2 * Self.ms)
        let again = state.handleInvoke(request("r", round: "r1"), from: other, now: 3 * Self.ms)
        #expect(invokes(again) == 0)
        #expect(replies(again).first?.payload == result)
        // A different call of the round runs as usual.
        #expect(invokes(state.handleInvoke(request("s", round: "r1", text: "other"), from: other, now: 4 * Self.ms)) == 1)
    }

    @Test("TURNEND gives the round back: a parked REQUEST then runs")
    func turnEndReleases() throws {
        var state = bus()
        let turn = try #require(ask(&state, round: "r1"))
        #expect(state.handleInvoke(request("r", round: "r1"), from: other, now: 0).isEmpty)
        let ended = state.handleWorker(.turnEnd(turnID: turn.turnID, .ok([:])), from: agent, now: 1 * Self.ms)
        #expect(invokes(ended) == 1)
    }

    @Test("a parked REQUEST whose time runs out is answered timeout; a ROUND of a held round is refused")
    func parkedTimesOutAndRoundRefused() throws {
        var state = bus()
        _ = try #require(ask(&state, round: "r1"))
        _ = state.handleInvoke(request("r", round: "r1", timeoutMs: 50), from: other, now: 0)
        let expired = replies(state.tick(now: 60 * Self.ms))
        #expect(expired.count == 1)
        #expect((try? JSONValue(parsing: expired[0].payload))?["code"] == "timeout")
        let round = state.handleRound(
            RoundRequest(requestID: "o", roundID: "r1", body: Array(#"{"invoke":{"skill":"echo"}}"#.utf8)),
            from: other, now: 61 * Self.ms)
        let document = round.compactMap { action -> JSONValue? in
            if case .toClient(_, .round(_, _, let document)) = action { return try? JSONValue(parsing: document) }
            return nil
        }.first
        #expect(document?["error"]?["code"] == "round_conflict")
    }

    @Test("a parked REQUEST that times out or is cancelled is announced request.done, like every REPLY")
    func parkedEndsOnTheFeed() throws {
        var state = bus()
        state.publishesRequestEvents = true
        _ = try #require(ask(&state, round: "r1"))
        _ = state.handleInvoke(request("late", round: "r1", timeoutMs: 50), from: other, now: 0)
        _ = state.handleInvoke(request("given-up", round: "r1"), from: other, now: 0)
        func done(_ actions: [CoordinatorAction]) -> [(String, String)] {
            actions.compactMap { action in
                guard case .publish(.requestDone(_, let request, _, _, .error, _, let payload)) = action else { return nil }
                return (request, (try? JSONValue(parsing: payload))?["code"]?.stringValue ?? "")
            }
        }
        let expired = state.tick(now: 60 * Self.ms)
        #expect(replies(expired).map(\.requestID) == ["late"])
        #expect(done(expired).map { "\($0.0) \($0.1)" } == ["late timeout"])
        let cancelled = state.handleCancel(requestID: "given-up", from: other, now: 61 * Self.ms)
        #expect(replies(cancelled).map(\.requestID) == ["given-up"])
        #expect(done(cancelled).map { "\($0.0) \($0.1)" } == ["given-up cancelled"])
    }

    @Test("a cancelled turn's calls are refused: the one waiting for the round, and one that comes after its end")
    func cancelledTurnCalls() throws {
        var state = bus()
        let turn = try #require(ask(&state, round: "r1"))
        let agentClient: PeerID = [0xA2]
        #expect(state.handleInvoke(request("call", round: "r1"), from: agentClient, now: 0).isEmpty)
        let cancelled = state.handleCancel(requestID: "a1", from: client, now: 1 * Self.ms)
        #expect((try? JSONValue(parsing: try #require(replies(cancelled).first).payload))?["code"] == "cancelled")
        _ = state.handleWorker(.turnEnd(turnID: turn.turnID, .ok([:])), from: agent, now: 2 * Self.ms)
        let late = replies(state.handleInvoke(request("late", round: "r1"), from: agentClient, now: 3 * Self.ms))
        #expect((try? JSONValue(parsing: try #require(late.first).payload))?["code"] == "cancelled")
        // Long after, the round id is an ordinary one again.
        for peer in [agent, helper] {
            _ = state.handleWorker(.heartbeat(intervalMs: nil, registry: nil), from: peer, now: 40_000 * Self.ms)
        }
        _ = state.tick(now: 40_000 * Self.ms)
        #expect(invokes(state.handleInvoke(request("new", round: "r1"), from: other, now: 40_001 * Self.ms)) == 1)
    }

    @Test("a claim whose agent is lost answers whoever joined it with agent_lost")
    func lostAgentFailsJoiners() throws {
        var state = bus()
        let turn = try #require(ask(&state, round: "r1"))
        _ = state.handleWorker(
            .claim(turnID: turn.turnID, claimID: "c1", skill: "echo", parameters: Array(#"{"text":"hi"}"#.utf8)),
            from: agent, now: 0)
        _ = state.handleWorker(.release(turnID: turn.turnID), from: agent, now: 1 * Self.ms)
        let joined = state.handleInvoke(request("r", round: "r1"), from: other, now: 2 * Self.ms)
        #expect(invokes(joined) == 0 && replies(joined).isEmpty)
        let lost = replies(state.handleWorker(.disconnect, from: agent, now: 3 * Self.ms))
        #expect(lost.count == 1)
        #expect((try? JSONValue(parsing: lost[0].payload))?["code"] == "agent_lost")
    }

    @Test("CLAIM, CALLED and RELEASE round-trip through the wire, and bad ones are refused")
    func wire() throws {
        let messages: [WorkerMessage] = [
            .claim(turnID: "t1", claimID: "c1", skill: "echo", parameters: Array("{}".utf8)),
            .called(turnID: "t1", claimID: "c1", skill: "echo", parameters: [], status: .error, payload: Array("{}".utf8)),
            .release(turnID: "t1"),
        ]
        for message in messages { #expect(try WorkerMessage.decode(message.encoded()) == message) }
        #expect(throws: SkillbusError.self) {
            try WorkerMessage.decode(fields: [Array("SKB2W".utf8), Array("CLAIM".utf8), Array("t1".utf8), Array("c1".utf8), [], []])
        }
        let turn = TurnRequest(turnID: "t1", roundID: "r", sessionID: "", deadlineMs: 5, message: "m", leased: true)
        #expect(try BusToWorkerMessage.decode(BusToWorkerMessage.turn(turn).encoded()) == .turn(turn))
        var badLease = BusToWorkerMessage.turn(turn).encoded()
        badLease[2] = Array("yes".utf8)  // the lease, the second frame after the envelope
        #expect(throws: SkillbusError.self) { try BusToWorkerMessage.decode(badLease) }
    }
}
