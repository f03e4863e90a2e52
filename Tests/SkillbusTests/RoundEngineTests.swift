import Testing

@testable import Skillbus

/// Round bodies are checked before anything runs; plans, fan-outs and their aggregation, driven by hand.
@Suite("Rounds: specs, plans, fan-out and aggregation")
struct RoundEngineTests {
    let client: PeerID = [0xC1]
    let peers: [String: PeerID] = ["alpha": [0xA1], "beta": [0xB1], "gamma": [0xC3]]

    func state(
        agents: [String] = ["alpha", "beta", "gamma"], capacity: Int = 10,
        settings: CoordinatorState.Settings = .init()
    ) -> CoordinatorState {
        var state = CoordinatorState(settings: settings, epoch: "e1")
        for name in agents {
            _ = state.handleWorker(
                .ready([
                    "name": .string(name), "capacity": .number(Double(capacity)),
                    "skills": [
                        ["identifier": "echo", "parameters": [["name": "text", "type": "string"]]],
                        ["identifier": "stats", "parameters": [["name": "text", "type": "string"]]],
                    ],
                ]), from: peers[name]!, now: 0)
        }
        return state
    }

    func round(_ body: JSONValue, id: String = "R", requestID: String = "q") -> RoundRequest {
        RoundRequest(requestID: requestID, roundID: id, timeoutMs: 60_000, body: body.serialized())
    }

    func invocations(_ actions: [CoordinatorAction]) -> [(PeerID, Invocation)] {
        actions.compactMap {
            if case .toWorker(let peer, .invoke(let invocation)) = $0 { (peer, invocation) } else { nil }
        }
    }

    func documents(_ actions: [CoordinatorAction]) -> [JSONValue] {
        actions.compactMap {
            if case .toClient(_, .round(_, _, let document)) = $0 { try? JSONValue(parsing: document) } else { nil }
        }
    }

    func text(_ value: String) -> [UInt8] { JSONValue.object(["type": "text", "text": .string(value)]).serialized() }

    @Test(
        "bad rounds and plans are refused with the reason, before anything runs",
        arguments: [
            (["plan": ["steps": []]] as JSONValue, "non-empty"),
            (["plan": ["steps": [["id": "a", "skill": "echo"], ["id": "a", "skill": "echo"]]]], "used twice"),
            (
                [
                    "plan": [
                        "steps": [
                            ["id": "a", "skill": "echo", "after": ["b"]], ["id": "b", "skill": "echo", "after": ["a"]],
                        ]
                    ]
                ], "cycle"
            ),
            (["plan": ["steps": [["id": "a", "skill": "echo", "after": ["zzz"]]]]], "no step of this plan"),
            (
                ["plan": ["steps": [["id": "a", "skill": "echo", "params": ["text": ["$ref": "nope.result.text"]]]]]],
                "names step 'nope'"
            ),
            (["plan": ["steps": [["id": "a", "skill": "teleport"]]]], "no agent offers skill 'teleport'"),
            (["plan": ["steps": [["id": "a", "skill": "echo"]], "onFailure": "panic"]], "onFailure"),
            (["fanout": ["skill": "echo", "agents": ["alpha", "nobody"]]], "'nobody'"),
            (["fanout": ["skill": "echo", "aggregate": "loudest"]], "aggregate"),
            (["dance": [:]], "unknown round shape"),
        ] as [(JSONValue, String)])
    func refused(body: JSONValue, reason: String) {
        var state = state()
        let actions = state.handleRound(round(body), from: client, now: 0)
        #expect(invocations(actions).isEmpty)
        let document = documents(actions).first
        #expect(document?["status"] == "error")
        #expect(document?["error"]?["message"]?.stringValue?.contains(reason) == true, "\(document?["error"] ?? .null)")
    }

    @Test("a plan's problems are listed at once, its steps' literal parameters checked against their skills first")
    func everyPlanProblem() throws {
        var state = state()
        // Two problems of the body itself.
        let shape: JSONValue = ["plan": ["steps": [["skill": "echo"], ["id": "b", "skill": "echo", "params": 3]]]]
        let first = try #require(documents(state.handleRound(round(shape, id: "R1"), from: client, now: 0)).first)
        #expect(first["error"]?["code"] == "invalid_round")
        let message = first["error"]?["message"]?.stringValue ?? ""
        #expect(message.contains("2 problems") && message.contains("step 1 has no string 'id'"), "\(message)")
        #expect(message.contains("'params' must be an object"), "\(message)")
        // A skill nobody offers and a literal parameter of the wrong name: nothing runs, both are named.
        let steps: JSONValue = [
            "plan": [
                "steps": [
                    ["id": "a", "skill": "teleport"], ["id": "b", "skill": "echo", "params": ["txt": "hi"]],
                    ["id": "c", "skill": "echo", "params": ["text": ["$ref": "b.result.text"]]],
                ]
            ]
        ]
        let actions = state.handleRound(round(steps, id: "R2"), from: client, now: 0)
        #expect(invocations(actions).isEmpty)
        let second = try #require(documents(actions).first)
        #expect(second["error"]?["code"] == "invalid_round")
        let listed = second["error"]?["message"]?.stringValue ?? ""
        #expect(listed.contains("2 problems") && listed.contains("no agent offers skill 'teleport'"), "\(listed)")
        #expect(listed.contains("plan step 'b': invalid parameters for 'echo': missing required parameter 'text'"))
        #expect(listed.contains("unknown parameter 'txt'"), "\(listed)")
        #expect(!listed.contains("step 'c'"), "a reference is checked when it is resolved")
        // One literal problem alone keeps its own code.
        let one: JSONValue = ["plan": ["steps": [["id": "a", "skill": "echo", "params": ["text": 5]]]]]
        let third = try #require(documents(state.handleRound(round(one, id: "R3"), from: client, now: 0)).first)
        #expect(third["error"]?["code"] == "invalid_parameters")
    }

    @Test("more steps than the limit are refused")
    func stepLimit() {
        var settings = CoordinatorState.Settings()
        settings.planStepLimit = 3
        var limited = CoordinatorState(settings: settings, epoch: "e1")
        let steps: [JSONValue] = (0..<4).map { ["id": .string("s\($0)"), "skill": "echo"] }
        let document = documents(limited.handleRound(round(["plan": ["steps": .array(steps)]]), from: client, now: 0))
        #expect(document.first?["error"]?["message"]?.stringValue?.contains("limit of 3") == true)
    }

    @Test("a plan runs steps whose inputs are ready, passes results by reference, and executes duplicates once")
    func plan() {
        var state = state()
        let body: JSONValue = [
            "plan": [
                "steps": [
                    ["id": "fetch", "skill": "echo", "params": ["text": "hello world"]],
                    ["id": "again", "skill": "echo", "params": ["text": "hello world"]],
                    ["id": "stats", "skill": "stats", "params": ["text": ["$ref": "fetch.result.text"]]],
                ]
            ]
        ]
        let first = state.handleRound(round(body), from: client, now: 0)
        let sent = invocations(first)
        #expect(sent.count == 1)  // fetch; again joins it; stats waits for fetch
        #expect(sent.first?.1.skill == "echo")
        let afterFetch = state.handleWorker(
            .result(invocationID: sent[0].1.invocationID, status: .ok, payload: text("hello world")), from: sent[0].0,
            now: 10)
        let next = invocations(afterFetch)
        #expect(next.count == 1 && next.first?.1.skill == "stats")
        #expect(next.first.map { String(decoding: $0.1.parameters, as: UTF8.self) } == #"{"text":"hello world"}"#)
        let done = state.handleWorker(
            .result(invocationID: next[0].1.invocationID, status: .ok, payload: text("2 words")), from: next[0].0,
            now: 20)
        let document = documents(done).first
        #expect(document?["status"] == "ok")
        let steps = document?["invocations"]?.arrayValue ?? []
        #expect(steps.map { $0["status"] } == ["ok", "ok", "ok"])
        #expect(steps[1]["deduplicated"] == true && steps[1]["reusedFrom"] == "fetch")
        #expect(document?["summary"]?["executions"] == 2 && document?["summary"]?["deduplicated"] == 1)
        #expect(document?["result"]?["stats"]?["text"] == "2 words")
    }

    @Test("a reference to a field the result lacks fails that step, naming the path; stop skips the rest")
    func missingField() {
        var state = state()
        let body: JSONValue = [
            "plan": [
                "steps": [
                    ["id": "fetch", "skill": "echo", "params": ["text": "x"]],
                    ["id": "use", "skill": "echo", "params": ["text": ["$ref": "fetch.result.json.count"]]],
                    ["id": "later", "skill": "echo", "params": ["text": "y"], "after": ["use"]],
                ]
            ]
        ]
        let sent = invocations(state.handleRound(round(body), from: client, now: 0))
        let done = state.handleWorker(
            .result(invocationID: sent[0].1.invocationID, status: .ok, payload: text("x")), from: sent[0].0, now: 5)
        #expect(invocations(done).isEmpty)
        let document = documents(done).first
        #expect(document?["status"] == "error")
        let steps = document?["invocations"]?.arrayValue ?? []
        #expect(steps[1]["status"] == "error")
        #expect(steps[1]["error"]?["message"]?.stringValue?.contains("fetch.result has no 'json'") == true)
        #expect(steps[2]["status"] == "skipped")
        #expect(
            done.contains {
                if case .publish(.invocationDone(_, "later", _, _, .skipped, _, _)) = $0 { true } else { false }
            })
    }

    @Test("fan-out: all in agent order, first cancels the losers, majority reports a split")
    func fanout() {
        var all = state()
        let sent = invocations(
            all.handleRound(round(["fanout": ["skill": "echo", "params": ["text": "hi"]]]), from: client, now: 0))
        #expect(Set(sent.map(\.0)) == Set(peers.values))
        var last: [CoordinatorAction] = []
        for (peer, invocation) in sent {
            last = all.handleWorker(
                .result(invocationID: invocation.invocationID, status: .ok, payload: text("hi")), from: peer, now: 1)
        }
        #expect(
            documents(last).first?["result"]?.arrayValue?.compactMap { $0["agent"]?.stringValue } == [
                "alpha", "beta", "gamma",
            ])

        var first = state()
        let racing = invocations(
            first.handleRound(
                round(["fanout": ["skill": "echo", "params": ["text": "hi"], "aggregate": "first"]]), from: client,
                now: 0))
        let won = first.handleWorker(
            .result(invocationID: racing[0].1.invocationID, status: .ok, payload: text("fast")), from: racing[0].0,
            now: 1)
        let cancels = won.compactMap { if case .toWorker(_, .cancel(let id)) = $0 { id } else { nil } }
        #expect(Set(cancels) == Set(racing.dropFirst().map(\.1.invocationID)))
        // Each loser: cancelled, then done (cancelled); the round last.
        let order = won.compactMap { action -> String? in
            switch action {
            case .publish(.invocationCancelled(_, let id, _, _)): "announced \(id)"
            case .publish(.invocationDone(_, let id, _, _, let status, _, _)): "\(status) \(id)"
            case .publish(.roundDone): "round"
            default: nil
            }
        }
        for loser in ["alpha", "beta", "gamma"] where order.contains("cancelled \(loser)") {
            #expect(order.firstIndex(of: "announced \(loser)")! < order.firstIndex(of: "cancelled \(loser)")!)
        }
        #expect(order.filter { $0.hasPrefix("cancelled") }.count == 2)
        #expect(order.last == "round")
        let document = documents(won).first
        #expect(document?["status"] == "ok" && document?["result"]?["text"] == "fast")
        #expect(document?["invocations"]?.arrayValue?.filter { $0["status"] == "cancelled" }.count == 2)

        var majority = state()
        let voters = invocations(
            majority.handleRound(
                round(["fanout": ["skill": "echo", "params": ["text": "hi"], "aggregate": "majority"]]), from: client,
                now: 0))
        var votes: [CoordinatorAction] = []
        for (index, (peer, invocation)) in voters.enumerated() {
            votes = majority.handleWorker(
                .result(invocationID: invocation.invocationID, status: .ok, payload: text(["a", "b", "c"][index])),
                from: peer, now: 1)
        }
        let split = documents(votes).first
        #expect(split?["status"] == "error" && split?["error"]?["code"] == "no_majority")
        #expect(split?["aggregate"]?["split"]?.arrayValue?.count == 3)
    }

    @Test("fan-out invocations queued for a busy agent count in the queue limit; past it they fail busy")
    func fanoutQueueLimit() {
        var settings = CoordinatorState.Settings()
        settings.queueLimit = 2
        settings.clientQueueShare = 1  // one client fills the queue here
        var state = state(agents: ["alpha"], capacity: 1, settings: settings)
        let body: JSONValue = ["fanout": ["skill": "echo", "params": ["text": "hi"], "agents": ["alpha"]]]
        let running = invocations(state.handleRound(round(body, id: "R0"), from: client, now: 0))
        #expect(running.count == 1)
        for index in 1...2 {
            #expect(invocations(state.handleRound(round(body, id: "R\(index)"), from: client, now: 0)).isEmpty)
        }
        #expect(state.waitingCount == 2)
        // A third waiting invocation would pass the limit: its round fails at once with busy.
        let refused = documents(state.handleRound(round(body, id: "R3"), from: client, now: 0))
        #expect(refused.first?["status"] == "error")
        #expect(refused.first?["invocations"]?.arrayValue?.first?["error"]?["code"] == "busy")
        #expect(state.waitingCount == 2)
        // The slot frees: the oldest queued invocation runs, and the count follows.
        let next = state.handleWorker(
            .result(invocationID: running[0].1.invocationID, status: .ok, payload: text("hi")), from: peers["alpha"]!,
            now: 1)
        #expect(invocations(next).count == 1 && state.waitingCount == 1)
        // When the agent leaves, what waited for it fails and the count is back to zero.
        _ = state.handleWorker(.disconnect, from: peers["alpha"]!, now: 2)
        #expect(state.waitingCount == 0)
    }

    @Test("the same round id again: the stored document, or a place among the waiting; another body is refused")
    func idempotent() throws {
        var state = state()
        let body: JSONValue = ["invoke": ["skill": "echo", "params": ["text": "once"]]]
        let sent = invocations(state.handleRound(round(body, requestID: "q1"), from: client, now: 0))
        #expect(invocations(state.handleRound(round(body, requestID: "q2"), from: [0xC2], now: 1)).isEmpty)
        let done = state.handleWorker(
            .result(invocationID: sent[0].1.invocationID, status: .ok, payload: text("once")), from: sent[0].0, now: 2)
        #expect(documents(done).count == 2)
        let again = state.handleRound(round(body, requestID: "q3"), from: client, now: 3)
        #expect(invocations(again).isEmpty)
        // The kept document, marked as such; otherwise the same.
        var kept = try #require(documents(again).first?.objectValue)
        #expect(kept.removeValue(forKey: "stored") == true)
        #expect(JSONValue.object(kept) == documents(done).first)
        #expect(documents(done).first?["stored"] == nil)
        let other = documents(
            state.handleRound(round(["invoke": ["skill": "echo", "params": ["text": "twice"]]]), from: client, now: 4))
        #expect(other.first?["error"]?["code"] == "round_conflict")
    }
}

extension RoundEngineTests {
    @Test("an agent's ok RESULT that is no result form fails its invocation in the round document")
    func malformedResultInRound() throws {
        var state = state(agents: ["alpha"])
        let sent = invocations(state.handleRound(round(["invoke": ["skill": "echo", "params": ["text": "hi"]]]), from: client, now: 0))
        let done = state.handleWorker(
            .result(invocationID: try #require(sent.first).1.invocationID, status: .ok, payload: Array(#"{"type":1}"#.utf8)),
            from: peers["alpha"]!, now: 1)
        let document = try #require(documents(done).first)
        #expect(document["status"] == "error" && document["error"]?["code"] == "malformed_result")
        #expect(document["invocations"]?.arrayValue?.first?["status"] == "error")
        #expect(document["invocations"]?.arrayValue?.first?["error"]?["message"]?.stringValue?.contains("agent 'alpha'") == true)
    }

    @Test("an invoke's, fan-out's and plan's canonical body is written without its tree, as the tree serializes")
    func canonicalInvokeBody() throws {
        let bodies: [JSONValue] = [
            ["invoke": ["skill": "echo", "params": ["text": "hi \"there\"", "n": 1.5, "z": [1, 2], "a": ["b": nil]]]],
            ["invoke": ["skill": "echo"]],
            ["invoke": ["skill": "echo", "params": ["text": ["$ref": "a.result"]]]],
            ["fanout": ["skill": "echo", "params": ["text": "x"], "aggregate": "first"]],
            ["fanout": ["skill": "echo", "agents": ["b", "a \"q\""], "aggregate": "majority"]],
            [
                "plan": [
                    "onFailure": "continue",
                    "steps": [
                        ["id": "a", "skill": "echo", "params": ["text": "hi", "n": [1, nil]]],
                        ["id": "b", "skill": "echo", "params": ["text": ["$ref": "a.result.text"]], "after": ["a"]],
                        ["id": "c", "ask": ["role": "critic", "message": "look"], "after": ["a", "b"]],
                    ],
                ]
            ],
            ["plan": ["steps": [["id": "only", "skill": "echo"]]]],
        ]
        for body in bodies {
            let spec = try RoundSpec(json: body, stepLimit: 10)
            let (canonical, parameters) = spec.canonicalForm
            #expect(canonical == spec.json.serialized())
            switch spec {
            case .invoke(_, let params), .fanout(_, let params, _, _):
                #expect(parameters == (params.containsReference ? nil : params.serialized()))
            default: #expect(parameters == nil)
            }
        }
    }

    @Test("a REQUEST in an invoke's round, spelled otherwise, joins its invocation, then reuses its outcome")
    func requestInInvokeRound() {
        var state = state()
        let body: JSONValue = ["invoke": ["skill": "echo", "params": ["text": "once", "n": 1]]]
        let sent = invocations(state.handleRound(round(body, id: "R"), from: client, now: 0))
        #expect(sent.count == 1)
        // The same parameters in another spelling: the invocation is put in canonical form only now.
        let spelled = Array(#"{ "n": 1.0, "text": "once" }"#.utf8)
        let joined = state.handleInvoke(
            InvokeRequest(requestID: "sub", roundID: "R", skill: "echo", parameters: spelled), from: [0xC2], now: 1)
        #expect(invocations(joined).isEmpty)
        let done = state.handleWorker(
            .result(invocationID: sent[0].1.invocationID, status: .ok, payload: text("once")), from: sent[0].0, now: 2)
        #expect(documents(done).count == 1)
        #expect(done.contains { if case .toClient(_, .reply(let reply)) = $0 { reply.requestID == "sub" } else { false } })
        // After the round ended: answered from what it ran, nothing executes.
        let later = state.handleInvoke(
            InvokeRequest(requestID: "late", roundID: "R", skill: "echo", parameters: spelled), from: [0xC2], now: 3)
        #expect(invocations(later).isEmpty)
        #expect(later.contains { if case .toClient(_, .reply(let reply)) = $0 { reply.requestID == "late" } else { false } })
    }
}
