import Foundation
import Skillbus
import SkillbusZMQ
import Synchronization
import Testing

@Suite("End to end: real coordinator and workers on 127.0.0.1", .serialized, .timeLimit(.minutes(2)))
struct EndToEndTests {
    @Test("send routes to a worker, results and exit codes are right")
    func sendAndExitCodes() async throws {
        let cluster = try await TestCluster()
        defer { cluster.terminate() }
        try await cluster.startWorker("alpha", ["--skills", "echo,math.eval,file.read,text.stats,text.grep"])

        let (okCode, ok) = try await cluster.sendJSON(["echo", "text=hello world"])
        #expect(okCode == 0)
        #expect(ok["status"] == "ok")
        #expect(ok["agent"] == "alpha")
        #expect(ok["result"] == ["type": "text", "text": "hello world"])
        #expect(ok["error"] == .null)
        #expect((ok["durationMs"]?.doubleValue ?? -1) >= 0)
        #expect(ok["round"]?.stringValue?.isEmpty == false)

        let (mathCode, math) = try await cluster.sendJSON(["math.eval", "expression=2 * (3 + 4) - -1"])
        #expect(mathCode == 0)
        #expect(math["result"]?["json"]?["value"] == 15)

        let (statsCode, stats) = try await cluster.sendJSON(["text.stats", "text=a b a\nc"])
        #expect(statsCode == 0)
        #expect(stats["result"]?["json"]?["words"] == 4)
        #expect(stats["result"]?["json"]?["lines"] == 2)

        let (grepCode, grep) = try await cluster.sendJSON(["text.grep", "pattern=^b", "text=apple\nbanana\nblueberry"])
        #expect(grepCode == 0)
        #expect(grep["result"]?["json"]?["count"] == 2)
        #expect(grep["result"]?["json"]?["matches"]?.arrayValue?.first?["line"] == 2)

        // A skill that fails: exit 1, the error names the problem, the worker keeps serving.
        let (failCode, fail) = try await cluster.sendJSON(["file.read", "path=../../etc/passwd"])
        #expect(failCode == 1)
        #expect(fail["status"] == "error")
        #expect(fail["error"]?["code"] == "skill_failed")
        let (mathFailCode, mathFail) = try await cluster.sendJSON(["math.eval", "expression=1 + $"])
        #expect(mathFailCode == 2)
        #expect(mathFail["error"]?["message"]?.stringValue?.contains("position 5") == true)

        // Invalid parameters: every problem at once, exit 2.
        let (invalidCode, invalid) = try await cluster.sendJSON(["echo", "txt=x", "n:=3"])
        #expect(invalidCode == 2)
        let message = invalid["error"]?["message"]?.stringValue ?? ""
        #expect(invalid["error"]?["code"] == "invalid_parameters")
        #expect(message.contains("missing required parameter 'text'"))
        #expect(message.contains("unknown parameter 'txt'"))
        #expect(message.contains("unknown parameter 'n'"))

        // Unknown skill: the error names it and lists what is offered.
        let (unknownCode, unknown) = try await cluster.sendJSON(["translate", "text=hi"])
        #expect(unknownCode == 2)
        #expect(unknown["error"]?["code"] == "unknown_skill")
        let unknownMessage = unknown["error"]?["message"]?.stringValue ?? ""
        #expect(unknownMessage.contains("'translate'") && unknownMessage.contains("echo"))

        // Bad command-line parameters never reach the bus.
        let (usageCode, _) = try await cluster.send(["echo", "text"])
        #expect(usageCode == 2)
        let (jsonCode, _) = try await cluster.send(["echo", "text:={nope"])
        #expect(jsonCode == 2)

        // Still serving after all that.
        let (againCode, again) = try await cluster.sendJSON(["echo", "text=still here"])
        #expect(againCode == 0 && again["result"]?["text"] == "still here")
    }

    @Test("SKILLBUS_COORDINATOR replaces the default endpoint, and a flag beats it")
    func environment() async throws {
        let cluster = try await TestCluster()
        defer { cluster.terminate() }
        try await cluster.startWorker("alpha", ["--skills", "echo"])
        let (code, output) = try await runSkillbus(
            ["send", "echo", "text=from the environment"], environment: ["SKILLBUS_COORDINATOR": cluster.bus])
        #expect(code == 0)
        #expect(output.contains("from the environment"))
        let (flagCode, _) = try await runSkillbus(
            ["send", "echo", "text=x", "--coordinator", cluster.bus],
            environment: ["SKILLBUS_COORDINATOR": "tcp://127.0.0.1:1"])
        #expect(flagCode == 0)
        let (badCode, badOutput) = try await runSkillbus(
            ["send", "echo", "text=x"], environment: ["SKILLBUS_COORDINATOR": "localhost:5555"])
        #expect(badCode == 2)
        #expect(badOutput.contains { $0.contains("SKILLBUS_COORDINATOR") })
    }

    @Test("an unreachable coordinator gives exit code 3 within the timeout")
    func unreachable() async throws {
        let (code, output) = try await runSkillbus([
            "send", "echo", "text=x", "--coordinator", "tcp://127.0.0.1:1", "--timeout", "0.5",
        ])
        #expect(code == 3)
        #expect(output.contains { $0.contains("unreachable") })
    }

    @Test("load spreads over two workers; a worker never gets more than its capacity")
    func spreadsLoadWithinCapacity() async throws {
        let cluster = try await TestCluster()
        defer { cluster.terminate() }
        try await cluster.startWorker("alpha", ["--skills", "sleep", "--capacity", "2"])
        try await cluster.startWorker("beta", ["--skills", "sleep", "--capacity", "2"])
        let context = try ZMQContext()
        let feed = try FeedSubscriber(
            endpoint: cluster.feed, topics: ["request.", "registry.heartbeat"], context: context)
        defer { feed.close() }
        var events = feed.events.makeAsyncIterator()
        _ = try await events.next()  // the first registry heartbeat: the subscription is in place
        // Eight sleeps at once from one client on 2 × 2 slots.
        let client = try SkillbusClient(endpoint: cluster.bus, context: context)
        defer { client.close() }
        let outcomes = try await withThrowingTaskGroup(of: InvocationOutcome.self) { group in
            for _ in 0..<8 {
                group.addTask { try await client.invoke("sleep", parameters: ["ms": 300], timeout: .seconds(30)) }
            }
            return try await group.reduce(into: []) { $0.append($1) }
        }
        #expect(outcomes.allSatisfy { $0.status == .ok })
        let agents = Dictionary(grouping: outcomes, by: \.agent).mapValues(\.count)
        #expect(agents["alpha"] == 4)
        #expect(agents["beta"] == 4)

        // The order of events on the feed, not their times: replay what each agent held.
        var log: [(topic: String, event: JSONValue)] = []
        let deadline = ContinuousClock.now + .seconds(20)
        while log.filter({ $0.topic == "request.done" }).count < 8, ContinuousClock.now < deadline,
            let (topic, event) = try await events.next()
        {
            if topic.hasPrefix("request.") { log.append((topic, event)) }
        }
        var holding: [String: Int] = [:]
        var dispatches = 0
        var finished = 0
        var queued: Set<String> = []
        for (topic, event) in log {
            let agent = event["agent"]?.stringValue ?? ""
            let request = event["request"]?.stringValue ?? ""
            switch topic {
            case "request.queued":
                queued.insert(request)
            case "request.dispatched":
                dispatches += 1
                holding[agent, default: 0] += 1
                #expect(holding[agent]! <= 2, "\(agent) was sent a third invocation")
                // Four slots in all: the fifth and later dispatches each came after a reply freed one.
                #expect(dispatches - finished <= 4, "dispatch \(dispatches) after only \(finished) replies")
                queued.remove(request)
            case "request.done":
                finished += 1
                holding[agent, default: 0] -= 1
                #expect(holding[agent]! >= 0)
            default:
                break
            }
        }
        #expect(dispatches == 8 && finished == 8)
        #expect(queued.isEmpty, "requests queued and never dispatched: \(queued)")
        #expect(holding.values.allSatisfy { $0 == 0 })
    }

    @Test("a full queue answers busy; the rest are served")
    func busyWhenQueueFull() async throws {
        let cluster = try await TestCluster(coordinatorArguments: ["--config", try writeConfig(["queueLimit": 1])])
        defer { cluster.terminate() }
        try await cluster.startWorker("alpha", ["--skills", "sleep", "--capacity", "1"])
        // All three from one client at once (not three processes whose start-up could spread them out):
        // one runs, one waits, the third finds the queue full.
        let client = try SkillbusClient(endpoint: cluster.bus, context: try ZMQContext())
        defer { client.close() }
        let results = try await withThrowingTaskGroup(of: InvocationOutcome.self) { group in
            for _ in 0..<3 {
                group.addTask { try await client.invoke("sleep", parameters: ["ms": 800], timeout: .seconds(30)) }
            }
            return try await group.reduce(into: []) { $0.append($1) }
        }
        #expect(results.filter { $0.status == .ok }.count == 2)
        let busy = results.filter { $0.error?.code == .busy }
        #expect(busy.count == 1)
        #expect(busy.first?.error?.message.contains("wait queue is full") == true)
    }

    @Test("a worker killed while it holds requests: its clients get agent_lost, not a hang")
    func workerVanishes() async throws {
        let cluster = try await TestCluster()
        defer { cluster.terminate() }
        let doomed = try await cluster.startWorker("doomed", ["--skills", "sleep"])
        async let held = cluster.sendJSON(["sleep", "ms:=10000", "--timeout", "20"])
        try await waitUntil("the sleep to reach doomed") {
            try await cluster.inFlight(agent: "doomed") == 1
        }
        doomed.signal(SIGKILL)
        let (code, document) = try await held
        #expect(code == 1)
        #expect(document["error"]?["code"] == "agent_lost")
        #expect(document["agent"] == "doomed")
        try await cluster.coordinator.waitForLine("doomed to leave") { $0.contains("agent 'doomed' left") }
        // The skill is gone from the registry, so a new request says so at once.
        let (_, after) = try await cluster.sendJSON(["sleep", "ms:=1"])
        #expect(after["error"]?["code"] == "unknown_skill")
    }

    @Test("a worker stopped with SIGTERM says goodbye: it leaves at once, not after missed heartbeats")
    func workerLeavesCleanly() async throws {
        let cluster = try await TestCluster()
        defer { cluster.terminate() }
        let worker = try await cluster.startWorker("polite", ["--skills", "echo"])
        worker.signal(SIGTERM)
        #expect(try await worker.waitForExit() == 0)
        try await cluster.coordinator.waitForLine("polite to leave") {
            $0.contains("agent 'polite' left: disconnected")
        }
    }

    @Test("the feed shows agents joining, their states and each round's invocations")
    func feedShowsStates() async throws {
        let cluster = try await TestCluster()
        defer { cluster.terminate() }
        let feed = try SkillbusProcess(["feed", "--feed", cluster.feed], name: "feed")
        defer { feed.signal(SIGTERM) }
        let feedJSON = try SkillbusProcess(
            ["feed", "--feed", cluster.feed, "--json", "--topic", "invocation."], name: "feed-json")
        defer { feedJSON.signal(SIGTERM) }
        // A SUB socket joins asynchronously: keep the cluster busy until both watchers have seen an event.
        try await cluster.startWorker("alpha", ["--skills", "echo,sleep"])
        var seen = false
        for _ in 0..<50 where !seen {
            _ = try await cluster.send(["sleep", "ms:=20"])
            seen =
                feed.output.contains { $0.contains("executingSkill(sleep)") }
                && feedJSON.output.contains { $0.contains("\"invocation.done\"") }
        }
        #expect(seen)
        let human = try await feed.waitForLine("an idle state") { $0.contains("agent.state") && $0.hasSuffix(" idle") }
        #expect(human.contains("alpha"))
        let done = try await feedJSON.waitForLine("invocation.done") { $0.contains("\"invocation.done\"") }
        let event = try JSONValue(parsing: done)
        #expect(event["agent"] == "alpha")
        #expect(event["skill"] == "sleep")
        #expect(event["status"] == "ok")
        #expect(event["time"]?.stringValue?.hasSuffix("Z") == true)
        // --topic invocation. filtered the agent events out.
        #expect(!feedJSON.output.contains { $0.contains("agent.state") })
    }

    @Test("feed --count N prints N events and stops, also when one batch of the feed holds more")
    func feedCount() async throws {
        let cluster = try await TestCluster()
        defer { cluster.terminate() }
        try await cluster.startWorker("alpha", ["--skills", "echo"])
        let feed = try SkillbusProcess(["feed", "--feed", cluster.feed, "--json", "--count", "3"], name: "feed")
        defer { feed.signal(SIGKILL) }
        // A round's arrival publishes round.accepted and invocation.dispatched in one batch (one pass of the bus),
        // its answer invocation.done and round.done in another: the third event is in the middle of a batch.
        for _ in 0..<50 where !feed.output.contains(where: { $0.hasPrefix("{") }) {
            _ = try await cluster.send(["echo", "text=counted"])
        }
        for _ in 0..<2 { _ = try await cluster.send(["echo", "text=more"]) }
        #expect(try await feed.waitForExit() == 0)
        #expect(feed.output.filter { $0.hasPrefix("{") }.count == 3, "\(feed.output)")
    }

    @Test("skills lists every skill with its providers and parameters")
    func skillsCatalog() async throws {
        let cluster = try await TestCluster()
        defer { cluster.terminate() }
        try await cluster.startWorker("alpha", ["--skills", "echo,math.eval"])
        try await cluster.startWorker("beta", ["--skills", "echo"])
        let catalog = try await cluster.registryDocument()
        let skills = catalog["skills"]?.arrayValue ?? []
        #expect(skills.compactMap { $0["identifier"]?.stringValue } == ["echo", "math.eval"])
        #expect(skills.first?["providers"] == [["agent": "alpha", "capacity": 4], ["agent": "beta", "capacity": 4]])
        #expect(skills.last?["parameters"]?.arrayValue?.first?["name"] == "expression")
        // The bus's catalog (SKILLS) has the same entries; only it knows each provider's load.
        let client = try SkillbusClient(endpoint: cluster.bus, context: try ZMQContext())
        defer { client.close() }
        let bus = try await client.skills().json["skills"]?.arrayValue ?? []
        #expect(bus.map { $0["identifier"] } == skills.map { $0["identifier"] })
        for (ours, theirs) in zip(skills, bus) {
            var stripped = theirs.objectValue ?? [:]
            stripped["providers"] = .array(
                (theirs["providers"]?.arrayValue ?? []).map { provider in
                    var fields = provider.objectValue ?? [:]
                    let load = fields.removeValue(forKey: "inFlight")
                    #expect(load == 0)
                    return .object(fields)
                })
            #expect(ours == .object(stripped))
        }
        let (humanCode, human) = try await runSkillbus(["skills", "--coordinator", cluster.bus, "--feed", cluster.feed])
        #expect(humanCode == 0)
        #expect(human.contains { $0.hasPrefix("math.eval") })
    }
}

/// Writes a coordinator config with `overrides` to a temporary file and returns its path.
func writeConfig(_ overrides: [String: JSONValue]) throws -> String {
    var object: [String: JSONValue] = ["version": 1]
    for (key, value) in overrides { object[key] = value }
    let path = NSTemporaryDirectory() + "skillbus-test-\(UUID().uuidString).json"
    try Data(JSONValue.object(object).jsonString.utf8).write(to: URL(fileURLWithPath: path))
    return path
}

/// Lines a test logger wrote.
final class LogLines: Sendable {
    let lines = Mutex<[String]>([])
    var logger: Logger { Logger(label: "test", level: .info) { line in self.lines.withLock { $0.append(line) } } }
}

@Suite("Coordinator loop")
struct CoordinatorLoopTests {
    @Test("a failing poll ends the coordinator's loop with a line that says why")
    func pollFailureIsLogged() async throws {
        let context = try ZMQContext()
        let log = LogLines()
        var configuration = CoordinatorConfiguration()
        configuration.bus = "tcp://127.0.0.1:*"
        configuration.feed = "tcp://127.0.0.1:*"
        let coordinator = try await Coordinator.start(configuration: configuration, context: context, logger: log.logger)
        // Shutting the context down makes every zmq call, zmq_poll too, fail with ETERM.
        context.shutdown()
        let stopped = await withTaskGroup(of: Bool.self) { group in
            group.addTask {
                await coordinator.run()
                return true
            }
            group.addTask {
                try? await Task.sleep(for: .seconds(10))
                return false
            }
            let first = await group.next() ?? false
            group.cancelAll()
            return first
        }
        #expect(stopped)
        #expect(log.lines.withLock { $0 }.contains { $0.contains("error") && $0.contains("polling the bus and feed sockets failed") })
    }
}
