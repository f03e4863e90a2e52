import Foundation
import Testing

@testable import Skillbus

/// Each document has one type with one encoder and one decoder; what one side writes the other reads.
@Suite("Documents: one type each, both ways")
struct DocumentTests {
    @Test("a round document survives its JSON form, the refusal too, and names what is wrong in a bad one")
    func roundDocument() throws {
        var document = RoundDocument(
            round: "r1", shape: "fanout", status: .error, result: .null,
            error: SkillbusError(.noMajority, "split", details: ["split": []]), durationMs: 1.5,
            invocations: [
                .init(
                    id: "alpha", skill: "echo", agent: "alpha", status: .ok, durationMs: 0.25, result: ["type": "text", "text": "a"],
                    attempts: [
                        .init(agent: "gamma", status: .error, durationMs: 0.125, error: SkillbusError(.agentLost, "gone")),
                        .init(agent: "alpha", status: .ok, durationMs: 0.05),
                    ]),
                .init(id: "beta", skill: "echo", agent: nil, status: .running),
                .init(id: "sub-1", skill: "echo", agent: "beta", status: .cancelled, deduplicated: true, reusedFrom: "alpha",
                      error: SkillbusError(.cancelled, "another agent answered first")),
            ])
        document.vote = RoundDocument.Vote(of: 3, votes: nil, split: [.init(result: ["type": "text", "text": "a"], agents: ["alpha"])])
        document.summary = RoundDocument.Summary(document.invocations, totalMs: 1.5)
        #expect(document.summary.executions == 1 && document.summary.deduplicated == 1 && document.summary.failed == 0)
        let json = document.json
        #expect(json["invocations"]?.arrayValue?[1]["status"] == "pending")
        #expect(json["invocations"]?.arrayValue?[0]["attempts"]?.arrayValue?.count == 2)
        #expect(json["invocations"]?.arrayValue?[1]["attempts"] == nil)  // only for an invocation that was retried
        #expect(json["agent"] == nil)
        #expect(try RoundDocument(parsing: json.serialized()) == document)

        let refusal = RoundDocument.refusal(round: "r2", shape: nil, SkillbusError(.invalidRound, "no"))
        #expect(try RoundDocument(json: refusal.json) == refusal)
        #expect(refusal.json["summary"] == ["invocations": 0, "executions": 0, "deduplicated": 0, "failed": 0, "totalMs": 0])

        var broken = json.objectValue ?? [:]
        broken["invocations"] = [["id": "x", "skill": "echo", "status": "weird"]]
        #expect(throws: SkillbusError.self) { try RoundDocument(json: .object(broken)) }
        do {
            _ = try RoundDocument(json: ["status": "ok"])
            Issue.record("a document without invocations was accepted")
        } catch {
            #expect(error.code == .malformedMessage && error.message.contains("'invocations'"))
        }
    }

    @Test("WELCOME and READY: what the bus writes the worker reads, and a bad registration names the field")
    func workerBodies() throws {
        let welcome = Welcome(
            heartbeatMs: 500, accepted: ["echo"], refused: [SkillbusError(.schemaConflict, "no")], feed: "tcp://x:1",
            epoch: "e")
        #expect(try Welcome(json: welcome.json) == welcome)
        #expect(throws: SkillbusError.self) { try Welcome(json: ["heartbeatMs": 500]) }

        let descriptor = SkillDescriptor(identifier: "echo", displayName: "Echo", description: "", parameters: .init([]))
        let registration = Registration(name: "alpha", capacity: 2, heartbeatMs: 250, skills: [descriptor])
        let (decoded, offers) = try Registration.decode(registration.json)
        #expect(decoded == registration && offers == [.parsed(descriptor)])
        let (_, mixed) = try Registration.decode(["name": "a", "capacity": 1, "skills": [["identifier": "bad id"], ["identifier": "ok"]]])
        #expect(mixed.count == 2 && mixed[1].descriptor?.identifier == "ok")
        if case .invalid(let error) = mixed[0] { #expect(error.code == .invalidRegistration) } else { Issue.record("bad id parsed") }
        for (body, field) in [
            (["name": "a b", "capacity": 1, "skills": []] as JSONValue, "name"),
            (["name": "a", "capacity": 0, "skills": []], "'capacity'"),
            (["name": "a", "capacity": 1, "heartbeatMs": 5, "skills": []], "'heartbeatMs'"),
            (["name": "a", "capacity": 1, "skills": "echo"], "'skills'"),
        ] {
            do {
                _ = try Registration.decode(body)
                Issue.record("accepted \(body.jsonString)")
            } catch {
                #expect(error.code == .invalidRegistration && error.message.contains(field))
            }
        }
    }

    @Test(
        "an ok payload that is no result form is named for what is wrong",
        arguments: [
            ("not json", "not JSON"),
            (#"[1]"#, "a JSON object is expected"),
            (#"{"text":"x"}"#, "'type' is missing"),
            (#"{"type":"picture"}"#, "unknown type 'picture'"),
            (#"{"type":"text","text":5}"#, "'text', a string"),
            (#"{"type":"json"}"#, "'json'"),
            (#"{"type":"attachment","name":"a","mediaType":"t","base64":"%%"}"#, "'base64'"),
        ])
    func resultProblems(payload: String, problem: String) {
        #expect(SkillResult.problem(in: Array(payload.utf8))?.contains(problem) == true)
    }

    @Test("every result form passes the check")
    func resultForms() {
        for form in [SkillResult.text("hi"), .json(["a": 1]), .attachment(.init(name: "a", mediaType: "t", bytes: [1, 2]))] {
            #expect(SkillResult.problem(in: form.serialized()) == nil)
        }
    }
}

extension DocumentTests {
    static let everyEvent: [FeedEvent] = [
        .agentJoined(agent: "alpha", skills: ["echo"], capacity: 2), .agentLeft(agent: "alpha", reason: "gone"),
        .agentState(agent: "alpha", state: .executingSkill("echo")), .agentState(agent: "a", state: .failed("x")),
        .registrationRefused(agent: "beta", error: SkillbusError(.nameTaken, "taken")),
        .agentStorage(agent: "alpha", problem: SkillbusError(.storageUnavailable, "full")),
        .agentStorage(agent: "alpha", problem: nil),
        .turnState(agent: "alpha", state: .thinking, turn: TurnRef(session: "s", turn: "t1")),
        .turnStream(agent: "alpha", turn: "t1", text: "a piece"),
        .turnState(
            agent: "alpha", state: .executingSkill("echo"), turn: TurnRef(session: "", turn: "t1", parameters: ["a": 1])),
        .turnCall(
            agent: "alpha", turn: TurnRef(session: "s", turn: "t1"),
            call: TurnCall(skill: "echo", parameters: ["text": "hi"], agent: "beta", durationMs: 1.5, outcome: .success(.text("hi")))),
        .turnCall(
            agent: "alpha", turn: TurnRef(session: "", turn: "t2"),
            call: TurnCall(
                skill: "x", parameters: [:], agent: "", durationMs: 0, outcome: .failure(SkillbusError(.unknownSkill, "no")))),
        .confirmationPending(round: "r", confirmation: "c1", skill: "file.write", parameters: ["path": "a"]),
        .confirmationDone(confirmation: "c1", approved: true),
        .requestQueued(round: "r", request: "q", skill: "echo", waiting: 3, waitingFor: "rateLimit"),
        .requestDispatched(round: "r", request: "q", skill: "echo", agent: "alpha", invocation: "i1"),
        .requestDeduplicated(round: "r", request: "q", skill: "echo", finished: true),
        .requestDone(
            round: "r", request: "q", skill: "echo", agent: "alpha", status: .error, durationMicros: 1234,
            payload: SkillbusError(.timeout, "late").json.serialized()),
        .requestDone(round: "r", request: "q", skill: "echo", agent: "alpha", status: .ok, durationMicros: 5, payload: []),
        .roundAccepted(round: "r", shape: "plan", invocations: ["a", "b"]),
        .invocationDispatched(round: "r", invocation: "a", skill: "echo", agent: "alpha", dispatch: "i2"),
        .invocationDeduplicated(round: "r", invocation: "b", reusing: "a"),
        .requestCached(round: "r", request: "q", skill: "echo", agent: "alpha"),
        .invocationCached(round: "r", invocation: "a", skill: "echo", agent: "alpha"),
        .invocationDone(
            round: "r", invocation: "b", skill: "echo", agent: "", status: .skipped, durationMicros: 0,
            deduplicated: false),
        .invocationCancelled(round: "r", invocation: "b", agent: "beta", reason: "lost race"),
        .requestCancelled(round: "r", request: "q", skill: "sleep", agent: "alpha", reason: "client"),
        .cancelIgnored(round: "r", request: "q", skill: "sleep", agent: "alpha", invocation: "i3", waitedMs: 2001),
        .requestRetrying(
            round: "r", request: "q", skill: "echo", agent: "alpha", attempt: 1,
            error: SkillbusError(.agentLost, "gone"), backoffMicros: 104_250),
        .invocationRetrying(
            round: "r", invocation: "a", skill: "echo", agent: "", attempt: 2,
            error: SkillbusError(.timeout, "late", details: ["reason": "deadline"]), backoffMicros: 200_000),
        .invocationOutput(
            round: "r", skill: "text.lines", agent: "alpha", dispatch: "i3",
            OutputBatch(first: 4, parts: [.text("line"), .json(["n": 1])])),
        .roundDone(round: "r", status: .ok, summary: RoundDocument.Summary()),
        .registryUpdate(
            RegistryUpdate(
                epoch: "e", sequence: 4, agent: "alpha", entry: Registry.Agent(name: "alpha", capacity: 1, skills: []),
                provided: [], withdrawn: ["echo"], reason: "skills changed")),
        .registryHeartbeat(epoch: "e", sequence: 4, intervalMs: 1000),
        .securityRefused(socket: "bus", address: "10.0.0.9", key: "rq:rM>}U?@Lns47E1%kR.o@n%FcmmsL/@{H8]yf7", reason: "unknown key", refused: 3),
        .limitRefused(socket: "feed", limit: "maxSubscriptionBytes", reason: "subscription of 300 bytes", refused: 2),
    ]

    @Test("every feed event reads back as the event that was published")
    func feedEvents() throws {
        for event in Self.everyEvent {
            #expect(try FeedEvent(message: event.encoded()) == event, "\(event.topic)")
        }
        #expect(Set(Self.everyEvent.map(\.topic)).count == 30)
    }

    @Test("timestamps: ISO 8601 UTC with milliseconds, past year 9999 and before 1970 too")
    func timestamps() {
        #expect(FeedEvent.timestamp(milliseconds: 0) == "1970-01-01T00:00:00.000Z")
        #expect(FeedEvent.timestamp(milliseconds: 1_000_005) == "1970-01-01T00:16:40.005Z")
        #expect(FeedEvent.timestamp(milliseconds: 1_764_417_600_123) == "2025-11-29T12:00:00.123Z")
        #expect(FeedEvent.timestamp(milliseconds: 253_402_300_799_999) == "9999-12-31T23:59:59.999Z")
        #expect(FeedEvent.timestamp(milliseconds: 253_402_300_800_000) == "10000-01-01T00:00:00.000Z")
        #expect(FeedEvent.timestamp(Date(timeIntervalSince1970: 1_764_417_600.5)) == "2025-11-29T12:00:00.500Z")
    }

    @Test("a feed message that is not an event is refused with what is wrong")
    func badFeedEvents() {
        let cases: [([[UInt8]], String)] = [
            ([Array("agent.left".utf8)], "2 frames"),
            ([Array("agent.left".utf8), Array("{".utf8)], "body"),
            ([Array("agent.dance".utf8), Array("{}".utf8)], "unknown feed topic"),
            ([Array("agent.left".utf8), Array(#"{"agent":"a"}"#.utf8)], "'reason'"),
            ([Array("registry.heartbeat".utf8), Array(#"{"epoch":"e","seq":-1,"heartbeatMs":1}"#.utf8)], "'seq'"),
        ]
        for (message, problem) in cases {
            do {
                _ = try FeedEvent(message: message)
                Issue.record("accepted \(message)")
            } catch {
                #expect(error.code == .malformedMessage && error.message.contains(problem), "\(error)")
            }
        }
    }
}

extension DocumentTests {
    @Test("the bus's quick check of a text result agrees with the full reader, on every kind of string")
    func quickTextCheck() {
        let pieces = ["a", "é", "\\\"", "\\\\", "\\n", "\\u0041", "\\ud800", "\"", "\\", "\\x", "\u{01}", "日本", " "]
        var generator = SystemRandomNumberGenerator()
        var texts = pieces.map { [$0] }
        for _ in 0..<3000 { texts.append((0..<Int.random(in: 0...6, using: &generator)).map { _ in pieces.randomElement()! }) }
        for parts in texts {
            let payload = Array(#"{"text":""#.utf8) + Array(parts.joined().utf8) + Array(#"","type":"text"}"#.utf8)
            let full = (try? JSONValue(parsing: payload)).flatMap { try? SkillResult(json: $0) }
            // Quick says yes only where the full reader does; the full check itself is the same answer either way.
            if SkillResult.isWellFormedText(payload) { #expect(full != nil, "\(parts)") }
            #expect((SkillResult.problem(in: payload) == nil) == (full != nil), "\(parts)")
        }
        #expect(SkillResult.isWellFormedText(SkillResult.text("plain \"quoted\" \\ text\n日本").serialized()))
        #expect(!SkillResult.isWellFormedText(Array([0x7B, 0x22, 0x74, 0x65, 0x78, 0x74, 0x22, 0x3A, 0x22, 0xFF] + Array(#"","type":"text"}"#.utf8))))
    }
}
