import Foundation
import Testing

@testable import Skillbus
@testable import SkillbusCommands

@Suite("Command line and configuration")
struct CommandLineTests {
    @Test("key=value is a string, key:=JSON is any JSON value")
    func parameters() throws {
        let value = try RequestParameters.parse(["text=a=b", "n:=3", "list:=[1,\"x\"]", "flag:=true", "empty="])
        #expect(value == ["text": "a=b", "n": 3, "list": [1, "x"], "flag": true, "empty": ""])
    }

    @Test(
        "bad parameters are refused with the reason",
        arguments: [
            ("novalue", "is not key=value"), ("=x", "empty key"), ("n:={", "is not JSON"),
        ])
    func badParameters(item: String, reason: String) {
        #expect {
            try RequestParameters.parse([item])
        } throws: { error in
            (error as? SkillbusError)?.message.contains(reason) == true
        }
    }

    @Test("a command that names no positionals refuses one; send takes them")
    func positionals() throws {
        #expect {
            try AgentsCommand.spec.parse(["--json", "extra"])
        } throws: { error in
            (error as? UsageError)?.message.contains("unexpected argument 'extra'") == true
        }
        #expect(try SendCommand.spec.parse(["echo", "text=hi", "--json"]).positionals == ["echo", "text=hi"])
    }

    @Test("the feed renders round events on one readable line each")
    func feedLines() {
        let done = FeedCommand.render(
            topic: "invocation.done",
            event: [
                "time": "2026-11-29T12:00:01.004Z", "round": "r1", "invocation": "same-area", "skill": "math.eval",
                "agent": "alpha", "status": "ok", "durationMs": 0.5, "deduplicated": true,
            ])
        #expect(done.contains("alpha") && done.contains("same-area math.eval ok 0.50 ms (deduplicated)"))
        #expect(done.hasSuffix("round r1"))
        let finished = FeedCommand.render(
            topic: "round.done",
            event: ["round": "r1", "status": "ok", "summary": ["executions": 3, "deduplicated": 1]])
        #expect(finished.contains("ok: 3 execution(s), 1 deduplicated  round r1"))
        let cancelled = FeedCommand.render(
            topic: "invocation.cancelled", event: ["round": "r2", "invocation": "beta", "agent": "beta"])
        #expect(cancelled.contains("beta cancelled"))
    }

    @Test("@FILE reads a string or a JSON value from a file")
    func fileValues() throws {
        let text = NSTemporaryDirectory() + "skillbus-param-\(UUID().uuidString).txt"
        let json = text + ".json"
        try Data("two\nlines".utf8).write(to: URL(fileURLWithPath: text))
        try Data(#"{"n": [1, 2]}"#.utf8).write(to: URL(fileURLWithPath: json))
        defer {
            try? FileManager.default.removeItem(atPath: text)
            try? FileManager.default.removeItem(atPath: json)
        }
        let value = try RequestParameters.parse(["text=@\(text)", "data:=@\(json)"])
        #expect(value == ["text": "two\nlines", "data": ["n": [1, 2]]])
        #expect {
            try RequestParameters.parse(["text=@/nonexistent/skillbus"])
        } throws: { error in
            (error as? SkillbusError)?.message.contains("cannot read file '/nonexistent/skillbus'") == true
        }
    }

    @Test("a repeated key is refused")
    func repeatedKey() {
        #expect(throws: SkillbusError.self) { try RequestParameters.parse(["a=1", "a=2"]) }
    }

    @Test("options parse, and usage errors name the option")
    func options() throws {
        let parsed = try SendCommand.spec.parse(["echo", "text=x", "--json", "--timeout", "2", "--round-id=abc"])
        #expect(parsed.positionals == ["echo", "text=x"])
        #expect(parsed.flag("--json"))
        #expect(parsed.value("--timeout") == "2")
        #expect(parsed.value("--round-id") == "abc")
        for (arguments, message) in [
            (["--bogus"], "unknown option '--bogus'"), (["--timeout"], "needs a value"),
            (["--json=1"], "takes no value"), (["--timeout", "1", "--timeout", "2"], "given twice"),
        ] {
            #expect {
                try SendCommand.spec.parse(arguments)
            } throws: { error in
                (error as? UsageError)?.message.contains(message) == true
            }
        }
    }

    @Test("help is generated from the declaration")
    func help() {
        let help = WorkerCommand.spec.help
        #expect(help.contains("USAGE: skillbus worker"))
        #expect(help.contains("--capacity N"))
        #expect(help.contains("EXAMPLE:"))
        #expect(!SkillbusCLI.overview.contains("bench-baseline"))
    }

    @Test("-h and --help show a command's help anywhere on its line, before anything else is checked or sent")
    func helpEverywhere() async {
        // `send -h` used to be a skill named -h; `agents -h` an unexpected argument.
        for line in [["-h"], ["--help"], ["no-such-thing", "-h"], ["--bogus", "--help"], ["x=1", "--json", "-h"]] {
            #expect(SkillbusCLI.asksForHelp(line), "\(line)")
        }
        #expect(!SkillbusCLI.asksForHelp(["echo", "--", "-h"]), "after --, -h is a positional")
        #expect(!SkillbusCLI.asksForHelp(["echo", "text=-h"]))
        // Every command answers it before anything else is checked or sent (one shown here, to keep logs short).
        #expect(await SkillbusCLI.main(["agents", "--no-such-option", "-h"]) == 0)
        #expect(await SkillbusCLI.main(["send", "echo", "--", "-h"]) != 0)
    }

    @Test("agents shows what each agent runs now, not only the skill its state names")
    func agentsShowWhatRuns() throws {
        let listing = try JSONValue(
            parsing: #"{"registry": {"seq": 3}, "agents": [{"agent": "alpha", "capacity": 4, "inFlight": 3, "#
                + #""running": {"sleep": 2, "echo": 1}, "state": {"state": "executingSkill", "skill": "echo"}, "#
                + #""skills": ["echo", "sleep"], "lastHeartbeatAgeMs": 100}]}"#)
        let text = AgentsCommand.render(listing)
        #expect(text.contains("running echo, sleep×2"), "\(text)")
        #expect(!text.contains("executingSkill(echo)"), "\(text)")
    }

    @Test("agents says who leads a coordinator group, since when, and whether the journal is behind")
    func agentsShowTheLeader() throws {
        let listing = try JSONValue(
            parsing: #"{"registry": {"seq": 0}, "agents": [], "group": {"group": "g1", "leading": true, "#
                + #""journalBacklog": 12, "leader": {"name": "a", "bus": "tcp://h:5555", "feed": "tcp://h:5556", "#
                + #""epoch": 2, "since": "2026-12-05T21:00:00.000Z"}}}"#)
        #expect(
            AgentsCommand.render(listing)
                == "group g1: led by 'a' (epoch 2) since 2026-12-05T21:00:00.000Z; journal behind by 12 round(s)\n"
                + "No agents registered.")
    }

    @Test("a skipped plan step says skipped and why; skills shows defaults and no dangling dash")
    func readableLines() {
        let stopped = RoundDocument.Invocation(id: "b", skill: "echo", status: .skipped)
        #expect(SendCommand.line(for: stopped) == "– b (echo) skipped: the round stopped")
        let after = RoundDocument.Invocation(
            id: "c", skill: "echo", status: .skipped,
            error: SkillbusError(.skillFailed, "skipped: step 'a' did not succeed"))
        #expect(SendCommand.line(for: after) == "– c (echo) skipped: step 'a' did not succeed")
        let ok = RoundDocument.Invocation(id: "a", skill: "echo", agent: "alpha", status: .ok, durationMs: 0.5)
        #expect(SendCommand.line(for: ok) == "✓ a (echo on alpha, 0.50 ms)")

        let descriptor = SkillDescriptor(
            identifier: "count", displayName: "Count", description: "",
            parameters: ParameterSchema([
                ParameterField("from", .integer, required: false, description: "Where to start", default: 5),
                ParameterField("ms", .integer, required: false, default: 300),
            ]))
        let registry = Registry(agents: [Registry.Agent(name: "gamma", capacity: 2, skills: [descriptor])])
        let text = SkillsCommand.render(registry)
        #expect(text.hasPrefix("count\n"), "\(text)")
        #expect(text.contains("    from: integer, optional, default 5 — Where to start"), "\(text)")
        #expect(text.contains("    ms: integer, optional, default 300\n") || text.hasSuffix("ms: integer, optional, default 300"))
    }

    @Test(
        "endpoints are checked before any socket exists",
        arguments: [
            ("tcp://127.0.0.1:5555", true), ("tcp://127.0.0.1:*", true), ("ipc:///tmp/x", true), ("inproc://a", true),
            ("tcp://127.0.0.1", false), ("tcp://:5555", false), ("tcp://h:70000", false), ("http://h:1", false),
        ])
    func endpoints(endpoint: String, valid: Bool) {
        #expect((Endpoint.problem(endpoint) == nil) == valid)
    }

    func write(_ text: String) throws -> String {
        let path = NSTemporaryDirectory() + "skillbus-config-\(UUID().uuidString).json"
        try Data(text.utf8).write(to: URL(fileURLWithPath: path))
        return path
    }

    @Test(
        "configs are refused with the key's path",
        arguments: [
            (
                #"{"version":1,"workers":[{"name":"a"},{"name":"b","capacity":"two"}]}"#,
                "workers[1].capacity: expected an integer"
            ),
            (
                #"{"version":1,"coordinator":{"bus":"tcp://localhost"}}"#,
                "coordinator.bus: 'tcp://localhost' has no port"
            ),
            (#"{"version":1,"coordinator":{"colour":"red"}}"#, "coordinator.colour: unknown key"),
            (
                #"{"version":1,"workers":[{"name":"a","skills":["echo","fly"]}]}"#,
                "workers[0].skills[1]: unknown built-in skill 'fly'"
            ),
            (#"{"version":2}"#, "version: unsupported version 2"),
            (#"{"workers":[]}"#, "version: missing"),
            (#"{"version":1,"workers":[{"name":"a"},{"name":"a"}]}"#, "used twice"),
            (#"{"version":1,"#, "invalid JSON"),
        ])
    func badClusterConfigs(text: String, message: String) throws {
        let path = try write(text)
        defer { try? FileManager.default.removeItem(atPath: path) }
        #expect {
            try ClusterConfiguration.load(path: path)
        } throws: { error in
            guard let error = error as? SkillbusError else { return false }
            return error.code == .invalidConfiguration && error.message.contains(message)
        }
    }

    @Test("absent keys keep their defaults; workers default to the cluster's bus")
    func defaults() throws {
        let path = try write(
            #"{"version":1,"coordinator":{"bus":"tcp://127.0.0.1:7000"},"workers":[{"name":"a","capacity":2}]}"#)
        defer { try? FileManager.default.removeItem(atPath: path) }
        let cluster = try ClusterConfiguration.load(path: path)
        #expect(cluster.coordinator.bus == "tcp://127.0.0.1:7000")
        #expect(cluster.coordinator.feed == "tcp://127.0.0.1:5556")
        #expect(cluster.coordinator.maxMessageBytes == 1 << 20)
        #expect(cluster.workers.first?.coordinator == "tcp://127.0.0.1:7000")
        #expect(cluster.workers.first?.capacity == 2)
    }

    @Test("the shipped configs load", arguments: ["coordinator.json", "worker.json", "local.json", "llm-worker.json", "mcp-worker.json"])
    func shippedConfigs(name: String) throws {
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent()
        let path = root.appendingPathComponent("configs/\(name)").path
        switch name {
        case "coordinator.json": _ = try CoordinatorConfiguration.load(path: path)
        case "worker.json": _ = try WorkerConfiguration.load(path: path)
        case "llm-worker.json": #expect(try WorkerConfiguration.load(path: path).planner?["openai"] != nil)
        case "mcp-worker.json": #expect(try WorkerConfiguration.load(path: path).mcpServers.map(\.name) == ["fixture", "files", "remote"])
        default:
            let cluster = try ClusterConfiguration.load(path: path)
            #expect(cluster.workers.count == 3)
            #expect(Set(cluster.workers.map(\.skills)).count == 3)
        }
    }
}
