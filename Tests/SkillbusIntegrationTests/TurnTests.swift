import Foundation
import Skillbus
import SkillbusZMQ
import Synchronization
import Testing

/// The agent loop with real processes: ASK to an agent whose planner calls skills through the bus, every
/// state of the turn on the feed in order, and the turns that go wrong.
@Suite("Agent turns", .serialized, .timeLimit(.minutes(3)))
struct TurnTests {
    static let rules: JSONValue = [
        "rules": [
            [
                "intent": "what is (?<expression>[0-9][0-9+*/ ]*[0-9])", "skill": "math.eval",
                "params": ["expression": "{expression}"], "reply": "{expression} is {result.value}",
            ],
            ["intent": "say (?<word>\\w+)", "skill": "echo", "params": ["text": "{word}!"], "reply": "{result}"],
            ["intent": "nap", "skill": "sleep", "params": ["ms": 20_000], "reply": "rested"],
            // Fires with the one above it on "say twice": the same call twice in one turn.
            ["intent": "say (?<word>\\w+) twice", "skill": "echo", "params": ["text": "{word}!"], "reply": "{result}"],
        ]
    ]

    /// A coordinator, a worker with the rules planner and echo, and one with math.eval.
    func cluster() async throws -> TestCluster {
        let cluster = try await TestCluster()
        let config = NSTemporaryDirectory() + "skillbus-turn-\(UUID().uuidString.prefix(8)).json"
        try Data(
            JSONValue.object(["version": 1, "name": "thinker", "skills": ["echo"], "planner": Self.rules]).serialized()
        ).write(to: URL(fileURLWithPath: config))
        try await cluster.startWorker("thinker", ["--config", config])
        try? FileManager.default.removeItem(atPath: config)
        try await cluster.startWorker("calc", ["--skills", "math.eval,sleep"])
        return cluster
    }

    @Test("a two-skill turn: the reply, both calls, and every state on the feed in order")
    func twoSkillTurn() async throws {
        let cluster = try await cluster()
        defer { cluster.terminate() }
        let context = try ZMQContext()
        let feed = try await FeedSubscriber.connect(
            endpoint: cluster.feed, topics: ["agent.state", "registry.heartbeat"], context: context)
        defer { feed.close() }
        var events = feed.events.makeAsyncIterator()
        _ = try await events.next()  // the subscription is in place
        let client = try await SkillbusClient.connect(endpoint: cluster.bus, context: context)
        defer { client.close() }

        let followed = Mutex<[String]>([])
        let follow: @Sendable (String, TurnProgress) -> Void = { agent, progress in
            let line: String
            switch progress {
            case .state(let state, let parameters):
                line = "\(agent) \(state.name)" + (parameters.map { " " + $0.jsonString } ?? "")
            case .call(let call):
                let status = (try? call.outcome.get()) == nil ? "error" : "ok"
                line = "call \(call.skill) on \(call.agent) \(status)"
            case .nested: line = "nested"
            }
            followed.withLock { $0.append(line) }
        }
        let (agent, document) = try await client.ask(
            "what is 6*7 and say hello", sessionID: "s1", onProgress: follow)
        #expect(agent == "thinker" && document["status"] == "ok")
        // The client that asked followed the turn as it ran: states, and each call with who ran it.
        let expectedProgress: [String] = [
            "thinker thinking", "thinker selectingSkill", #"thinker executingSkill {"expression":"6*7"}"#,
            "call math.eval on calc ok", "thinker thinking", "thinker selectingSkill",
            #"thinker executingSkill {"text":"hello!"}"#, "call echo on thinker ok", "thinker thinking",
            "thinker streaming", "thinker completed",
        ]
        #expect(followed.withLock { $0 } == expectedProgress)
        #expect(document["reply"] == "6*7 is 42\nhello!")
        let calls = document["calls"]?.arrayValue ?? []
        #expect(calls.map { $0["skill"]?.stringValue ?? "" } == ["math.eval", "echo"])
        #expect(calls.allSatisfy { $0["status"] == "ok" })

        let expected = [
            "thinking", "selectingSkill", "executingSkill math.eval", "thinking", "selectingSkill",
            "executingSkill echo", "thinking", "streaming", "completed",
        ]
        var seen: [String] = []
        while seen.count < expected.count, let event = try await events.next() {
            guard event.topic == "agent.state", event.event["turn"] == document["turn"] else { continue }
            #expect(event.event["agent"] == "thinker" && event.event["session"] == "s1")
            let state = event.event["state"]?.stringValue ?? "?"
            seen.append(event.event["skill"]?.stringValue.map { "\(state) \($0)" } ?? state)
        }
        #expect(seen == expected)
        #expect((document["states"]?.arrayValue ?? []).compactMap { $0["state"]?.stringValue }.count == expected.count)

        // The session went to the agent's history: the user's message and the reply.
        let (_, history) = try await client.query(.history(session: "s1"), agent: "thinker")
        let roles = (history["messages"]?.arrayValue ?? []).compactMap { $0["role"]?.stringValue }
        #expect(roles.first == "user" && roles.last == "agent")
    }

    @Test("a call of a skill the agent offers runs on it with no pass through the bus, once per turn, and counts in the round")
    func callRunsOnTheAgent() async throws {
        let cluster = try await cluster()
        defer { cluster.terminate() }
        let context = try ZMQContext()
        let feed = try await FeedSubscriber.connect(
            endpoint: cluster.feed, topics: ["request.", "registry.heartbeat"], context: context)
        defer { feed.close() }
        var events = feed.events.makeAsyncIterator()
        _ = try await events.next()  // the subscription is in place
        let client = try await SkillbusClient.connect(endpoint: cluster.bus, context: context)
        defer { client.close() }

        let (_, document) = try await client.ask("say hi twice", agent: "thinker")
        #expect(document["reply"] == "hi!\nhi!")
        #expect(document["calls"]?.arrayValue?.count == 2)
        let round = try #require(document["round"]?.stringValue)
        // The same call in the turn's round, sent by a client: the bus already holds its outcome, from the
        // turn's own run on thinker, and answers it without running echo again.
        let again = try await client.invoke("echo", parameters: ["text": "hi!"], roundID: round)
        #expect(again.status == .ok && again.agent == "thinker" && again.result == .text("hi!"))
        // On the feed: only that request, deduplicated; the turn's calls never went through the bus.
        var topics: [String] = []
        while let event = try await events.next() {
            guard event.topic.hasPrefix("request."), event.event["round"]?.stringValue == round else { continue }
            topics.append(event.topic)
            if event.topic == "request.deduplicated" {
                #expect(event.event["reused"] == "finished")
                break
            }
        }
        #expect(topics == ["request.deduplicated"])
    }

    @Test("a call running on the agent whose sub-call goes through the bus is claimed before the round goes back")
    func claimBeforeRelease() async throws {
        let cluster = try await TestCluster()
        defer { cluster.terminate() }
        let sandbox = NSTemporaryDirectory() + "skillbus-turn-sandbox-\(UUID().uuidString.prefix(8))"
        try FileManager.default.createDirectory(atPath: sandbox, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: sandbox) }
        try Data("one two three".utf8).write(to: URL(fileURLWithPath: sandbox + "/notes.txt"))
        let config = NSTemporaryDirectory() + "skillbus-turn-\(UUID().uuidString.prefix(8)).json"
        let rules: JSONValue = [
            "rules": [["intent": "report (?<path>\\S+)", "skill": "text.report", "params": ["path": "{path}"], "reply": "{result}"]]
        ]
        try Data(
            JSONValue.object(["version": 1, "name": "thinker", "skills": ["text.report", "text.stats"], "planner": rules])
                .serialized()
        ).write(to: URL(fileURLWithPath: config))
        defer { try? FileManager.default.removeItem(atPath: config) }
        try await cluster.startWorker("thinker", ["--config", config])
        try await cluster.startWorker("reader", ["--skills", "file.read", "--sandbox", sandbox])
        let context = try ZMQContext()
        let feed = try await FeedSubscriber.connect(
            endpoint: cluster.feed, topics: ["request.", "registry.heartbeat"], context: context)
        defer { feed.close() }
        var events = feed.events.makeAsyncIterator()
        _ = try await events.next()  // the subscription is in place
        let client = try await SkillbusClient.connect(endpoint: cluster.bus, context: context)
        defer { client.close() }
        let (_, document) = try await client.ask("report notes.txt", agent: "thinker")
        #expect(document["status"] == "ok")
        let round = try #require(document["round"]?.stringValue)
        // text.report ran on thinker and read the file through the bus: the round went back to the bus while
        // it ran, and its CLAIM made it an execution of the round. Both calls are now reused, not run again.
        for skill in ["text.report", "file.read"] {
            let again = try await client.invoke(skill, parameters: ["path": "notes.txt"], roundID: round)
            #expect(again.status == .ok && again.agent == (skill == "file.read" ? "reader" : "thinker"))
        }
        // On the feed: the turn's file.read went through the bus once, and so did text.report's text.stats (a
        // sub-call in a round goes through the bus even to the caller's own agent); text.report never did; both
        // repeats were answered from the round.
        var dispatched: [String] = []
        var reused: [String] = []
        while reused.count < 2, let event = try await events.next() {
            guard event.event["round"]?.stringValue == round, let skill = event.event["skill"]?.stringValue else { continue }
            if event.topic == "request.dispatched" { dispatched.append(skill) }
            if event.topic == "request.deduplicated", event.event["reused"] == "finished" { reused.append(skill) }
        }
        #expect(dispatched == ["file.read", "text.stats"] && reused == ["text.report", "file.read"])
    }

    @Test("skillbus ask prints the reply; a message no rule understands is answered with what the agent can do")
    func askCommand() async throws {
        let cluster = try await cluster()
        defer { cluster.terminate() }
        let (code, output) = try await runSkillbus(["ask", "say", "hi", "--coordinator", cluster.bus])
        #expect(code == 0 && output.contains("hi!"))
        let (unknownCode, unknown) = try await runSkillbus(["ask", "sing a song", "--json", "--coordinator", cluster.bus])
        let document = try JSONValue(parsing: unknown.first { $0.hasPrefix("{") } ?? "")
        #expect(unknownCode == 0 && document["reply"]?.stringValue?.contains("I can answer") == true)
        #expect(document["calls"] == [])
        // At a terminal (a pseudo-terminal the helper opens), the turn shows as it runs.
        let helper = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent("interop/answer_prompt.py").path
        let person = try SkillbusProcess(
            [helper, "(no prompt)", "", skillbusBinary, "ask", "what is 6*7", "--coordinator", cluster.bus],
            name: "person", executable: "/usr/bin/env", prefix: ["python3"])
        #expect(try await person.waitForExit() == 0)
        await person.waitForOutputEnd()
        let shown = person.output.joined(separator: "\n")
        for line in [
            "thinker: thinking", "thinker: executingSkill math.eval expression=6*7",
            "✓ math.eval expression=6*7 on calc,", "thinker: completed", "6*7 is 42",
        ] {
            #expect(shown.contains(line), "\(line) in \(shown)")
        }
        // An agent without a planner takes no turns.
        let (refusedCode, refused) = try await runSkillbus(["ask", "hello", "--agent", "calc", "--coordinator", cluster.bus])
        #expect(refusedCode == 1 && refused.contains { $0.contains("unsupported") && $0.contains("planner") })
    }

    /// A planner scripted by the test, in an agent running in this process.
    struct ScriptedPlanner: Planner {
        let decide: @Sendable (PlannerInput) throws -> PlannerDecision
        func next(_ input: PlannerInput) async throws -> PlannerDecision { try decide(input) }
    }

    func scripted(_ cluster: TestCluster, _ decide: @escaping @Sendable (PlannerInput) throws -> PlannerDecision)
        async throws -> (AgentWorker, Task<Void, Never>)
    {
        let worker = try await AgentWorker.connect(
            options: .init(name: "scripted", coordinator: cluster.bus, planner: ScriptedPlanner(decide: decide)),
            skills: [], context: try ZMQContext(), logger: Logger(label: "scripted", level: .error))
        let task = Task { await worker.run() }
        try await cluster.coordinator.waitForLine("scripted to join") { $0.contains("agent 'scripted' joined") }
        // Its replica must know math.eval's schema before the planner's choice is checked against it.
        try await waitUntil("the replica to hold math.eval") { worker.replica?.registry.skills["math.eval"] != nil }
        return (worker, task)
    }

    @Test("an invalid choice goes back to the planner, which corrects it; a planner error and the step limit fail the turn")
    func plannerTrouble() async throws {
        let cluster = try await cluster()
        defer { cluster.terminate() }
        let client = try await SkillbusClient.connect(endpoint: cluster.bus, context: try ZMQContext())
        defer { client.close() }
        let (worker, task) = try await scripted(cluster) { input in
            switch input.message {
            case "correct me":
                // First a parameter math.eval does not take; after the refusal, the right one.
                guard let last = input.steps.last else { return .call(skill: "math.eval", parameters: ["expr": "1+1"]) }
                if case .failure(let error) = last.outcome, error.code == .invalidParameters {
                    return .call(skill: "math.eval", parameters: ["expression": "1+1"])
                }
                return .reply("corrected after \(input.steps.count) steps")
            case "break":
                throw SkillbusError(.internalError, "the planner broke")
            case "stream":
                // Forty pieces: twenty at once, a pause, twenty more. They arrive in a few batches, not forty.
                let (pieces, continuation) = AsyncThrowingStream.makeStream(of: String.self)
                Task {
                    for index in 0..<40 {
                        continuation.yield("p\(index) ")
                        if index == 19 { try? await Task.sleep(for: .milliseconds(60)) }
                    }
                    continuation.finish()
                }
                return .streamedReply(ReplyStream(pieces))
            default:
                return .call(skill: "echo", parameters: ["text": .string("again \(input.steps.count)")])
            }
        }
        defer {
            task.cancel()
            Task { await worker.stop() }
        }
        let batches = Mutex<[String]>([])
        let (_, streamed) = try await client.ask("stream", agent: "scripted") { piece in batches.withLock { $0.append(piece) } }
        let whole = (0..<40).map { "p\($0) " }.joined()
        #expect(streamed["reply"]?.stringValue == whole)
        #expect(batches.withLock { $0.joined() } == whole)
        #expect(batches.withLock { $0.count >= 2 && $0.count < 40 }, "\(batches.withLock { $0.count }) batches")

        let (_, corrected) = try await client.ask("correct me", agent: "scripted")
        #expect(corrected["reply"] == "corrected after 2 steps")
        #expect(corrected["calls"]?.arrayValue?.first?["error"]?["code"] == "invalid_parameters")

        for (message, words) in [("break", "the planner broke"), ("loop forever", "limit")] {
            do {
                _ = try await client.ask(message, agent: "scripted")
                Issue.record("'\(message)' ended ok")
            } catch {
                #expect(error.message.contains(words), "\(error)")
                let states = (error.details?["states"]?.arrayValue ?? []).compactMap { $0["state"]?.stringValue }
                #expect(states.last == "failed")
            }
        }
    }

    @Test("Ctrl-C in skillbus ask cancels the turn: the running skill gets CANCEL and the turn ends failed(cancelled)")
    func ctrlC() async throws {
        let cluster = try await cluster()
        defer { cluster.terminate() }
        let context = try ZMQContext()
        let feed = try await FeedSubscriber.connect(
            endpoint: cluster.feed, topics: ["agent.state", "request.done", "registry.heartbeat"], context: context)
        defer { feed.close() }
        var events = feed.events.makeAsyncIterator()
        _ = try await events.next()  // the subscription is in place
        let ask = try SkillbusProcess(["ask", "nap", "--coordinator", cluster.bus], name: "ask")
        defer { ask.signal(SIGKILL) }
        var turn: JSONValue?
        while turn == nil, let event = try await events.next() {
            if event.topic == "agent.state", event.event["state"] == "executingSkill", event.event["skill"] == "sleep" {
                turn = event.event["turn"]
            }
        }
        ask.signal(SIGINT)
        #expect(try await ask.waitForExit() == 130, "128 + SIGINT")
        var failed = false
        var sleepCancelled = false
        while !(failed && sleepCancelled), let event = try await events.next() {
            if event.topic == "agent.state", event.event["turn"] == turn, event.event["state"] == "failed" {
                #expect(event.event["reason"]?.stringValue?.contains("cancelled") == true)
                failed = true
            }
            if event.topic == "request.done", event.event["skill"] == "sleep" {
                #expect(event.event["error"]?["code"] == "cancelled")
                sleepCancelled = true
            }
        }
        // The CANCEL reached the agent running the 20 s sleep: its slot is free long before the sleep's end.
        try await waitUntil("calc's slot to be free", timeout: .seconds(10)) { try await cluster.inFlight(agent: "calc") == 0 }
    }

}
