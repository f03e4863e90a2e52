import SkillbusZMQ
import Testing

@testable import Skillbus

@Suite("Wire protocol v2 codec")
struct WireTests {
    static let request = InvokeRequest(
        requestID: "r-1", roundID: "round-1", sessionID: "s", skill: "echo", timeoutMs: 500,
        parameters: Array(#"{"text":"hi"}"#.utf8))

    @Test("client messages survive encode and decode")
    func clientRoundTrip() throws {
        for message in [
            ClientMessage.invoke(Self.request), .listSkills(requestID: "r-2"), .snapshot(requestID: "r-3"),
            .listAgents(requestID: "r-4"),
            .query(QueryRequest(requestID: "r-5", agent: "alpha", timeoutMs: 500, query: .memory(.session("s")))),
            .query(QueryRequest(requestID: "r-6", agent: "", query: .history(session: "s"))),
            .query(QueryRequest(requestID: "r-7", agent: "beta", query: .memory(.agent))),
            .query(QueryRequest(requestID: "r-8", agent: "beta", query: .sessions)),
            .query(QueryRequest(requestID: "r-9", agent: "", query: .roster(session: nil, limit: 100))),
            .query(QueryRequest(requestID: "r-10", agent: "", timeoutMs: 50, query: .roster(session: "s", limit: 1))),
            .ask(AskRequest(requestID: "r-9", roundID: "t", sessionID: "s", agent: "", timeoutMs: 900, message: "hi")),
            .ask(AskRequest(requestID: "r-10", roundID: "t", agent: "alpha", message: "what is 6*7")),
            .ask(AskRequest(requestID: "r-11", roundID: "t", message: "follow me", progress: true)),
            .cancel(requestID: "r-10"), .cancelRound(requestID: "r-11", roundID: "3f0c"),
            .approve(confirmationID: "c1", approved: true),
            .approve(confirmationID: "c2", approved: false),
        ] {
            let frames = message.encoded()
            #expect(frames[0].starts(with: Array("SKB2C".utf8)))
            #expect(try ClientMessage.decode(frames) == message)
        }
        var noTimeout = Self.request
        noTimeout.timeoutMs = nil
        #expect(try ClientMessage.decode(ClientMessage.invoke(noTimeout).encoded()) == .invoke(noTimeout))
    }

    @Test("the bus relays a turn's answer as it came, and the client reads it as the TURN it is")
    func relayedTurn() throws {
        let answer = AgentAnswer.ok(["reply": "42", "calls": []])
        let relayed = BusToClientMessage.relayedTurn(requestID: "r", agent: "alpha", RelayedAnswer(answer))
        #expect(relayed.encoded() == BusToClientMessage.turn(requestID: "r", agent: "alpha", answer).encoded())
        #expect(try BusToClientMessage.decode(relayed.encoded()) == .turn(requestID: "r", agent: "alpha", answer))
        // A TURNEND whose answer frame is empty is refused, naming the frame.
        let empty: Multipart = [Array("SKB2W".utf8), Array("TURNEND".utf8), Array("t1".utf8), Array("ok".utf8), []]
        #expect(throws: SkillbusError.self) { try WorkerMessage.decode(fields: empty) }
    }

    @Test("bus-to-client messages survive encode and decode")
    func busToClientRoundTrip() throws {
        let messages: [BusToClientMessage] = [
            .answer(requestID: "r", agent: "alpha", .ok(["sessions": []])),
            .turn(requestID: "r", agent: "alpha", .ok(["reply": "42"])),
            .turn(requestID: "r", agent: "", .error(SkillbusError(.unknownAgent, "none"))),
            .stream(requestID: "r", text: "a piece "),
            .progress(requestID: "r", agent: "alpha", .state(.thinking, parameters: nil)),
            .progress(requestID: "r", agent: "alpha", .state(.executingSkill("echo"), parameters: ["text": "hi"])),
            .progress(
                requestID: "r", agent: "alpha",
                .call(TurnCall(skill: "echo", parameters: [:], agent: "b", durationMs: 2, outcome: .success(.text("x"))))),
            .cancelled(requestID: "r", summary: ["round": "x", "requests": 1, "rounds": 0, "turns": 0, "stopped": 1]),
            .confirm(requestID: "r", confirmationID: "c1", skill: "file.write", parameters: Array(#"{"path":"a"}"#.utf8)),
            .answer(requestID: "r", agent: "", .error(SkillbusError(.unknownSession, "no such session"))),
            .reply(
                InvokeReply(
                    requestID: "r", roundID: "x", status: .ok, agent: "alpha", durationMicros: 1234,
                    payload: Array(#"{"type":"text","text":"hi"}"#.utf8))),
            .skills(
                requestID: "r",
                catalog: SkillCatalog(
                    registry: Registry(agents: [
                        Registry.Agent(
                            name: "alpha", capacity: 2,
                            skills: [
                                SkillDescriptor(
                                    identifier: "echo", displayName: "Echo", description: "",
                                    parameters: ParameterSchema([ParameterField("text", .string)]))
                            ])
                    ]), provider: { SkillCatalog.Provider(agent: $0, capacity: 2, inFlight: 1) })),
            .error(requestID: "", SkillbusError(.malformedMessage, "bad", details: ["frame": 3])),
            .entry(requestID: "s", entry: Array(#"{"agent":"alpha","capacity":1,"skills":[]}"#.utf8)),
            .snapshot(requestID: "s", summary: ["epoch": "e", "seq": 3, "agents": 1]),
            .agents(requestID: "a", listing: ["agents": []]),
            .output(requestID: Array("r".utf8), invocation: "", OutputBatch(first: 0, parts: [.text("3")])),
            .output(
                requestID: Array("r".utf8), invocation: "step-1",
                OutputBatch(first: 7, parts: [.text("two\nlines \"quoted\""), .json(["done": 0.5])])),
        ]
        for message in messages { #expect(try BusToClientMessage.decode(message.encoded()) == message) }
    }

    @Test("worker messages survive encode and decode")
    func workerRoundTrip() throws {
        let messages: [WorkerMessage] = [
            .ready(["name": "alpha", "capacity": 2, "skills": []]),
            .result(invocationID: "i1", status: .error, payload: Array("{}".utf8)),
            .state(.executingSkill("echo")), .state(.failed("boom")), .state(.idle),
            .heartbeat(intervalMs: nil, registry: nil),
            .heartbeat(intervalMs: 250, registry: RegistryPosition(epoch: "e1", sequence: 7, digest: "00ff")),
            .heartbeat(intervalMs: nil, registry: RegistryPosition(epoch: "e1", sequence: 0, digest: "")),
            .skills([["identifier": "echo"]]), .disconnect,
            .answer(queryID: "q1", .ok(["memory": []])),
            .answer(queryID: "q2", .error(SkillbusError(.unsupported, "no store"))),
            .context(AgentContextStatus(sessions: 2)),
            .turnState(.executingSkill("echo"), TurnRef(session: "s", turn: "t1")),
            .turnEnd(turnID: "t1", .ok(["reply": "hi"])),
            .stream(turnID: "t1", text: "piece"),
            .turnState(.executingSkill("echo"), TurnRef(session: "", turn: "t1", parameters: ["text": "hi"])),
            .step(
                turnID: "t1",
                TurnCall(
                    skill: "echo", parameters: ["text": "hi"], agent: "alpha", durationMs: 0.25,
                    outcome: .failure(SkillbusError(.timeout, "late")))),
            .output(invocationID: "i9", OutputBatch(first: 2, parts: [.text("a"), .json([1, "b"]), .text("")])),
            .context(AgentContextStatus(sessions: 0, storageProblem: SkillbusError(.storageUnavailable, "full"))),
        ]
        for message in messages { #expect(try WorkerMessage.decode(message.encoded()) == message) }
        let toWorker: [BusToWorkerMessage] = [
            .welcome(
                Welcome(
                    heartbeatMs: 1000, accepted: ["echo"], refused: [SkillbusError(.schemaConflict, "taken")],
                    feed: "tcp://127.0.0.1:5556", epoch: "e1")),
            .invoke(
                Invocation(
                    invocationID: "i1", roundID: "r", sessionID: "", skill: "echo", deadlineMs: 99,
                    parameters: Array("{}".utf8))),
            .cancel(invocationID: "i1"), .heartbeat(intervalMs: nil), .heartbeat(intervalMs: 1000),
            .error(SkillbusError(.notRegistered, "send READY")),
            .query(queryID: "q1", .history(session: "s")),
            .turn(TurnRequest(turnID: "t1", roundID: "r", sessionID: "", deadlineMs: 500, message: "say hi")),
        ]
        for message in toWorker { #expect(try BusToWorkerMessage.decode(message.encoded()) == message) }
    }

    @Test(
        "malformed messages are refused with the field that is wrong",
        arguments: [
            ([["SKB2C"], ["REQUEST"]].map(bytes), "REQUEST takes 8 fields, got 2"),
            ([["SKB2C"]].map(bytes), "missing field 1 (command)"),
            ([["SKB2C"], ["PING"]].map(bytes), "unknown client command 'PING'"),
            (
                [["SKB2C"], ["REQUEST"], ["r"], ["round"], [""], [""], [""], ["{}"]].map(bytes),
                "field 5 (skill) is empty"
            ),
            (
                [["SKB2C"], ["REQUEST"], ["r"], ["round"], [""], ["echo"], ["-5"], ["{}"]].map(bytes),
                "field 6 (timeout)"
            ),
            ([["SKB2C"], ["SKILLS"], ["a"], ["b"]].map(bytes), "SKILLS takes 3 fields, got 4"),
            // A timeout that would overflow the clock, a signed one, and zero.
            (
                [["SKB2C"], ["REQUEST"], ["r"], ["round"], [""], ["echo"], ["99999999999999"], ["{}"]].map(bytes),
                "from 0 to 86400000"
            ),
            ([["SKB2C"], ["REQUEST"], ["r"], ["round"], [""], ["echo"], ["+5"], ["{}"]].map(bytes), "decimal integer"),
            (
                [["SKB2C"], ["REQUEST"], ["r"], ["round"], [""], ["echo"], ["0"], ["{}"]].map(bytes),
                "field 6 (timeout) must be at least 1"
            ),
            (
                [["SKB2C"], ["REQUEST"], ["r"], ["round"], [String(repeating: "s", count: 129)], ["echo"], [""], ["{}"]]
                    .map(bytes), "field 4 (session id) has 129 bytes; at most 128"
            ),
            (
                [["SKB2C"], ["ROUND"], ["r"], ["round"], [String(repeating: "s", count: 200)], [""], ["{}"]].map(bytes),
                "field 4 (session id) has 200 bytes"
            ),
            ([["SKB2C"], ["QUERY"], ["r"], ["alpha"], [""], [#"{"query":"gossip"}"#]].map(bytes), "'query' must be sessions"),
            ([["SKB2C"], ["QUERY"], ["r"], ["alpha"], [""], [#"{"query":"history"}"#]].map(bytes), "'session' is missing"),
            ([["SKB2C"], ["QUERY"], ["r"], ["alpha"], [""], [#"{"query":"roster"}"#]].map(bytes), "field 3 (agent) must be empty"),
            ([["SKB2C"], ["QUERY"], ["r"], [""], [""], [#"{"query":"roster","limit":1001}"#]].map(bytes), "'limit' must be 1 to 1000"),
            ([["SKB2C"], ["QUERY"], ["r"], [""], [""], [#"{"query":"roster","limit":"all"}"#]].map(bytes), "'limit' must be an integer"),
            ([["SKB2C"], ["QUERY"], ["r"], [""], [""], [#"{"query":"roster","session":""}"#]].map(bytes), "'session' must have 1 to 128"),
        ])
    func malformedClient(frames: Multipart, reason: String) {
        #expect {
            try ClientMessage.decode(fields: frames)
        } throws: { error in
            guard let error = error as? SkillbusError else { return false }
            return error.code == .malformedMessage && error.message.contains(reason)
        }
    }

    @Test("non-UTF-8 text frames and bad worker fields are refused")
    func malformedWorker() {
        #expect(throws: SkillbusError.self) {
            try ClientMessage.decode(fields: [Array("SKB2C".utf8), [0xFF, 0xFE], [], [], [], [], [], []])
        }
        #expect(throws: SkillbusError.self) {
            try WorkerMessage.decode(fields: [
                Array("SKB2W".utf8), Array("RESULT".utf8), Array("i".utf8), Array("maybe".utf8), [],
            ])
        }
        #expect(throws: SkillbusError.self) {
            try WorkerMessage.decode(fields: [Array("SKB2W".utf8), Array("STATE".utf8), Array(#"{"state":"dancing"}"#.utf8)])
        }
        // A heartbeat's interval is a decimal from 10 ms to an hour; its registry position is a JSON object.
        for frames in [["extra"], ["5"], ["4000000"], ["1000", "{}"], ["1000", "[]"], ["1000", "{}", "x"]] {
            #expect(throws: SkillbusError.self) {
                try WorkerMessage.decode(fields: 
                    [Array("SKB2W".utf8), Array("HEARTBEAT".utf8)] + frames.map { Array($0.utf8) })
            }
        }
        #expect(throws: SkillbusError.self) {
            try WorkerMessage.decode(fields: [Array("SKB2W".utf8), Array("SKILLS".utf8), Array("[".utf8)])
        }
    }

    @Test(
        "an OUTPUT needs a part count and a non-empty array of text or json parts",
        arguments: [
            (["i1", "x", #"[{"type":"text","text":"a"}]"#], "field 3 (first part)"),
            (["i1", "0", "[]"], "non-empty JSON array"),
            (["i1", "0", #"{"type":"text","text":"a"}"#], "non-empty JSON array"),
            (["i1", "0", #"[{"type":"text","text":1}]"#], "'text', a string"),
            (["i1", "0", #"[{"type":"picture"}]"#], "'type' text or json"),
            (["i1", "0", #"["a"]"#], "must be a JSON object"),
            (["i1", "0"], "OUTPUT takes 5 fields"),
        ])
    func malformedOutput(frames: [String], reason: String) {
        #expect {
            try WorkerMessage.decode(fields: [Array("SKB2W".utf8), Array("OUTPUT".utf8)] + frames.map { Array($0.utf8) })
        } throws: { error in
            guard let error = error as? SkillbusError else { return false }
            return error.code == .malformedMessage && error.message.contains(reason)
        }
    }

    @Test("the bus forwards an OUTPUT's parts frame byte for byte, as the worker wrote it")
    func outputForwardedUnchanged() throws {
        let frame = Array(#" [ {"type": "text", "text": "a b"} , {"json": {"z": 1, "a": 2}, "type": "json"} ] "#.utf8)
        let message = [Array("SKB2W".utf8), Array("OUTPUT".utf8), Array("i4".utf8), Array("3".utf8), frame]
        guard case .output(let id, let batch) = try WorkerMessage.decode(fields: message) else {
            Issue.record("not an OUTPUT")
            return
        }
        #expect(id == "i4" && batch.first == 3 && batch.parts == [.text("a b"), .json(["a": 2, "z": 1])])
        #expect(batch.byteCount == frame.count + 1)
        let forwarded = BusToClientMessage.output(requestID: Array("q".utf8), invocation: "", batch).encoded()
        #expect(forwarded.last == frame)
    }

    @Test("output parts: text is written as the general writer writes it")
    func outputParts() throws {
        for part in [OutputPart.text("say \"hi\"\n\u{1}é"), .json(["a": [1, 2]])] {
            #expect(part.serialized() == part.json.serialized())
            #expect(try OutputPart(json: part.json) == part)
        }
        let batch = OutputBatch(first: 0, parts: [.text("a"), .text("b")])
        #expect(batch.partsFrame == JSONValue.array(batch.parts.map(\.json)).serialized())
        #expect(batch.byteCount == batch.partsFrame.count + 1)
    }

    @Test("results have three JSON forms")
    func resultForms() throws {
        let results: [SkillResult] = [
            .text("hi"), .json(["a": [1, 2]]),
            .attachment(.init(name: "a.bin", mediaType: "application/octet-stream", bytes: [0, 1, 255])),
        ]
        for result in results {
            #expect(try SkillResult(json: result.json) == result)
            #expect(result.serialized() == result.json.serialized())
        }
        #expect(SkillResult.text("say \"hi\"\n").serialized() == SkillResult.text("say \"hi\"\n").json.serialized())
        #expect(throws: SkillbusError.self) { try SkillResult(json: ["type": "video"]) }
    }
}

private func bytes(_ frame: [String]) -> [UInt8] { Array(frame[0].utf8) }
