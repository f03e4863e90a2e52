import Testing

@testable import Skillbus

/// Within a round, the same skill with the same parameters executes once: later identical invocations
/// join the running one or get its finished outcome. No sockets; the clock is driven by hand.
@Suite("Single-flight within a round")
struct SingleFlightTests {
    static let ms: UInt64 = 1_000_000
    let alpha: PeerID = [0xA1]

    func stateWithWorker(_ settings: CoordinatorState.Settings = .init(), capacity: Int = 100) -> CoordinatorState {
        var state = CoordinatorState(settings: settings, epoch: "e1")
        _ = state.handleWorker(
            .ready([
                "name": "alpha", "capacity": .number(Double(capacity)),
                "skills": [
                    [
                        "identifier": "count",
                        "parameters": [
                            ["name": "a", "type": "number"],
                            ["name": "b", "type": "number", "required": false, "default": 1],
                        ],
                    ]
                ],
            ]), from: alpha, now: 0)
        return state
    }

    func request(_ id: String, round: String, _ parameters: String, skill: String = "count") -> InvokeRequest {
        InvokeRequest(
            requestID: id, roundID: round, skill: skill, timeoutMs: 60_000, parameters: Array(parameters.utf8))
    }

    func invocations(_ actions: [CoordinatorAction]) -> [Invocation] {
        actions.compactMap { if case .toWorker(_, .invoke(let invocation)) = $0 { invocation } else { nil } }
    }

    func replies(_ actions: [CoordinatorAction]) -> [(PeerID, InvokeReply)] {
        actions.compactMap { if case .toClient(let peer, .reply(let reply)) = $0 { (peer, reply) } else { nil } }
    }

    static let result = Array(#"{"text":"done","type":"text"}"#.utf8)

    @Test(
        "parameters in canonical form give the key the general reading gives, defaults filled in or none",
        arguments: [#"{}"#, #"{"a":1}"#, #"{"a":[1,{"c":"d"}],"b":2}"#, #"{"b":3,"z":"日本"}"#])
    func canonicalParametersKey(_ text: String) {
        let parameters = Array(text.utf8)
        let withDefault = ParameterSchema([ParameterField("a", .number), ParameterField("b", .number, default: 1)])
        let plain = ParameterSchema([ParameterField("a", .number)])
        for schema in [withDefault, plain, nil] {
            let general = SingleFlight.canonicalKey(skill: "count", parameters: parameters, schema: { _ in schema })
            let quick = SingleFlight.canonicalKey(skill: "count", canonicalParameters: parameters, schema: schema)
            #expect(quick == general)
        }
    }

    @Test("50 identical invocations in one round: one execution, 50 replies with its result")
    func fiftyIdentical() {
        var state = stateWithWorker()
        var dispatched: [Invocation] = []
        var early: [(PeerID, InvokeReply)] = []
        for index in 0..<50 {
            let actions = state.handleInvoke(
                request("r\(index)", round: "R", #"{"a":2}"#), from: [UInt8(index)], now: UInt64(index))
            dispatched += invocations(actions)
            early += replies(actions)
        }
        #expect(dispatched.count == 1 && early.isEmpty)
        let done = state.handleWorker(
            .result(invocationID: dispatched[0].invocationID, status: .ok, payload: Self.result), from: alpha, now: 100)
        let answered = replies(done)
        #expect(answered.count == 50)
        #expect(Set(answered.map(\.1.requestID)) == Set((0..<50).map { "r\($0)" }))
        #expect(Set(answered.map(\.0)) == Set((0..<50).map { PeerID([UInt8($0)]) }))
        #expect(answered.allSatisfy { $0.1.payload == Self.result && $0.1.agent == "alpha" })
        // A retry after the fact gets the finished outcome at once.
        let retry = state.handleInvoke(request("late", round: "R", #"{"a":2}"#), from: [0xEE], now: 200)
        #expect(invocations(retry).isEmpty)
        #expect(replies(retry).map(\.1.requestID) == ["late"] && replies(retry).first?.1.payload == Self.result)
    }

    @Test("the same invocation in two rounds executes twice")
    func twoRounds() {
        var state = stateWithWorker()
        let first = state.handleInvoke(request("r1", round: "R1", #"{"a":2}"#), from: [1], now: 0)
        let second = state.handleInvoke(request("r2", round: "R2", #"{"a":2}"#), from: [1], now: 0)
        #expect(invocations(first).count == 1 && invocations(second).count == 1)
    }

    @Test("an empty round id is no round: identical requests all execute, and nothing is remembered")
    func emptyRoundID() {
        var state = stateWithWorker()
        let first = invocations(state.handleInvoke(request("r1", round: "", #"{"a":2}"#), from: [1], now: 0))
        let second = invocations(state.handleInvoke(request("r2", round: "", #"{"a":2}"#), from: [2], now: 1))
        #expect(first.count == 1 && second.count == 1)
        #expect(state.sharedExecutionCount == 0)
        let done = state.handleWorker(
            .result(invocationID: first[0].invocationID, status: .ok, payload: Self.result), from: alpha, now: 2)
        #expect(replies(done).map(\.1.requestID) == ["r1"])  // r2 did not join r1
        let retry = state.handleInvoke(request("r3", round: "", #"{"a":2}"#), from: [1], now: 3)
        #expect(invocations(retry).count == 1 && replies(retry).isEmpty)
        #expect(state.sharedExecutionCount == 0 && state.singleFlight.retainedOutcomes == 0)
    }

    @Test(
        "key order, number spelling and schema defaults do not make a new invocation",
        arguments: [#"{"b":1,"a":2}"#, #"{"a":2.0}"#, #"{"a":2e0,"b":1.0}"#, #"{ "a" : 20e-1 }"#])
    func canonicalParameters(spelling: String) {
        var state = stateWithWorker()
        let first = state.handleInvoke(request("r1", round: "R", #"{"a":2,"b":1}"#), from: [1], now: 0)
        let again = state.handleInvoke(request("r2", round: "R", spelling), from: [2], now: 1)
        #expect(invocations(first).count == 1)
        #expect(invocations(again).isEmpty)
        let other = state.handleInvoke(request("r3", round: "R", #"{"a":2,"b":2}"#), from: [3], now: 2)
        #expect(invocations(other).count == 1)
    }

    @Test("a finished round answers any spelling of what it ran, and runs what it did not, remembering both")
    func finishedRoundRunsAgain() {
        var state = stateWithWorker()
        func finish(_ id: String, _ parameters: String, result: String, now: UInt64) {
            let sent = invocations(state.handleInvoke(request(id, round: "R", parameters), from: [1], now: now))
            #expect(sent.count == 1, "\(parameters) did not execute")
            _ = state.handleWorker(
                .result(
                    invocationID: sent[0].invocationID, status: .ok, payload: Array(#"{"text":"\#(result)","type":"text"}"#.utf8)),
                from: alpha, now: now)
        }
        func answer(_ id: String, _ parameters: String) -> String? {
            let actions = state.handleInvoke(request(id, round: "R", parameters), from: [2], now: 50)
            #expect(invocations(actions).isEmpty, "\(parameters) executed again")
            let payload = replies(actions).first.map { String(decoding: $0.1.payload, as: UTF8.self) }
            return payload.flatMap { try? JSONValue(parsing: Array($0.utf8)).objectValue?["text"]?.stringValue }
        }
        finish("r1", #"{"a":1}"#, result: "one", now: 0)
        #expect(answer("r2", #"{"b":1.0,"a":1e0}"#) == "one")  // compared in canonical form
        finish("r3", #"{"a":2}"#, result: "two", now: 10)  // the round runs again
        #expect(state.sharedExecutionCount == 1)
        #expect(answer("r4", #"{"a":1}"#) == "one" && answer("r5", #"{"a":2.0}"#) == "two")
        // Parameters that are not an object are shared with nothing, and the round keeps what it had.
        let list = state.handleInvoke(request("r6", round: "R", "[1]"), from: [3], now: 60)
        #expect(invocations(list).count == 1)
        #expect(answer("r7", #"{"a":2}"#) == "two" && state.singleFlight.retainedOutcomes == 2)
    }

    @Test("an invocation that never reached an agent is not remembered: it may be tried again")
    func notExecutedIsNotKept() {
        var state = CoordinatorState(epoch: "e1")
        let unknown = state.handleInvoke(request("r1", round: "R", #"{"a":1}"#), from: [1], now: 0)
        #expect(replies(unknown).count == 1)
        #expect(state.sharedExecutionCount == 0)
        _ = state.handleWorker(
            .ready(["name": "alpha", "capacity": 1, "skills": [["identifier": "count"]]]), from: alpha, now: 1)
        let retry = state.handleInvoke(request("r2", round: "R", #"{"a":1}"#), from: [1], now: 2)
        #expect(invocations(retry).count == 1)
    }

    @Test("a failure that did run is kept too: a retry in the round does not execute it again")
    func failureKept() {
        var state = stateWithWorker()
        let first = invocations(state.handleInvoke(request("r1", round: "R", #"{"a":1}"#), from: [1], now: 0))
        let failed = Array(#"{"code":"skill_failed","message":"boom"}"#.utf8)
        _ = state.handleWorker(
            .result(invocationID: first[0].invocationID, status: .error, payload: failed), from: alpha, now: 1)
        let retry = state.handleInvoke(request("r2", round: "R", #"{"a":1}"#), from: [1], now: 2)
        #expect(invocations(retry).isEmpty)
        #expect(replies(retry).first?.1.status == .error && replies(retry).first?.1.payload == failed)
    }

    @Test("outcomes are forgotten after the retention window and beyond the limit, oldest first")
    func retention() {
        var settings = CoordinatorState.Settings()
        settings.roundRetentionMs = 1000
        settings.retainedOutcomesLimit = 2
        var state = stateWithWorker(settings)
        func finish(_ round: String, at now: UInt64) {
            let sent = invocations(state.handleInvoke(request(round, round: round, #"{"a":1}"#), from: [1], now: now))
            _ = state.handleWorker(
                .result(invocationID: sent[0].invocationID, status: .ok, payload: Self.result), from: alpha, now: now)
        }
        finish("A", at: 0)
        finish("B", at: 10 * Self.ms)
        finish("C", at: 20 * Self.ms)  // over the limit of 2: A goes
        #expect(state.sharedExecutionCount == 2)
        let againA = state.handleInvoke(request("a2", round: "A", #"{"a":1}"#), from: [1], now: 30 * Self.ms)
        #expect(invocations(againA).count == 1)
        _ = state.tick(now: 1015 * Self.ms)  // B is older than the window now
        let againB = state.handleInvoke(request("b2", round: "B", #"{"a":1}"#), from: [1], now: 1016 * Self.ms)
        #expect(invocations(againB).count == 1)
        let againC = state.handleInvoke(request("c2", round: "C", #"{"a":1}"#), from: [1], now: 1017 * Self.ms)
        #expect(invocations(againC).isEmpty)
    }

    @Test(
        "random traffic with a short retention and a tiny limit: each request answered once, never two identical runs at once",
        arguments: [1, 2, 3] as [UInt64])
    func randomTraffic(seed: UInt64) {
        var random = SplitMix(seed: seed)
        var settings = CoordinatorState.Settings()
        settings.roundRetentionMs = 40
        settings.retainedOutcomesLimit = 3
        let rounds = 6
        // Little capacity: some requests wait in the queue and are dispatched as results come in.
        var state = stateWithWorker(settings, capacity: 3)
        var running: [String: String] = [:]  // invocation id → "round/a"
        var answers: [String: Int] = [:]
        var sent = 0
        var now: UInt64 = 0
        func take(_ actions: [CoordinatorAction]) {
            for invocation in invocations(actions) {
                let key = invocation.roundID + "/" + String(decoding: invocation.parameters, as: UTF8.self)
                #expect(!running.values.contains(key), "\(key) executes twice at once")
                running[invocation.invocationID] = key
            }
            for (_, reply) in replies(actions) { answers[reply.requestID, default: 0] += 1 }
        }
        for _ in 0..<4000 {
            now += UInt64(Int.random(in: 0...2, using: &random)) * Self.ms
            switch Int.random(in: 0..<10, using: &random) {
            case 0..<5:
                sent += 1
                let round = "R\(Int.random(in: 0..<rounds, using: &random))"
                let parameters = #"{"a":"# + String(Int.random(in: 0..<3, using: &random)) + "}"
                take(state.handleInvoke(request("q\(sent)", round: round, parameters), from: [1], now: now))
            case 5..<9 where !running.isEmpty:
                let id = running.keys.sorted()[Int.random(in: 0..<running.count, using: &random)]
                running[id] = nil
                let status: ReplyStatus = Bool.random(using: &random) ? .ok : .error
                take(
                    state.handleWorker(
                        .result(invocationID: id, status: status, payload: Self.result), from: alpha, now: now))
            default:
                take(state.tick(now: now))
            }
            // Kept: at most the limit of finished outcomes' rounds, plus the rounds with something running.
            #expect(state.sharedExecutionCount <= settings.retainedOutcomesLimit + rounds)
        }
        while let id = running.keys.first {
            running[id] = nil
            take(
                state.handleWorker(.result(invocationID: id, status: .ok, payload: Self.result), from: alpha, now: now))
        }
        #expect(answers.count == sent)
        #expect(answers.values.allSatisfy { $0 == 1 })
    }

    @Test("with deduplication off, every invocation executes")
    func switchedOff() {
        var settings = CoordinatorState.Settings()
        settings.deduplication = false
        var state = stateWithWorker(settings)
        var count = 0
        for index in 0..<5 {
            count +=
                invocations(state.handleInvoke(request("r\(index)", round: "R", #"{"a":1}"#), from: [1], now: 0))
                .count
        }
        #expect(count == 5)
    }

    @Test("joiners of a running execution that times out all get the timeout")
    func joinersShareTheTimeout() {
        var state = stateWithWorker()
        _ = state.handleInvoke(request("r1", round: "R", #"{"a":1}"#), from: [1], now: 0)
        _ = state.handleInvoke(request("r2", round: "R", #"{"a":1}"#), from: [2], now: 1)
        let expired = replies(state.tick(now: 61_000 * Self.ms))
        #expect(expired.map(\.1.requestID).sorted() == ["r1", "r2"])
        #expect(expired.allSatisfy { $0.1.status == .error })
    }
}
