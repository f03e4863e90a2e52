import Foundation
import Skillbus
import SkillbusZMQ
import Synchronization
import Testing

/// MCP servers as skills, with real software on both sides: a coordinator and a worker process that mounts
/// Tests/mcp/fixture_server.py (written with the official Python SDK) over stdio or Streamable HTTP, called
/// through the bus like any skill.
@Suite("MCP servers as skills", .serialized, .timeLimit(.minutes(3)))
struct MCPSkillTests {
    static let fixture = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("mcp/fixture_server.py").path

    /// A coordinator, a worker "mounter" whose config mounts the fixture as `fx` (stdio unless `url` is
    /// given), and a client; the fixture notes its events in `log`.
    struct Setup {
        let cluster: TestCluster
        let client: SkillbusClient
        let log: String
        let worker: SkillbusProcess

        /// The fixture's event lines so far.
        var events: [String] {
            ((try? String(contentsOfFile: log, encoding: .utf8)) ?? "").split(separator: "\n").map(String.init)
        }
    }

    /// Over HTTP (`url`), the fixture runs on its own and writes its events in `httpLog`; the worker sends
    /// the token it finds in its environment's `workerEnvironment`.
    func withWorker(
        url: String? = nil, httpLog: String? = nil, workerEnvironment: [String: String] = [:],
        otherServers: [JSONValue] = [], _ body: (Setup) async throws -> Void
    ) async throws {
        let directory = NSTemporaryDirectory() + "skillbus-mcp-\(UUID().uuidString.prefix(8))"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let log = httpLog ?? directory + "/fixture.log"
        var server: [String: JSONValue] = ["name": "fx", "trusted": true, "cacheMs": 60_000]
        if let url {
            server["url"] = .string(url)
            if !workerEnvironment.isEmpty { server["bearerTokenEnv"] = "FX_TOKEN" }
        } else {
            server["command"] = "python3"
            server["args"] = [.string(Self.fixture)]
            server["env"] = ["FIXTURE_LOG": .string(log)]
        }
        let config = directory + "/mounter.json"
        try Data(
            JSONValue.object([
                "version": 1, "name": "mounter", "skills": ["echo"],
                "mcpServers": .array([.object(server)] + otherServers),
                // The config's policies apply to mounted tools as to any skill.
                "policies": ["fx.flaky": ["retry": ["attempts": 3, "backoffMs": 100, "on": ["skill_failed"]]]],
            ]).serialized()
        ).write(to: URL(fileURLWithPath: config))
        let cluster = try await TestCluster()
        defer { cluster.terminate() }
        let worker = try SkillbusProcess(
            ["worker", "--name", "mounter", "--coordinator", cluster.bus, "--heartbeat-ms", "200", "--config", config],
            name: "mounter", environment: workerEnvironment)
        cluster.workers.withLock { $0["mounter"] = worker }
        try await cluster.coordinator.waitForLine("mounter to join") { $0.contains("agent 'mounter' joined") }
        let client = try await SkillbusClient.connect(endpoint: cluster.bus, context: try ZMQContext())
        defer { client.close() }
        try await waitForSkill("fx.echo", client)
        try await body(Setup(cluster: cluster, client: client, log: log, worker: worker))
    }

    func waitForSkill(_ identifier: String, _ client: SkillbusClient) async throws {
        try await waitUntil("\(identifier) in the registry", timeout: .seconds(30)) {
            let catalog = try await client.skills()
            return catalog.skills.contains { $0.descriptor.identifier == identifier && !$0.providers.isEmpty }
        }
    }

    /// The text parts a call streamed.
    final class Lines: Sendable {
        let seen = Mutex<[String]>([])
        func note(_ batch: OutputBatch) {
            seen.withLock { $0 += batch.parts.compactMap { if case .text(let text) = $0 { text } else { nil } } }
        }
        var all: [String] { seen.withLock { $0 } }
    }

    /// The calls every transport must get right: text, JSON, an error, progress, the registry's view.
    func basics(_ setup: Setup) async throws {
        let client = setup.client
        let (code, sent) = try await setup.cluster.sendJSON(["fx.echo", "text=hello over MCP"])
        #expect(code == 0 && sent["result"] == ["type": "text", "text": "hello over MCP"], "\(sent)")

        let added = try await client.invoke("fx.add", parameters: ["a": 2, "b": 40])
        #expect(added.status == .ok && added.result == .json(["sum": 42]))
        // The default from the tool's schema applies before the call.
        #expect(try await client.invoke("fx.add", parameters: ["a": 5]).result == .json(["sum": 5]))

        let failed = try await client.invoke("fx.fail", parameters: ["reason": "no thanks"])
        #expect(failed.status == .error && failed.error?.code == .skillFailed)
        #expect(failed.error?.message.contains("refused: no thanks") == true, "\(String(describing: failed.error))")

        // Our own validation runs first: a missing required parameter never reaches the server.
        let invalid = try await client.invoke("fx.add", parameters: ["b": 1])
        #expect(invalid.error?.code == .invalidParameters)

        let lines = Lines()
        let counted = try await client.invoke("fx.countdown", parameters: ["n": 3], onOutput: lines.note)
        #expect(counted.result == .text("liftoff"))
        #expect(lines.all == ["3...", "2...", "1..."])

        let catalog = try await client.skills()
        func descriptor(_ identifier: String) -> SkillDescriptor? {
            catalog.skills.first { $0.descriptor.identifier == identifier }?.descriptor
        }
        // readOnlyHint → pure (the server is trusted), idempotentHint → idempotent.
        #expect(descriptor("fx.echo")?.pure == true && descriptor("fx.echo")?.idempotent == true)
        #expect(descriptor("fx.count")?.pure == false && descriptor("fx.count")?.idempotent == true)
        #expect(descriptor("fx.fail")?.pure == false && descriptor("fx.fail")?.idempotent == false)
        #expect(
            descriptor("fx.add")?.parameters.fields == [
                ParameterField("a", .integer, description: "A"),
                ParameterField("b", .integer, required: false, description: "B", default: 0),
            ])
    }

    @Test("stdio: text, JSON, error and progress; annotations and schema carried over")
    func stdio() async throws {
        try await withWorker { setup in try await basics(setup) }
    }

    @Test("the deadline and CANCEL reach the server as notifications/cancelled")
    func cancel() async throws {
        try await withWorker { setup in
            let late = try await setup.client.invoke(
                "fx.sleep", parameters: ["seconds": 30, "tag": "deadline"], timeout: .milliseconds(1500))
            #expect(late.error?.code == .timeout)
            try await waitUntil("the server to hear of the deadline", timeout: .seconds(10)) {
                setup.events.contains("cancelled sleep deadline")
            }

            let round = "mcp-cancel-\(UUID().uuidString.prefix(8))"
            let call = Task {
                try await setup.client.invoke(
                    "fx.sleep", parameters: ["seconds": 30, "tag": "cancel"], roundID: round, timeout: .seconds(60))
            }
            try await waitUntil("the sleep to run") { try await setup.cluster.inFlight(agent: "mounter") == 1 }
            _ = try await setup.client.cancelRound(round)
            let outcome = try await call.value
            #expect(outcome.error?.code == .cancelled)
            try await waitUntil("the server to hear of the cancel", timeout: .seconds(10)) {
                setup.events.contains("cancelled sleep cancel")
            }
            // The server still serves.
            #expect(try await setup.client.invoke("fx.echo", parameters: ["text": "after"]).result == .text("after"))
        }
    }

    @Test("a crashed server, or one that writes garbage, fails that call and is restarted")
    func restarts() async throws {
        try await withWorker { setup in
            let crashed = try await setup.client.invoke("fx.crash")
            #expect(crashed.error?.code == .skillFailed)
            #expect(
                crashed.error?.message.contains("exited with code 3") == true, "\(String(describing: crashed.error))")
            // The next call waits for the restarted server.
            let echoed = try await setup.client.invoke("fx.echo", parameters: ["text": "back"])
            #expect(echoed.result == .text("back"), "\(String(describing: echoed.error))")
            #expect(setup.events.filter { $0 == "start" }.count == 2)

            let garbage = try await setup.client.invoke("fx.garbage")
            #expect(garbage.error?.code == .skillFailed)
            #expect(garbage.error?.message.contains("no MCP message") == true, "\(String(describing: garbage.error))")
            #expect(try await setup.client.invoke("fx.echo", parameters: ["text": "again"]).result == .text("again"))
            #expect(setup.events.filter { $0 == "start" }.count == 3)
        }
    }

    @Test("an idempotent tool with a retry policy is retried on the restarted server")
    func retry() async throws {
        try await withWorker { setup in
            let outcome = try await setup.client.invoke("fx.flaky", parameters: ["key": "r1"])
            #expect(outcome.result == .text("steady r1"), "\(String(describing: outcome.error))")
            #expect(setup.events.filter { $0 == "flaky crash r1" }.count == 1)
            #expect(setup.events.filter { $0 == "start" }.count == 2)
        }
    }

    @Test("a server that cannot start is retried and logged; the worker serves everything else")
    func unstartable() async throws {
        let ghost: JSONValue = ["name": "ghost", "command": "/nonexistent/mcp-server"]
        try await withWorker(otherServers: [ghost]) { setup in
            let line = try await setup.worker.waitForLine("the ghost's failure") { $0.contains("MCP server 'ghost'") }
            #expect(
                line.contains("cannot start '/nonexistent/mcp-server'") && line.contains("connecting again"), "\(line)")
            #expect(try await setup.client.invoke("echo", parameters: ["text": "built in"]).result == .text("built in"))
            #expect(
                try await setup.client.invoke("fx.echo", parameters: ["text": "mounted"]).result == .text("mounted"))
            let catalog = try await setup.client.skills()
            #expect(!catalog.skills.contains { $0.descriptor.identifier.hasPrefix("ghost.") })
        }
    }

    @Test("two identical calls in one round run the tool once; another round runs it again")
    func dedup() async throws {
        try await withWorker { setup in
            let round = "mcp-dedup-\(UUID().uuidString.prefix(8))"
            async let first = setup.client.invoke("fx.count", parameters: ["key": "k1"], roundID: round)
            async let second = setup.client.invoke("fx.count", parameters: ["key": "k1"], roundID: round)
            let (one, two) = try await (first, second)
            #expect(one.result == .text("counted k1") && two.result == one.result)
            #expect(setup.events.filter { $0 == "count k1" }.count == 1)
            _ = try await setup.client.invoke("fx.count", parameters: ["key": "k1"])
            #expect(setup.events.filter { $0 == "count k1" }.count == 2)
        }
    }

    @Test("a trusted server's read-only tool is answered from the bus's cache in later rounds")
    func cache() async throws {
        try await withWorker { setup in
            let first = try await setup.client.invoke("fx.echo", parameters: ["text": "cache me"])
            let second = try await setup.client.invoke("fx.echo", parameters: ["text": "cache me"])
            #expect(first.result == .text("cache me") && second.result == first.result)
            #expect(setup.events.filter { $0 == "echo cache me" }.count == 1)
            // fx.count is idempotent but not read-only: every round runs it.
            _ = try await setup.client.invoke("fx.count", parameters: ["key": "k2"])
            _ = try await setup.client.invoke("fx.count", parameters: ["key": "k2"])
            #expect(setup.events.filter { $0 == "count k2" }.count == 2)
        }
    }

    @Test("list_changed: a tool the server adds becomes a skill")
    func listChanged() async throws {
        try await withWorker { setup in
            let grown = try await setup.client.invoke("fx.grow", parameters: ["name": "greet"])
            #expect(grown.result == .text("added greet"))
            try await waitForSkill("fx.greet", setup.client)
            #expect(try await setup.client.invoke("fx.greet").result == .text("hello from greet"))
        }
    }

    @Test("Streamable HTTP with a bearer token: the same calls, list_changed, and the deadline reaching the server")
    func http() async throws {
        let log = NSTemporaryDirectory() + "skillbus-mcp-http-\(UUID().uuidString.prefix(8)).log"
        defer { try? FileManager.default.removeItem(atPath: log) }
        let server = try SkillbusProcess(
            [Self.fixture, "--http"], name: "fixture-http",
            environment: ["FIXTURE_LOG": log, "FIXTURE_TOKEN": "s3cret"],
            executable: "/usr/bin/env", prefix: ["python3"])
        defer { server.signal(SIGTERM) }
        let ready = try await server.waitForLine("the fixture to listen") { $0.hasPrefix("listening on ") }
        let url = String(ready.dropFirst("listening on ".count))
        try await withWorker(url: url, httpLog: log, workerEnvironment: ["FX_TOKEN": "s3cret"]) { setup in
            try await basics(setup)
            let grown = try await setup.client.invoke("fx.grow", parameters: ["name": "greet"])
            #expect(grown.result == .text("added greet"))
            try await waitForSkill("fx.greet", setup.client)

            let late = try await setup.client.invoke(
                "fx.sleep", parameters: ["seconds": 30, "tag": "http"], timeout: .milliseconds(1500))
            #expect(late.error?.code == .timeout)
            try await waitUntil("the server to hear of the deadline", timeout: .seconds(10)) {
                setup.events.contains("cancelled sleep http")
            }
            #expect(!setup.events.contains("refused a request without the token"))

            // The server forgets our session (404): that call fails saying so; the worker starts a new
            // session, and the next call goes through.
            #expect(try await setup.client.invoke("fx.forget").result == .text("will forget"))
            let forgotten = try await setup.client.invoke("fx.echo", parameters: ["text": "who?"])
            #expect(forgotten.error?.message.contains("no longer knows our session") == true, "\(String(describing: forgotten))")
            #expect(setup.events.contains("forgot a session"))
            let renewed = try await setup.client.invoke("fx.echo", parameters: ["text": "new session"])
            #expect(renewed.result == .text("new session"), "\(String(describing: renewed.error))")

            // The server dies: a call fails saying so, and the worker serves on.
            server.signal(SIGKILL)
            _ = try await server.waitForExit()
            let gone = try await setup.client.invoke("fx.echo", parameters: ["text": "anyone?"], timeout: .seconds(5))
            #expect(gone.status == .error, "\(String(describing: gone.result))")
            #expect(gone.error?.message.contains("cannot reach") == true, "\(String(describing: gone.error))")
            #expect(
                try await setup.client.invoke("echo", parameters: ["text": "still here"]).result == .text("still here"))
        }
    }
}
