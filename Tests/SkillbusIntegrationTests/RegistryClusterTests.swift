import Foundation
import Skillbus
import SkillbusZMQ
import Synchronization
import Testing

/// The shared registry across real processes: whatever starts first and whatever dies, every replica
/// ends equal to the coordinator's registry (whole contents compared, not counts).
@Suite("Shared registry: replicas, liveness and runtime changes", .serialized, .timeLimit(.minutes(3)))
struct RegistryClusterTests {
    let context: ZMQContext

    init() throws { context = try ZMQContext() }

    /// Waits until the coordinator's registry holds exactly `agents`, and every replica (the in-test ones,
    /// each worker's — those in `workerReplicas`, all by default — and a fresh `skillbus skills --json`)
    /// holds the same contents.
    func expectConverged(
        bus: String, feed: String, agents: [String], replicas: [RegistryReplica], workerReplicas: Set<String>? = nil,
        timeout: Duration = .seconds(20)
    ) async throws {
        let client = try SkillbusClient(endpoint: bus, context: context)
        defer { client.close() }
        try await waitUntil("every replica to equal the coordinator's registry with \(agents)", timeout: timeout) {
            guard let truth = try? await client.snapshot(timeout: .seconds(2)),
                truth.registry.agents.keys.sorted() == agents.sorted(),
                replicas.allSatisfy({ $0.registry == truth.registry && $0.position?.sequence == truth.sequence }),
                let listing = try? await client.agents(timeout: .seconds(2)),
                let workers = listing["agents"]?.arrayValue
            else { return false }
            // Each worker reports its replica's digest; equal digests mean equal contents.
            return workers.filter { workerReplicas?.contains($0["agent"]?.stringValue ?? "") ?? true }.allSatisfy {
                $0["registry"]?["digest"]?.stringValue == truth.registry.digest
                    && $0["registry"]?["epoch"]?.stringValue == truth.epoch
            }
        }
        let truth = try await client.snapshot()
        let (code, output) = try await runSkillbus(["skills", "--json", "--coordinator", bus, "--feed", feed])
        #expect(code == 0)
        let document = try JSONValue(parsing: output.first { $0.hasPrefix("{") } ?? "{}")
        #expect(document["agents"] == truth.registry.json["agents"])
        #expect(document["digest"]?.stringValue == truth.registry.digest)
    }

    @Test("workers started before the coordinator register and replicate once it comes")
    func workersFirst() async throws {
        let endpoints = try freeEndpoints(2)
        let (bus, feed) = (endpoints[0], endpoints[1])
        var workers: [SkillbusProcess] = []
        defer { for worker in workers { worker.signal(SIGTERM) } }
        for (name, skills) in [("alpha", "echo,math.eval"), ("beta", "echo,text.stats")] {
            workers.append(
                try SkillbusProcess(
                    ["worker", "--name", name, "--coordinator", bus, "--heartbeat-ms", "200", "--skills", skills],
                    name: name))
        }
        // Both workers are up and knocking before there is anything to answer.
        for worker in workers {
            try await worker.waitForLine("\(worker.name) connecting") { $0.contains("connecting") }
        }
        let coordinator = try SkillbusProcess(
            ["coordinator", "--bus", bus, "--feed", feed, "--heartbeat-ms", "200"], name: "coordinator")
        defer { coordinator.signal(SIGTERM) }
        let client = try SkillbusClient(endpoint: bus, context: context)
        defer { client.close() }
        let watcher = try RegistryReplica(client: client, feedEndpoint: feed, context: context)
        defer { watcher.close() }
        try await expectConverged(bus: bus, feed: feed, agents: ["alpha", "beta"], replicas: [watcher])
        #expect(watcher.registry.skills["echo"]?.providers == ["alpha", "beta"])
    }

    @Test("a watcher that joins after 1,000 updates holds what one that saw them all holds")
    func lateJoiner() async throws {
        let cluster = try await TestCluster(coordinatorArguments: ["--heartbeat-ms", "200"])
        defer { cluster.terminate() }
        try await cluster.startWorker("alpha", ["--skills", "echo"])
        let client = try SkillbusClient(endpoint: cluster.bus, context: context)
        defer { client.close() }
        let early = try RegistryReplica(client: client, feedEndpoint: cluster.feed, context: context)
        defer { early.close() }
        #expect(await early.waitUntil(timeout: .seconds(10)) { $0.agents["alpha"] != nil })
        let start = try await client.snapshot().sequence

        // An agent in this process changes its skills 1,000 times: one registry update each.
        let agent = try AgentWorker(
            options: .init(name: "churn", coordinator: cluster.bus, heartbeatMs: 200),
            skills: [MadeUpSkill(identifier: "churn.base")], context: context,
            logger: Logger(label: "churn", level: .error))
        let running = Task { await agent.run() }
        defer { running.cancel() }
        // Welcomed (it holds a replica from then on): every change below goes out as it happens.
        try await waitUntil("the churning agent to be welcomed") { agent.replica != nil }
        for index in 0..<1000 {
            if index % 2 == 0 {
                agent.addSkill(MadeUpSkill(identifier: "churn.\(index)"))
            } else {
                agent.removeSkill("churn.\(index - 1)")
            }
            if index % 100 == 99 { agent.addSkill(MadeUpSkill(identifier: "kept.\(index)")) }
        }
        let client2 = try SkillbusClient(endpoint: cluster.bus, context: context)
        defer { client2.close() }
        try await waitUntil("1,000 updates to reach the coordinator") {
            // The agent joined, then made 1,010 changes.
            (try? await client2.snapshot(timeout: .seconds(2)).sequence) ?? 0 >= start + 1011
        }
        let late = try RegistryReplica(client: client2, feedEndpoint: cluster.feed, context: context)
        defer { late.close() }
        try await expectConverged(
            bus: cluster.bus, feed: cluster.feed, agents: ["alpha", "churn"], replicas: [early, late])
        #expect(late.registry.agents["churn"]?.skills.count == 11)  // churn.base and ten kept.*
    }

    @Test("a coordinator restarted under running workers gets the full registry back; replicas follow")
    func coordinatorRestart() async throws {
        let endpoints = try freeEndpoints(2)
        let (bus, feed) = (endpoints[0], endpoints[1])
        let arguments = ["coordinator", "--bus", bus, "--feed", feed, "--heartbeat-ms", "200"]
        let first = try SkillbusProcess(arguments, name: "coordinator-1")
        defer { first.signal(SIGKILL) }
        _ = try await first.waitForLine("ready line") { $0.hasPrefix("skillbus coordinator ready:") }
        var workers: [SkillbusProcess] = []
        defer { for worker in workers { worker.signal(SIGTERM) } }
        for (name, skills) in [("alpha", "echo"), ("beta", "echo,math.eval"), ("gamma", "file.read")] {
            workers.append(
                try SkillbusProcess(
                    ["worker", "--name", name, "--coordinator", bus, "--heartbeat-ms", "200", "--skills", skills],
                    name: name))
        }
        let client = try SkillbusClient(endpoint: bus, context: context)
        defer { client.close() }
        let watcher = try RegistryReplica(client: client, feedEndpoint: feed, context: context)
        defer { watcher.close() }
        try await expectConverged(bus: bus, feed: feed, agents: ["alpha", "beta", "gamma"], replicas: [watcher])
        let before = watcher.registry
        let oldEpoch = watcher.position?.epoch

        first.signal(SIGKILL)
        _ = try await first.waitForExit()
        let second = try SkillbusProcess(arguments, name: "coordinator-2")
        defer { second.signal(SIGTERM) }
        _ = try await second.waitForLine("ready line") { $0.hasPrefix("skillbus coordinator ready:") }
        let restarted = ContinuousClock.now
        try await expectConverged(bus: bus, feed: feed, agents: ["alpha", "beta", "gamma"], replicas: [watcher])
        #expect(watcher.registry == before)
        #expect(watcher.position?.epoch != oldEpoch)
        print("registry back \(ContinuousClock.now - restarted) after the coordinator restarted")
    }

    @Test("kill -9 of a worker removes its skills from every replica within the liveness bound")
    func killedWorker() async throws {
        let cluster = try await TestCluster(coordinatorArguments: ["--heartbeat-ms", "200"])
        defer { cluster.terminate() }
        try await cluster.startWorker("alpha", ["--skills", "echo"])
        let doomed = try await cluster.startWorker("doomed", ["--skills", "echo,math.eval"])
        let client = try SkillbusClient(endpoint: cluster.bus, context: context)
        defer { client.close() }
        let watcher = try RegistryReplica(client: client, feedEndpoint: cluster.feed, context: context)
        defer { watcher.close() }
        try await expectConverged(
            bus: cluster.bus, feed: cluster.feed, agents: ["alpha", "doomed"], replicas: [watcher])
        let killed = ContinuousClock.now
        doomed.signal(SIGKILL)
        // 3 missed 200 ms heartbeats plus a 100 ms tick; the deadline leaves room for a busy machine.
        #expect(await watcher.waitUntil(timeout: .seconds(5)) { $0.agents["doomed"] == nil })
        print("kill -9 reached the replica after \(ContinuousClock.now - killed)")
        #expect(watcher.registry.skills["math.eval"] == nil)
        #expect(watcher.registry.skills["echo"]?.providers == ["alpha"])
        try await expectConverged(bus: cluster.bus, feed: cluster.feed, agents: ["alpha"], replicas: [watcher])
    }

    @Test("a replica that loses updates on purpose notices the gap and recovers through a snapshot")
    func droppedUpdates() async throws {
        let cluster = try await TestCluster(coordinatorArguments: ["--heartbeat-ms", "200"])
        defer { cluster.terminate() }
        let client = try SkillbusClient(endpoint: cluster.bus, context: context)
        defer { client.close() }
        // Loses every third update it is sent.
        let lossy = try RegistryReplica(
            client: client, feedEndpoint: cluster.feed, context: context, dropUpdate: { $0.sequence % 3 == 0 })
        defer { lossy.close() }
        #expect(await lossy.waitUntil(timeout: .seconds(10)))
        for name in ["alpha", "beta", "gamma", "delta"] { try await cluster.startWorker(name, ["--skills", "echo"]) }
        try await expectConverged(
            bus: cluster.bus, feed: cluster.feed, agents: ["alpha", "beta", "delta", "gamma"], replicas: [lossy])
        #expect(lossy.statistics.snapshots >= 2)
    }

    @Test("skills added and removed at run time are one update each; SIGHUP reloads the config's skills")
    func runtimeChanges() async throws {
        let cluster = try await TestCluster(coordinatorArguments: ["--heartbeat-ms", "200"])
        defer { cluster.terminate() }
        let config = NSTemporaryDirectory() + "skillbus-worker-\(UUID().uuidString).json"
        func writeSkills(_ text: String) throws {
            try Data(text.utf8).write(to: URL(fileURLWithPath: config))
        }
        try writeSkills(#"{"version": 1, "skills": ["echo"]}"#)
        let worker = try await cluster.startWorker("alpha", ["--config", config])
        let client = try SkillbusClient(endpoint: cluster.bus, context: context)
        defer { client.close() }
        let watcher = try RegistryReplica(client: client, feedEndpoint: cluster.feed, context: context)
        defer { watcher.close() }
        #expect(await watcher.waitUntil(timeout: .seconds(10)) { $0.agents["alpha"]?.skills.count == 1 })
        let sequence = watcher.position?.sequence ?? 0

        try writeSkills(#"{"version": 1, "skills": ["echo", "math.eval", "text.stats"]}"#)
        worker.signal(SIGHUP)
        #expect(await watcher.waitUntil(timeout: .seconds(10)) { $0.skills["math.eval"] != nil })
        #expect(watcher.position?.sequence == sequence + 1)
        #expect(watcher.registry.agents["alpha"]?.skills.map(\.identifier) == ["echo", "math.eval", "text.stats"])
        let (code, _) = try await cluster.send(["math.eval", "expression=1+1"])
        #expect(code == 0)

        // A broken config changes nothing, and says why.
        try writeSkills(#"{"version": 1, "skills": ["echo", "teleport"]}"#)
        worker.signal(SIGHUP)
        _ = try await worker.waitForLine("the reload refusal") { $0.contains("config not reloaded") }
        #expect(watcher.registry.skills["math.eval"] != nil)

        try writeSkills(#"{"version": 1, "skills": ["text.stats"]}"#)
        worker.signal(SIGHUP)
        #expect(await watcher.waitUntil(timeout: .seconds(10)) { $0.skills["echo"] == nil })
        #expect(watcher.position?.sequence == sequence + 2)
        #expect(watcher.registry.agents["alpha"]?.skills.map(\.identifier) == ["text.stats"])
        let (gone, output) = try await cluster.send(["echo", "text=hi"])
        #expect(gone == 2)
        #expect(output.contains { $0.contains("unknown_skill") })
        try await expectConverged(bus: cluster.bus, feed: cluster.feed, agents: ["alpha"], replicas: [watcher])
    }

    @Test("a second agent with another schema for a skill is refused it on the feed; its other skills register")
    func schemaConflict() async throws {
        let cluster = try await TestCluster()
        defer { cluster.terminate() }
        try await cluster.startWorker("alpha", ["--skills", "echo"])
        let feed = try FeedSubscriber(
            endpoint: cluster.feed, topics: ["agent.refused", "registry.heartbeat"], context: context)
        defer { feed.close() }
        var events = feed.events.makeAsyncIterator()
        // The first registry heartbeat shows the subscription is in place.
        _ = try await events.next()
        let client = try SkillbusClient(endpoint: cluster.bus, context: context)
        defer { client.close() }
        let watcher = try RegistryReplica(client: client, feedEndpoint: cluster.feed, context: context)
        defer { watcher.close() }
        #expect(await watcher.waitUntil(timeout: .seconds(10)) { $0.agents["alpha"] != nil })
        let rival = try AgentWorker(
            options: .init(name: "rival", coordinator: cluster.bus),
            skills: [
                MadeUpSkill(identifier: "echo", fields: [ParameterField("count", .integer)]),
                MadeUpSkill(identifier: "rival.own"),
            ],
            context: context, logger: Logger(label: "rival", level: .error))
        let running = Task { await rival.run() }
        defer { running.cancel() }
        #expect(await watcher.waitUntil(timeout: .seconds(10)) { $0.agents["rival"] != nil })
        #expect(watcher.registry.agents["rival"]?.skills.map(\.identifier) == ["rival.own"])
        #expect(watcher.registry.skills["echo"]?.providers == ["alpha"])
        var refusal: JSONValue?
        while let (topic, event) = try await events.next(), refusal == nil {
            if topic == "agent.refused" { refusal = event }
        }
        #expect(refusal?["agent"] == "rival")
        #expect(refusal?["error"]?["code"] == "schema_conflict")
    }

    @Test("text.report on one agent reads the file through file.read on another, in the caller's round")
    func composition() async throws {
        let sandbox = NSTemporaryDirectory() + "skillbus-sandbox-\(UUID().uuidString)"
        try FileManager.default.createDirectory(atPath: sandbox, withIntermediateDirectories: true)
        try Data("the quick fox and the lazy dog\nthe end\n".utf8).write(
            to: URL(fileURLWithPath: sandbox + "/story.txt"))
        let cluster = try await TestCluster()
        defer { cluster.terminate() }
        try await cluster.startWorker("writer", ["--skills", "text.report,text.stats"])
        try await cluster.startWorker("reader", ["--skills", "file.read", "--sandbox", sandbox])
        let feed = try FeedSubscriber(
            endpoint: cluster.feed, topics: ["invocation.dispatched", "request.dispatched", "registry.heartbeat"],
            context: context)
        defer { feed.close() }
        var events = feed.events.makeAsyncIterator()
        _ = try await events.next()  // the first registry heartbeat: the subscription is in place
        let (code, document) = try await cluster.sendJSON(["text.report", "path=story.txt", "--round-id", "round-42"])
        #expect(code == 0)
        #expect(document["agent"] == "writer")
        let report = document["result"]?["json"]
        #expect(report?["stats"]?["words"] == 9)
        #expect(report?["stats"]?["lines"] == 2)
        #expect(report?["stats"]?["topWords"]?.arrayValue?.first?["word"] == "the")
        // The sub-call went through the bus to the reader, in the same round.
        // The round's own invocation (invocation.dispatched), then the sub-call the skill sent (request.dispatched).
        var dispatched: [JSONValue] = []
        let deadline = ContinuousClock.now + .seconds(10)
        while dispatched.count < 2, ContinuousClock.now < deadline, let (topic, event) = try await events.next() {
            if topic.hasSuffix(".dispatched") { dispatched.append(event) }
        }
        let fileRead = dispatched.first { $0["skill"] == "file.read" }
        #expect(fileRead?["agent"] == "reader")
        #expect(fileRead?["round"] == "round-42")

        // A failing sub-call fails the composite, with the sub-call's reason.
        let (missingCode, missing) = try await cluster.sendJSON(["text.report", "path=nope.txt"])
        #expect(missingCode == 1)
        #expect(missing["error"]?["message"]?.stringValue?.contains("nope.txt") == true)
    }

    @Test("snapshot requests, registry commands and a flood of registrations: clear answers, a consistent registry")
    func registryBadInput() async throws {
        let cluster = try await TestCluster()
        defer { cluster.terminate() }
        try await cluster.startWorker("alpha", ["--skills", "echo"])
        let stranger = try RawPeer(cluster.bus, context: context)
        defer { stranger.close() }
        // Anyone may ask for a snapshot: one ENTRY per agent, then the summary.
        let entry = try await stranger.exchange(ClientMessage.snapshot(requestID: "s1").encoded())
        #expect(text(entry[1]) == "ENTRY" && text(entry[2]) == "s1")
        #expect(try JSONValue(parsing: entry[3])["agent"] == "alpha")
        let summary = try await stranger.next()
        #expect(text(summary[1]) == "SNAPSHOT")
        #expect(try JSONValue(parsing: summary[3])["agents"] == 1)

        func expectError(_ frames: [String], code: String, mentioning: String) async throws {
            let reply = try await stranger.exchange(toBus(frames))
            #expect(text(reply[1]) == "ERROR")
            let error = try JSONValue(parsing: reply.last!)
            #expect(error["code"]?.stringValue == code)
            #expect(error["message"]?.stringValue?.contains(mentioning) == true, "was: \(error)")
        }
        try await expectError(
            ["SKB2C", "SNAPSHOT", "s2", "extra"], code: "malformed_message", mentioning: "SNAPSHOT takes 3")
        try await expectError(["SKB2C", "AGENTS"], code: "malformed_message", mentioning: "AGENTS takes 3")
        // Worker commands from a peer that never registered.
        try await expectError(["SKB2W", "SKILLS", "[]"], code: "not_registered", mentioning: "READY")
        try await expectError(["SKB2W", "HEARTBEAT", "1000"], code: "not_registered", mentioning: "READY")
        try await expectError(["SKB2W", "HEARTBEAT", "5"], code: "malformed_message", mentioning: "at least 10")

        // 200 agents register at once, then half of them leave: every change is one update, nothing is lost.
        let client = try SkillbusClient(endpoint: cluster.bus, context: context)
        defer { client.close() }
        let watcher = try RegistryReplica(client: client, feedEndpoint: cluster.feed, context: context)
        defer { watcher.close() }
        #expect(await watcher.waitUntil(timeout: .seconds(10)))
        var flood: [RawPeer] = []
        defer { for peer in flood { peer.close() } }
        for index in 0..<200 {
            let peer = try RawPeer(cluster.bus, context: context)
            flood.append(peer)
            peer.socket.send(
                WorkerMessage.ready([
                    "name": .string("flood-\(index)"), "capacity": 1, "heartbeatMs": 60_000,
                    "skills": [["identifier": .string("flood.\(index % 10)")], ["identifier": "flood.common"]],
                ]).encoded())
        }
        for peer in flood { #expect(text(try await peer.next()[1]) == "WELCOME") }
        for peer in flood.prefix(100) { peer.socket.send(WorkerMessage.disconnect.encoded()) }
        let survivors = (100..<200).map { "flood-\($0)" } + ["alpha"]
        try await expectConverged(
            bus: cluster.bus, feed: cluster.feed, agents: survivors, replicas: [watcher], workerReplicas: ["alpha"])
        #expect(watcher.registry.skills["flood.common"]?.providers.count == 100)
        #expect(watcher.registry.skills["flood.3"]?.providers.count == 10)
    }

    @Test("skills --watch prints the registry on every change; agents lists load, heartbeat age and replica")
    func watchAndAgents() async throws {
        let cluster = try await TestCluster(coordinatorArguments: ["--heartbeat-ms", "200"])
        defer { cluster.terminate() }
        try await cluster.startWorker("alpha", ["--skills", "echo"])
        let watch = try SkillbusProcess(
            ["skills", "--watch", "--json", "--coordinator", cluster.bus, "--feed", cluster.feed], name: "watch")
        defer { watch.signal(SIGTERM) }
        _ = try await watch.waitForLine("the first registry") { $0.contains(#""agent":"alpha""#) }
        try await cluster.startWorker("beta", ["--skills", "math.eval"])
        let line = try await watch.waitForLine("the registry with beta") { $0.contains(#""agent":"beta""#) }
        let document = try JSONValue(parsing: line)
        #expect(document["skills"]?.arrayValue?.compactMap { $0["identifier"]?.stringValue } == ["echo", "math.eval"])
        watch.signal(SIGTERM)
        #expect(try await watch.waitForExit() == 0)

        // Both workers' replicas catch up; agents shows them in sync.
        try await waitUntil("both replicas in sync") {
            let agents = try await cluster.agents()["agents"]?.arrayValue ?? []
            return agents.count == 2 && agents.allSatisfy { $0["registryInSync"] == true }
        }
        let listing = try await cluster.agents()
        let alpha = listing["agents"]?.arrayValue?.first { $0["agent"] == "alpha" }
        #expect(alpha?["capacity"] == 4 && alpha?["inFlight"] == 0 && alpha?["skills"] == ["echo"])
        #expect((alpha?["lastHeartbeatAgeMs"]?.doubleValue ?? -1) >= 0)
        #expect(alpha?["state"]?["state"] == "idle")
        let (code, human) = try await runSkillbus(["agents", "--coordinator", cluster.bus])
        #expect(code == 0)
        #expect(human.contains { $0.hasPrefix("alpha") && $0.contains("0/4") && $0.contains("ok") })
    }
}
