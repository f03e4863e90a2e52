import Testing

@testable import Skillbus

/// Team rounds (PROTOCOL §3.5.10) on the state machine with no sockets: bodies that ask agents are read and
/// checked before anything runs, and each ask is a turn the bus starts and ends for the round.
@Suite("Team rounds: asks and ask steps")
struct TeamRoundEngineTests {
    static let ms: UInt64 = 1_000_000
    let client: PeerID = [0xC1]
    /// Agents with a planner and a role, and one without a planner.
    let agents: [(name: String, peer: PeerID, role: String?)] = [
        ("critic", [0xA1], "critic"), ("lead", [0xA2], "lead"), ("writer", [0xA3], "writer"), ("plain", [0xA4], nil),
    ]

    func bus(settings: CoordinatorState.Settings = .init()) -> CoordinatorState {
        var state = CoordinatorState(settings: settings, epoch: "e1")
        for agent in agents {
            var body: [String: JSONValue] = [
                "name": .string(agent.name), "capacity": 4, "heartbeatMs": 1000,
                "skills": [["identifier": "echo", "parameters": [["name": "text", "type": "string"]]]],
            ]
            if let role = agent.role {
                body["planner"] = true
                body["role"] = .string(role)
            }
            _ = state.handleWorker(.ready(.object(body)), from: agent.peer, now: 0)
        }
        return state
    }

    func peer(_ name: String) -> PeerID { agents.first { $0.name == name }!.peer }

    func round(_ body: JSONValue, id: String = "R", timeoutMs: Int = 60_000) -> RoundRequest {
        RoundRequest(requestID: "q", roundID: id, sessionID: "s1", timeoutMs: timeoutMs, body: body.serialized())
    }

    /// The TURNs sent, with the agent each went to.
    func turns(_ actions: [CoordinatorAction]) -> [(agent: String, turn: TurnRequest)] {
        actions.compactMap { action in
            guard case .toWorker(let peer, .turn(let turn)) = action else { return nil }
            return (agents.first { $0.peer == peer }?.name ?? "?", turn)
        }
    }

    func cancels(_ actions: [CoordinatorAction]) -> [String] {
        actions.compactMap { if case .toWorker(_, .cancel(let id)) = $0 { id } else { nil } }
    }

    func document(_ actions: [CoordinatorAction]) -> JSONValue? {
        actions.lazy.compactMap { action -> JSONValue? in
            guard case .toClient(_, .round(_, _, let document)) = action else { return nil }
            return try? JSONValue(parsing: document)
        }.first
    }

    /// The agent ends its turn with `reply`, as TURNEND with a turn document.
    func reply(
        _ state: inout CoordinatorState, _ sent: (agent: String, turn: TurnRequest), _ reply: String, now: UInt64 = 0
    ) -> [CoordinatorAction] {
        let document: JSONValue = [
            "turn": .string(sent.turn.turnID), "round": .string(sent.turn.roundID), "agent": .string(sent.agent),
            "status": "ok", "reply": .string(reply), "states": [], "calls": [],
        ]
        return state.handleWorker(.turnEnd(turnID: sent.turn.turnID, .ok(document)), from: peer(sent.agent), now: now)
    }

    func parse(_ body: JSONValue) -> SkillbusError? {
        do throws(SkillbusError) {
            _ = try RoundSpec(json: body, stepLimit: 100)
            return nil
        } catch {
            return error
        }
    }

    @Test("ask, asks and ask steps are read, and written back in the canonical form rounds are compared by")
    func canonicalBodies() throws {
        let bodies: [(JSONValue, String)] = [
            (["ask": ["role": "writer", "message": "draft", "note": 1]], #"{"ask":{"message":"draft","role":"writer"}}"#),
            (["asks": ["message": "hi"]], #"{"asks":{"agents":"all","aggregate":"all","message":"hi"}}"#),
            (
                ["asks": ["role": "critic", "message": "hi", "aggregate": "majority"]],
                #"{"asks":{"aggregate":"majority","message":"hi","role":"critic"}}"#
            ),
            (
                [
                    "plan": [
                        "steps": [
                            ["id": "d", "ask": ["agent": "writer", "message": "draft"]],
                            ["id": "c", "ask": ["role": "critic", "message": ["critique ", ["$ref": "d.reply"]]]],
                        ]
                    ]
                ],
                #"{"plan":{"onFailure":"stop","steps":[{"after":[],"ask":{"agent":"writer","message":"draft"},"id":"d"},"#
                    + #"{"after":[],"ask":{"message":["critique ",{"$ref":"d.reply"}],"role":"critic"},"id":"c"}]}}"#
            ),
        ]
        for (body, canonical) in bodies {
            let spec = try RoundSpec(json: body, stepLimit: 100)
            #expect(String(decoding: spec.json.serialized(), as: UTF8.self) == canonical)
            #expect(try RoundSpec(json: spec.json, stepLimit: 100) == spec)
            #expect(spec.asksAgents && spec.skills.isEmpty)
        }
    }

    @Test("every problem of a team plan's steps is named at once")
    func everyStepProblem() throws {
        let error = try #require(
            parse([
                "plan": [
                    "steps": [
                        ["id": "a", "ask": ["message": "x"]],
                        ["id": "b", "skill": "echo", "ask": ["agent": "writer", "message": "x"]],
                        ["id": "c", "ask": ["role": "no role!", "message": "x"]],
                        ["id": "d", "ask": ["agent": "writer", "message": 5]],
                        ["id": "e", "ask": ["agent": "writer", "role": "critic", "message": "x"]],
                    ]
                ]
            ]))
        #expect(error.code == .invalidRound)
        #expect(error.message.hasPrefix("the plan has 5 problems"), "\(error.message)")
        for step in ["'a'", "'b'", "'c'", "'d'", "'e'"] { #expect(error.message.contains("plan step \(step)")) }
    }

    @Test("a message's references are checked like parameters': unknown steps, and cycles through messages")
    func messageReferences() throws {
        let unknown = try #require(
            parse([
                "plan": [
                    "steps": [
                        ["id": "a", "ask": ["role": "critic", "message": ["x ", ["$ref": "nope.reply"]]]],
                        ["id": "b", "ask": ["role": "critic", "message": ["$ref": "gone.result.text"]]],
                    ]
                ]
            ]))
        #expect(unknown.message.contains("names step 'nope'") && unknown.message.contains("names step 'gone'"))
        let cycle = try #require(
            parse([
                "plan": [
                    "steps": [
                        ["id": "a", "ask": ["role": "critic", "message": ["$ref": "b.reply"]]],
                        ["id": "b", "ask": ["role": "writer", "message": ["$ref": "a.reply"]]],
                        ["id": "c", "skill": "echo", "params": ["text": ["$ref": "b.reply"]]],
                    ]
                ]
            ]))
        #expect(cycle.message.contains("steps a, b, c form a cycle"), "\(cycle.message)")
        let ask = try #require(parse(["ask": ["role": "critic", "message": ["$ref": "x.reply"]]]))
        #expect(ask.message.contains("a round of one ask has none"))
        let both = try #require(parse(["asks": ["agents": ["a"], "role": "critic", "message": "x"]]))
        #expect(both.message.contains("not both"))
    }

    @Test("agents and roles are checked against the registry before anything runs, all of them at once")
    func registryChecks() throws {
        var state = bus()
        let body: JSONValue = [
            "plan": [
                "steps": [
                    ["id": "a", "ask": ["role": "poet", "message": "x"]],
                    ["id": "b", "ask": ["agent": "ghost", "message": "x"]],
                    ["id": "c", "ask": ["role": "critic", "message": "x"]],
                ]
            ]
        ]
        let actions = state.handleRound(round(body), from: client, now: 0)
        #expect(turns(actions).isEmpty)
        let error = try #require(document(actions)?["error"])
        #expect(error["code"] == "unknown_agent")
        let message = error["message"]?.stringValue ?? ""
        #expect(message.contains("plan step 'a'") && message.contains("'poet'") && message.contains("'ghost'"))
        #expect(!message.contains("plan step 'c'"))
        let noPlanner = state.handleRound(round(["asks": ["agents": ["plain", "writer"], "message": "x"]]), from: client, now: 0)
        #expect(turns(noPlanner).isEmpty && document(noPlanner)?["error"]?["code"] == "unsupported")
    }

    @Test("a writer → critic → writer plan: each ask a turn of the round, its message made of earlier replies")
    func pipeline() throws {
        var state = bus()
        let body: JSONValue = [
            "plan": [
                "steps": [
                    ["id": "draft", "ask": ["role": "writer", "message": "draft it"]],
                    ["id": "critique", "ask": ["role": "critic", "message": ["critique ", ["$ref": "draft.reply"]]]],
                    [
                        "id": "revise",
                        "ask": [
                            "role": "writer",
                            "message": ["revise ", ["$ref": "draft.reply"], " after ", ["$ref": "critique.reply"]],
                        ],
                    ],
                ]
            ]
        ]
        var sent = turns(state.handleRound(round(body), from: client, now: 0))
        #expect(sent.map(\.agent) == ["writer"])
        let draft = try #require(sent.first)
        // The round's id and session; it holds the round: a round of asks alone, nothing ran in it (§3.5.10).
        #expect(draft.turn.roundID == "R" && draft.turn.sessionID == "s1" && draft.turn.leased)
        #expect(draft.turn.message == "draft it" && draft.turn.team == nil)
        sent = turns(reply(&state, draft, "Draft."))
        #expect(sent.map(\.agent) == ["critic"] && sent.first?.turn.message == "critique Draft.")
        let critique = try #require(sent.first)
        sent = turns(reply(&state, critique, "Too short."))
        #expect(sent.map(\.agent) == ["writer"] && sent.first?.turn.message == "revise Draft. after Too short.")
        let revise = try #require(sent.first)
        let done = try #require(document(reply(&state, revise, "A longer draft.")))
        #expect(done["status"] == "ok" && done["shape"] == "plan")
        #expect(done["result"]?["revise"]?["text"] == "A longer draft.")
        let invocations = done["invocations"]?.arrayValue ?? []
        #expect(invocations.map { $0["agent"]?.stringValue ?? "" } == ["writer", "critic", "writer"])
        #expect(invocations.allSatisfy { $0["skill"] == "" && $0["turn"]?["reply"] != nil })
        #expect(invocations[1]["ask"] == ["to": "role:critic", "message": "critique Draft."])
        // The document reads back through its own type.
        #expect(try RoundDocument(json: done).invocations[2].turn?["reply"] == "A longer draft.")
    }

    @Test("asks majority compares replies trimmed and lower-cased; the winner's reply is the result")
    func majorityOfReplies() throws {
        var state = bus()
        let body: JSONValue = ["asks": ["agents": ["writer", "critic", "lead"], "message": "yes?", "aggregate": "majority"]]
        let sent = turns(state.handleRound(round(body), from: client, now: 0))
        #expect(sent.map(\.agent) == ["writer", "critic", "lead"])
        _ = reply(&state, sent[0], "Yes")
        _ = reply(&state, sent[1], "no")
        let done = try #require(document(reply(&state, sent[2], "  yes\n")))
        #expect(done["status"] == "ok" && done["result"] == ["type": "text", "text": "Yes"])
        #expect(done["aggregate"]?["votes"] == 2 && done["aggregate"]?["of"] == 3)
        #expect(done["aggregate"]?["split"]?.arrayValue?.first?["agents"] == ["writer", "lead"])
    }

    @Test("asks first: the first reply wins, the other turns get CANCEL, and their late ends change nothing")
    func firstReplyWins() throws {
        var state = bus()
        let sent = turns(
            state.handleRound(round(["asks": ["role": "writer", "message": "x", "aggregate": "first"]]), from: client, now: 0)
                + state.handleRound(round(["asks": ["message": "go", "aggregate": "first"]], id: "R2"), from: client, now: 0))
        #expect(sent.map(\.agent) == ["writer", "critic", "lead", "writer"])
        let second = Array(sent.dropFirst())
        let won = reply(&state, second[1], "me first")
        #expect(Set(cancels(won)) == [second[0].turn.turnID, second[2].turn.turnID])
        let done = try #require(document(won))
        #expect(done["status"] == "ok" && done["agent"] == "lead")
        let statuses = (done["invocations"]?.arrayValue ?? []).map { $0["status"]?.stringValue ?? "" }
        #expect(statuses == ["cancelled", "ok", "cancelled"])
        #expect(document(reply(&state, second[0], "late")) == nil)
    }

    @Test("a cancelled round stops its turns; a lost agent and the deadline end an ask as errors")
    func endsThatAreNoReply() throws {
        var state = bus()
        let cancelled = turns(state.handleRound(round(["ask": ["agent": "writer", "message": "x"]]), from: client, now: 0))
        let stop = state.handleCancel(requestID: "q", from: client, now: 1)
        let only = try #require(cancelled.first)
        #expect(cancels(stop) == [only.turn.turnID])
        #expect(document(stop)?["invocations"]?.arrayValue?.first?["status"] == "cancelled")

        let lost = turns(state.handleRound(round(["asks": ["agents": ["critic", "lead"], "message": "x"]], id: "L"), from: client, now: 0))
        _ = reply(&state, lost[1], "fine")
        let gone = try #require(document(state.handleWorker(.disconnect, from: peer("critic"), now: 2)))
        #expect(gone["invocations"]?.arrayValue?.first?["error"]?["code"] == "agent_lost" && gone["status"] == "error")

        let slow = turns(state.handleRound(round(["ask": ["role": "writer", "message": "x"]], id: "T", timeoutMs: 50), from: client, now: 0))
        #expect(slow.count == 1)
        let late = try #require(document(state.tick(now: 60 * Self.ms)))
        #expect(late["error"]?["code"] == "timeout" && late["agent"] == "writer")
    }

    @Test("CANCEL with the round id stops every running ask's turn, and counts them")
    func cancelByRoundID() throws {
        var state = bus()
        let sent = turns(state.handleRound(round(["asks": ["agents": ["critic", "lead"], "message": "x"]]), from: client, now: 0))
        let actions = state.handleCancelRound(requestID: "c", roundID: "R", from: [0xC2], now: 1)
        #expect(Set(cancels(actions)) == Set(sent.map(\.turn.turnID)))
        let summary = actions.lazy.compactMap { action -> JSONValue? in
            if case .toClient(_, .cancelled(_, let summary)) = action { return summary }
            return nil
        }.first
        #expect(summary?["turns"] == 2 && summary?["rounds"] == 1)
        #expect(document(actions)?["error"]?["code"] == "cancelled")
    }

    @Test("two agents' identical calls in one team round run once")
    func callsOfTwoAgentsRunOnce() throws {
        var state = bus()
        let sent = turns(state.handleRound(round(["asks": ["agents": ["critic", "lead"], "message": "x"]]), from: client, now: 0))
        #expect(sent.count == 2)
        // The first turn holds the round; its agent gives it back before its call goes through the bus.
        #expect(sent.map(\.turn.leased) == [true, false])
        _ = state.handleWorker(.release(turnID: sent[0].turn.turnID), from: peer(sent[0].agent), now: 1)
        // Each agent's call comes as a REQUEST of the round from that agent's own client connection.
        let call = { (id: String) in
            InvokeRequest(requestID: id, roundID: "R", skill: "echo", parameters: Array(#"{"text":"hi"}"#.utf8))
        }
        let first = state.handleInvoke(call("c1"), from: [0xD1], now: 1)
        let second = state.handleInvoke(call("c2"), from: [0xD2], now: 1)
        let invokes = (first + second).filter { if case .toWorker(_, .invoke) = $0 { true } else { false } }
        #expect(invokes.count == 1)
        guard case .toWorker(let worker, .invoke(let invocation)) = invokes.first else { return }
        _ = state.handleWorker(
            .result(invocationID: invocation.invocationID, status: .ok, payload: Array(#"{"text":"hi","type":"text"}"#.utf8)),
            from: worker, now: 2)
        _ = reply(&state, sent[0], "hi")
        let done = try #require(document(reply(&state, sent[1], "hi")))
        let subCalls = (done["invocations"]?.arrayValue ?? []).filter { $0["id"]?.stringValue?.hasPrefix("sub-") == true }
        #expect(subCalls.map { $0["deduplicated"] } == [false, true])
        #expect(subCalls.last?["reusedFrom"] == "sub-1")
        #expect(done["summary"]?["deduplicated"] == 1)
    }

    @Test("a team round is journaled as not idempotent: a restart never runs its turns again")
    func journaledNotIdempotent() {
        var settings = CoordinatorState.Settings()
        settings.journaled = true
        var state = bus(settings: settings)
        let actions = state.handleRound(round(["ask": ["role": "critic", "message": "x"]]), from: client, now: 0)
        let accepts = actions.compactMap { action -> Bool? in
            if case .journal(.accept(_, _, let idempotent)) = action { return idempotent }
            return nil
        }
        #expect(accepts == [false])
    }
}
