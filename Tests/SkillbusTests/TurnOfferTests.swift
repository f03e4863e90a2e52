import Testing

@testable import Skillbus

/// A turn without its round's lease offers to run a call on its agent (PROTOCOL §3.7.3), on the state machine
/// with no sockets: the first of its kind runs there, identical ones get its outcome, and whatever the REQUEST
/// path must decide is sent back to it.
@Suite("Turn offers")
struct TurnOfferTests {
    static let ms: UInt64 = 1_000_000
    let client: PeerID = [0xC1]
    let other: PeerID = [0xC2]
    let alpha: PeerID = [0xA1]
    let beta: PeerID = [0xB1]
    let hi = Array(#"{"text":"hi"}"#.utf8)
    let result = Array(#"{"text":"hi","type":"text"}"#.utf8)

    /// A bus with two planner agents, `alpha` and `beta`, both offering echo.
    func bus(_ settings: CoordinatorState.Settings = .init()) -> CoordinatorState {
        var state = CoordinatorState(settings: settings)
        for (peer, name) in [(alpha, "alpha"), (beta, "beta")] {
            let body: [String: JSONValue] = [
                "name": .string(name), "capacity": 2, "heartbeatMs": 1000, "planner": true,
                "skills": [["identifier": "echo", "parameters": []], ["identifier": "sleep", "parameters": []]],
            ]
            _ = state.handleWorker(.ready(.object(body)), from: peer, now: 0)
        }
        return state
    }

    /// An asks round of both agents: their turns, by agent. The first holds the round (§3.5.10); unless `held`,
    /// it gives the round back at once (RELEASE), as the reference worker does when its turn waits, so that
    /// both turns offer their calls.
    func asksRound(_ state: inout CoordinatorState, round: String = "r1", held: Bool = false) -> [PeerID: TurnRequest] {
        let body = Array(#"{"asks":{"agents":["alpha","beta"],"message":"say hi","aggregate":"all"}}"#.utf8)
        let actions = state.handleRound(RoundRequest(requestID: "q1", roundID: round, body: body), from: client, now: 0)
        var turns: [PeerID: TurnRequest] = [:]
        for case .toWorker(let peer, .turn(let turn)) in actions { turns[peer] = turn }
        for (peer, turn) in turns where turn.leased && !held {
            _ = state.handleWorker(.release(turnID: turn.turnID), from: peer, now: 0)
        }
        return turns
    }

    func offer(_ turn: TurnRequest, _ callID: String, text: String = "hi") -> WorkerMessage {
        .offer(turnID: turn.turnID, callID: callID, skill: "echo", parameters: Array(#"{"text":"\#(text)"}"#.utf8))
    }

    func verdicts(_ actions: [CoordinatorAction]) -> [(peer: PeerID, callID: String, verdict: OfferVerdict)] {
        actions.compactMap {
            guard case .toWorker(let peer, .verdict(let callID, let verdict)) = $0 else { return nil }
            return (peer, callID, verdict)
        }
    }

    func invokes(_ actions: [CoordinatorAction]) -> Int {
        actions.filter {
            if case .toWorker(_, .invoke) = $0 { return true }
            return false
        }.count
    }

    @Test("the first offer runs on its agent; an identical one waits and gets its outcome, a later one at once")
    func identicalOffersRunOnce() throws {
        var state = bus()
        let turns = asksRound(&state)
        let (first, second) = (try #require(turns[alpha]), try #require(turns[beta]))
        #expect(first.leased && !second.leased)  // given back by asksRound
        let run = verdicts(state.handleWorker(offer(first, "o1"), from: alpha, now: 1 * Self.ms))
        #expect(run.count == 1 && run[0].peer == alpha && run[0].callID == "o1" && run[0].verdict == .run)
        // Identical: it joins the running call, and hears nothing yet (the feed hears it was deduplicated).
        #expect(verdicts(state.handleWorker(offer(second, "o7"), from: beta, now: 2 * Self.ms)).isEmpty)
        let called = state.handleWorker(
            .called(turnID: first.turnID, claimID: "o1", skill: "echo", parameters: hi, status: .ok, payload: result),
            from: alpha, now: 3 * Self.ms)
        let done = verdicts(called)
        #expect(done.count == 1 && done[0].peer == beta && done[0].callID == "o7")
        #expect(done[0].verdict == .done(status: .ok, agent: "alpha", payload: result))
        // After it ended: the outcome at once, to another offer and to a REQUEST of the round.
        let againActions = state.handleWorker(offer(second, "o8"), from: beta, now: 4 * Self.ms)
        #expect(verdicts(againActions).first?.verdict == .done(status: .ok, agent: "alpha", payload: result))
        let announced = againActions.contains {
            guard case .publish(.requestDeduplicated(_, let request, "echo", true)) = $0 else { return false }
            return request == "\(second.turnID):o8"
        }
        #expect(announced)
        let request = InvokeRequest(requestID: "x", roundID: "r1", skill: "echo", timeoutMs: nil, parameters: hi)
        let reused = state.handleInvoke(request, from: other, now: 5 * Self.ms)
        #expect(invokes(reused) == 0)
        // A different call is a first of its kind again.
        let different = verdicts(state.handleWorker(offer(second, "o9", text: "ho"), from: beta, now: 6 * Self.ms))
        #expect(different.first?.verdict == .run)
    }

    @Test("the round's document lists offered calls as sub-calls, the joined one deduplicated")
    func documentListsOfferedCalls() throws {
        var state = bus()
        let turns = asksRound(&state)
        let (first, second) = (try #require(turns[alpha]), try #require(turns[beta]))
        _ = state.handleWorker(offer(first, "o1"), from: alpha, now: 1 * Self.ms)
        _ = state.handleWorker(offer(second, "o1"), from: beta, now: 2 * Self.ms)
        _ = state.handleWorker(
            .called(turnID: first.turnID, claimID: "o1", skill: "echo", parameters: hi, status: .ok, payload: result),
            from: alpha, now: 3 * Self.ms)
        var document: JSONValue?
        for (peer, turn) in [(alpha, first), (beta, second)] {
            let turnDocument: JSONValue = ["turn": .string(turn.turnID), "status": "ok", "reply": "hi"]
            for case .toClient(_, .round(_, _, let body)) in state.handleWorker(
                .turnEnd(turnID: turn.turnID, .ok(turnDocument)), from: peer, now: 4 * Self.ms)
            {
                document = try JSONValue(parsing: body)
            }
        }
        let subCalls = try #require(document?["invocations"]?.arrayValue).filter { $0["skill"] == "echo" }
        #expect(subCalls.count == 2)
        #expect(subCalls.map { $0["status"] } == ["ok", "ok"])
        #expect(subCalls.map { $0["deduplicated"] } == [false, true])
    }

    @Test("the first ask's turn holds the round: another turn's new calls wait for it, identical ones do not")
    func offersWaitForTheHolder() throws {
        var state = bus()
        let turns = asksRound(&state, held: true)
        let (holder, second) = (try #require(turns[alpha]), try #require(turns[beta]))
        #expect(holder.leased && !second.leased)
        // Beta offers the call alpha runs under the lease, another one, and one of another skill: all wait.
        #expect(state.handleWorker(offer(second, "o1"), from: beta, now: 1 * Self.ms).isEmpty)
        #expect(state.handleWorker(offer(second, "o2", text: "ho"), from: beta, now: 1 * Self.ms).isEmpty)
        let nap = WorkerMessage.offer(turnID: second.turnID, callID: "o5", skill: "sleep", parameters: Array("{}".utf8))
        #expect(state.handleWorker(nap, from: beta, now: 1 * Self.ms).isEmpty)
        // The holder's own offer is no way to run a call of a round it holds.
        #expect(
            verdicts(state.handleWorker(offer(holder, "o3"), from: alpha, now: 1 * Self.ms)).first?.verdict == .route)
        // The holder reports its call: the identical offer takes its outcome at once, the other still waits.
        let called = verdicts(
            state.handleWorker(
                .called(
                    turnID: holder.turnID, claimID: "c1", skill: "echo", parameters: hi, status: .ok, payload: result),
                from: alpha, now: 2 * Self.ms))
        #expect(called.map(\.callID) == ["o1"])
        #expect(called.first?.verdict == .done(status: .ok, agent: "alpha", payload: result))
        // So does an identical offer that comes later, in the key's other spelling, while the round is still held.
        let spaced = WorkerMessage.offer(
            turnID: second.turnID, callID: "o4", skill: "echo", parameters: Array(#"{ "text": "hi" }"#.utf8))
        let later = verdicts(state.handleWorker(spaced, from: beta, now: 2 * Self.ms))
        #expect(later.map(\.callID) == ["o4"])
        #expect(later.first?.verdict == .done(status: .ok, agent: "alpha", payload: result))
        // The round comes back with the holder's TURNEND: the other calls run, in the order they came.
        let holderDocument: JSONValue = ["turn": .string(holder.turnID), "status": "ok", "reply": "hi"]
        let ended = verdicts(
            state.handleWorker(.turnEnd(turnID: holder.turnID, .ok(holderDocument)), from: alpha, now: 3 * Self.ms))
        #expect(ended.map(\.callID) == ["o2", "o5"])
        #expect(ended.map(\.verdict) == [.run, .run])
        // The holder's call is one of the round's sub-calls, the joined one deduplicated.
        _ = state.handleWorker(
            .called(
                turnID: second.turnID, claimID: "o2", skill: "echo", parameters: Array(#"{"text":"ho"}"#.utf8),
                status: .ok, payload: result), from: beta, now: 4 * Self.ms)
        var document: JSONValue?
        let secondDocument: JSONValue = ["turn": .string(second.turnID), "status": "ok", "reply": "hi"]
        for case .toClient(_, .round(_, _, let body)) in state.handleWorker(
            .turnEnd(turnID: second.turnID, .ok(secondDocument)), from: beta, now: 5 * Self.ms)
        {
            document = try JSONValue(parsing: body)
        }
        let subCalls = try #require(document?["invocations"]?.arrayValue).filter { $0["skill"] == "echo" }
        #expect(subCalls.map { $0["deduplicated"] } == [false, true, true, false])
    }

    @Test("a waiting offer whose turn ended meanwhile is dropped; a round with a skill step gives no lease")
    func waitingOfferOfAnEndedTurn() throws {
        var state = bus()
        let turns = asksRound(&state, held: true)
        let (holder, second) = (try #require(turns[alpha]), try #require(turns[beta]))
        _ = state.handleWorker(offer(second, "o1"), from: beta, now: 1 * Self.ms)
        let secondDocument: JSONValue = ["turn": .string(second.turnID), "status": "ok", "reply": "hi"]
        _ = state.handleWorker(.turnEnd(turnID: second.turnID, .ok(secondDocument)), from: beta, now: 2 * Self.ms)
        #expect(verdicts(state.handleWorker(.release(turnID: holder.turnID), from: alpha, now: 3 * Self.ms)).isEmpty)

        var plan = bus()
        let body = Array(
            #"{"plan":{"steps":[{"id":"e","skill":"echo","params":{}},{"id":"a","ask":{"agent":"alpha","message":"say hi"}}]}}"#
                .utf8)
        let actions = plan.handleRound(RoundRequest(requestID: "q2", roundID: "r9", body: body), from: client, now: 0)
        let started = actions.compactMap { action -> TurnRequest? in
            if case .toWorker(_, .turn(let turn)) = action { return turn }
            return nil
        }
        #expect(started.count == 1 && started.first?.leased == false)
    }

    @Test("what the REQUEST path decides is routed: a held round, an unknown turn, single-flight off")
    func routed() throws {
        var state = bus()
        // A turn of a fresh round holds it: it runs its calls under the lease, and an offer is not its way.
        let held = try #require(
            state.handleAsk(
                AskRequest(requestID: "a1", roundID: "r2", agent: "alpha", message: "say hi"), from: client, now: 0
            )
            .compactMap { action -> TurnRequest? in
                if case .toWorker(_, .turn(let turn)) = action { return turn }
                return nil
            }.first)
        #expect(held.leased)
        #expect(verdicts(state.handleWorker(offer(held, "o1"), from: alpha, now: 1 * Self.ms)).first?.verdict == .route)
        // A turn this worker was not given.
        let turns = asksRound(&state, round: "r3")
        let betaTurn = try #require(turns[beta])
        #expect(
            verdicts(state.handleWorker(offer(betaTurn, "o2"), from: alpha, now: 2 * Self.ms)).first?.verdict == .route)
        var settings = CoordinatorState.Settings()
        settings.deduplication = false
        var plain = bus(settings)
        let turn = try #require(asksRound(&plain)[alpha])
        #expect(verdicts(plain.handleWorker(offer(turn, "o3"), from: alpha, now: 1 * Self.ms)).first?.verdict == .route)
    }

    @Test("an offered call its agent never reports ends agent_lost for whoever joined it")
    func lostAgentFailsJoiners() throws {
        var state = bus()
        let turns = asksRound(&state)
        _ = state.handleWorker(offer(try #require(turns[alpha]), "o1"), from: alpha, now: 1 * Self.ms)
        _ = state.handleWorker(offer(try #require(turns[beta]), "o1"), from: beta, now: 2 * Self.ms)
        let lost = verdicts(state.handleWorker(.disconnect, from: alpha, now: 3 * Self.ms))
        guard case .done(.error, _, let payload)? = lost.first(where: { $0.peer == beta })?.verdict else {
            Issue.record("beta heard no error: \(lost)")
            return
        }
        #expect((try? JSONValue(parsing: payload))?["code"] == "agent_lost")
    }

    @Test("OFFER and VERDICT round-trip through the wire, and bad ones are refused")
    func wire() throws {
        let offer = WorkerMessage.offer(turnID: "t1", callID: "o1", skill: "echo", parameters: hi)
        #expect(try WorkerMessage.decode(offer.encoded()) == offer)
        for verdict in [OfferVerdict.run, .route, .done(status: .error, agent: "beta", payload: Array("{}".utf8))] {
            let message = BusToWorkerMessage.verdict(callID: "o1", verdict)
            #expect(try BusToWorkerMessage.decode(message.encoded()) == message)
        }
        let header = [Array("SKB2W".utf8), Array("OFFER".utf8), Array("t1".utf8), Array("o1".utf8)]
        #expect(throws: SkillbusError.self) { try WorkerMessage.decode(fields: header + [[], hi]) }  // no skill
        #expect(throws: SkillbusError.self) { try WorkerMessage.decode(fields: header + [Array("echo".utf8)]) }
        let verdict = [Array("SKB2W".utf8), Array("VERDICT".utf8), Array("o1".utf8), Array("maybe".utf8), [], [], []]
        #expect(throws: SkillbusError.self) { try BusToWorkerMessage.decode(fields: verdict) }
    }
}
