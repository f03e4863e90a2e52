import Foundation
import Skillbus
import Testing

/// `skillbus mcp` against the official MCP SDK's client (Tests/interop/mcp_client_check.py) and against
/// hand-written JSON-RPC lines, on a real coordinator and workers.
@Suite("skillbus mcp serves MCP clients", .serialized, .timeLimit(.minutes(3)))
struct MCPServerIntegrationTests {
    static let script = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("interop/mcp_client_check.py").path

    /// The check script's report: its JSON lines by step.
    struct Report {
        let process: SkillbusProcess

        func step(_ name: String) async throws -> JSONValue {
            let line = try await process.waitForLine("step '\(name)'") {
                $0.hasPrefix("{") && $0.contains(#""step": "\#(name)""#)
            }
            return try JSONValue(parsing: line)
        }

        func steps(_ name: String) -> [JSONValue] {
            process.output.filter { $0.contains(#""step": "\#(name)""#) }.compactMap { try? JSONValue(parsing: $0) }
        }
    }

    func requireSDK() async throws {
        let check = try SkillbusProcess(
            ["-c", "import mcp"], name: "mcp SDK check", executable: "/usr/bin/env", prefix: ["python3"])
        try #require(try await check.waitForExit() == 0, "the MCP SDK is missing: python3 -m pip install mcp")
    }

    func check(_ mode: String, _ cluster: TestCluster, _ arguments: [String] = []) throws -> Report {
        let process = try SkillbusProcess(
            ["-u", Self.script, mode, skillbusBinary, "--", "--coordinator", cluster.bus, "--feed", cluster.feed]
                + arguments, name: "mcp \(mode) check", executable: "/usr/bin/env", prefix: ["python3"])
        return Report(process: process)
    }

    @Test("the SDK's client lists, calls, streams, cancels, asks an agent and retries through skillbus mcp")
    func sdkClient() async throws {
        try await requireSDK()
        let sandbox = NSTemporaryDirectory() + "skillbus-mcp-\(UUID().uuidString.prefix(8))"
        defer { try? FileManager.default.removeItem(atPath: sandbox) }
        let cluster = try await scenarioCluster(sandbox)
        defer { cluster.terminate() }
        let report = try check("sdk", cluster, ["--page-size", "2"])
        defer { report.process.signal(SIGKILL) }
        try await expectScenario(report, cluster, sandbox: sandbox)
        _ = try await report.step("done")
        #expect(try await report.process.waitForExit() == 0)
        // Each of the two calls given up on ran once and was stopped: the sleeper's only slot is free again.
        #expect(try await cluster.inFlight(agent: "sleeper") == 0)
    }

    /// A cluster for the SDK's scenario: tools (with a sandbox for file.write), a one-slot sleeper, an agent.
    func scenarioCluster(_ sandbox: String) async throws -> TestCluster {
        let cluster = try await TestCluster()
        try FileManager.default.createDirectory(atPath: sandbox, withIntermediateDirectories: true)
        try await cluster.startWorker(
            "tools", ["--skills", "echo,math.eval,text.lines,file.write", "--sandbox", sandbox])
        // One invocation at a time: a short sleep after a long one finishes in time only if that one was cancelled.
        try await cluster.startWorker("sleeper", ["--skills", "sleep", "--capacity", "1"])
        try await cluster.startSayingWorker("sayer")
        return cluster
    }

    /// What the SDK's client saw in its scenario (mcp_client_check.py `checks`), over either transport.
    func expectScenario(_ report: Report, _ cluster: TestCluster, sandbox: String) async throws {
        let initialize = try await report.step("initialize")
        #expect(initialize["version"] == "2025-11-25" && initialize["server"] == "skillbus")
        #expect(initialize["listChanged"] == true)

        let tools = try await report.step("tools")
        #expect(tools["names"] == ["ask.sayer", "echo", "file.write", "math.eval", "sleep", "text.lines"])
        #expect(tools["pages"] == 3)
        #expect(tools["echoSchema"]?["required"] == ["text"] && tools["echoSchema"]?["additionalProperties"] == false)
        #expect(tools["echoSchema"]?["properties"]?["text"]?["type"] == "string")
        #expect(tools["echoHints"]?["idempotentHint"] == true && tools["echoHints"]?["destructiveHint"] == false)

        _ = try await report.step("waiting for worker")
        try await cluster.startWorker("late", ["--skills", "text.stats"])
        let changed = try await report.step("list_changed")
        #expect(changed["names"]?.arrayValue?.contains("text.stats") == true)

        let text = try await report.step("text")
        #expect(text["text"] == "hello" && text["isError"] == false && text["structured"] == .null)
        let json = try await report.step("json")
        #expect(json["structured"]?["value"] == 9 && json["isError"] == false)

        let invalid = try await report.step("invalid")
        #expect(invalid["isError"] == true && invalid["meta"]?["skillbus/error"]?["code"] == "invalid_parameters")
        let lines = invalid["text"]?.stringValue?.split(separator: "\n") ?? []
        #expect(lines.count == 4, "the code, then each of the three problems: \(lines)")
        #expect(lines.contains { $0.contains("unknown parameter 'extra'") })
        let failed = try await report.step("failed")
        #expect(failed["isError"] == true && failed["text"]?.stringValue?.contains("cannot evaluate '1 +'") == true)

        let progress = try await report.step("progress")
        #expect(progress["progress"]?.arrayValue?.compactMap { $0["message"]?.stringValue } == ["one", "two", "three"])
        #expect(progress["structured"]?["lines"] == 3)

        _ = try await report.step("cancelled")
        let afterCancel = try await report.step("after cancel")
        #expect(afterCancel["isError"] == false && afterCancel["structured"]?["sleptMs"] == 10)
        let timedOut = try await report.step("client timeout")
        #expect(timedOut["raised"] == true)
        let afterTimeout = try await report.step("after timeout")
        #expect(afterTimeout["isError"] == false && afterTimeout["structured"]?["sleptMs"] == 20)

        let agent = try await report.step("agent")
        #expect(agent["text"] == "hi!" && agent["meta"]?["skillbus/agent"] == "sayer")

        let retry = try await report.step("retry")
        #expect(retry["first"]?["meta"]?["skillbus/round"] == retry["again"]?["meta"]?["skillbus/round"])
        #expect(retry["first"]?["meta"]?["skillbus/stored"] == false)
        #expect(retry["again"]?["meta"]?["skillbus/stored"] == true && retry["again"]?["text"] == "retried")
        #expect(retry["named"]?["meta"]?["skillbus/round"] == "mcp-named-1")

        let asked = try await report.step("elicitation")
        #expect(asked["message"]?.stringValue?.contains("file.write") == true)
        let confirmed = try await report.step("confirmed")
        #expect(confirmed["isError"] == false && confirmed["structured"]?["bytes"] == 8)
        #expect(try String(contentsOfFile: sandbox + "/mcp.txt", encoding: .utf8) == "from mcp")

    }

    @Test("the SDK's Streamable HTTP client does the same over skillbus mcp --http, with a token and resumption")
    func httpClient() async throws {
        try await requireSDK()
        let sandbox = NSTemporaryDirectory() + "skillbus-mcp-\(UUID().uuidString.prefix(8))"
        defer { try? FileManager.default.removeItem(atPath: sandbox) }
        let cluster = try await scenarioCluster(sandbox)
        defer { cluster.terminate() }
        let (clientToken, readerToken) = ("client-" + UUID().uuidString, "reader-" + UUID().uuidString)
        let clientFile = sandbox + "/client.token"
        let readerFile = sandbox + "/reader.token"
        try clientToken.write(toFile: clientFile, atomically: true, encoding: .utf8)
        try readerToken.write(toFile: readerFile, atomically: true, encoding: .utf8)
        // Streams are closed after 0.5 s, so the slower calls' clients must resume them with Last-Event-ID.
        let server = try SkillbusProcess(
            [
                "mcp", "--coordinator", cluster.bus, "--feed", cluster.feed, "--http", "127.0.0.1:0", "--page-size",
                "2",
                "--http-token", "client:" + clientFile, "--http-token", "reader:" + readerFile,
                "--http-stream-limit", "0.5",
            ], name: "mcp --http")
        defer { server.signal(SIGKILL) }
        let ready = try await server.waitForLine("mcp ready") { $0.hasPrefix("skillbus mcp ready: ") }
        let url = String(ready.dropFirst("skillbus mcp ready: ".count).prefix { $0 != " " })

        let report = Report(
            process: try SkillbusProcess(
                ["-u", Self.script, "http", url, clientToken], name: "mcp http check", executable: "/usr/bin/env",
                prefix: ["python3"]))
        defer { report.process.signal(SIGKILL) }
        try await expectScenario(report, cluster, sandbox: sandbox)
        _ = try await report.step("done")
        #expect(try await report.process.waitForExit() == 0)

        let raw = Report(
            process: try SkillbusProcess(
                ["-u", Self.script, "raw-http", url, clientToken, readerToken], name: "mcp raw-http check",
                executable: "/usr/bin/env", prefix: ["python3"]))
        defer { raw.process.signal(SIGKILL) }
        _ = try await raw.step("done")
        var answers: [String: JSONValue] = [:]
        for step in raw.steps("raw-http") { answers[step["name"]?.stringValue ?? ""] = step }
        func status(_ name: String) -> JSONValue? { answers[name]?["status"] }
        #expect(status("no token") == 401 && status("wrong token") == 401)
        #expect(status("foreign origin") == 403)
        #expect(status("no session") == 400 && status("unknown session") == 404)
        #expect(status("initialize") == 200 && answers["initialize"]?["session"]?.stringValue?.isEmpty == false)
        #expect(status("not json") == 400 && answers["not json"]?["answer"]?["error"]?["code"] == -32700)
        #expect(status("bad version") == 400)
        #expect(status("initialized") == 202)
        #expect(status("tools/list") == 200 && answers["tools/list"]?["answer"]?["result"]?["nextCursor"] != nil)
        #expect(status("reader list") == 200)
        #expect(status("another token's session") == 404, "a session answers only the token that started it")
        #expect(status("bad initialize") == 400 && answers["bad initialize"]?["session"] == .null)
        #expect(status("reader call") == 403 && answers["reader call"]?["answer"]?["error"]?["code"] == -32600)
        #expect(status("get without event-stream") == 406 && status("call accepting only JSON") == 406)
        #expect(status("delete") == 204 && status("after delete") == 404)

        let resumed = try await raw.step("resume")
        let before = resumed["before"]?.arrayValue ?? []
        let after = resumed["after"]?.arrayValue ?? []
        #expect(!before.isEmpty && !after.isEmpty, "the stream was cut and resumed: \(resumed.jsonString)")
        let messages = (before + after).compactMap { $0["params"]?["message"]?.stringValue }
        #expect(messages == ["a", "b", "c", "d"], "no progress lost or repeated across the resumption")
        #expect(after.last?["result"]?["structuredContent"]?["lines"] == 4)
    }

    @Test("with a client key it serves a bus with keys; without one it serves no tools, and says why")
    func keys() async throws {
        try await requireSDK()
        let directory = NSTemporaryDirectory() + "skillbus-mcp-keys-\(UUID().uuidString.prefix(8))"
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let keys = try TestKeys(
            directory: directory, keys: [("w1", .worker, ["w1"]), ("assistant", .client, [])],
            feedRoles: Set(AccessPolicy.Role.allCases))
        var configuration = CoordinatorConfiguration()
        configuration.heartbeatMs = 200
        try keys.writeCoordinatorConfiguration(configuration, to: directory + "/coordinator.json")
        let cluster = try await TestCluster(coordinatorArguments: ["--config", directory + "/coordinator.json"])
        defer { cluster.terminate() }
        try await cluster.startWorker("w1", ["--skills", "echo"] + keys.arguments("w1"))

        let keyed = try check("call", cluster, keys.arguments("assistant"))
        defer { keyed.process.signal(SIGKILL) }
        let listed = try await keyed.step("call tools")
        // The SDK's Client probes server/discover (2026-07-28) first, and falls back to the handshake.
        #expect(listed["names"] == ["echo"] && listed["version"] == "2025-11-25")
        let call = try await keyed.step("call")
        #expect(call["text"] == "keyed" && call["meta"]?["skillbus/agent"] == "w1")

        let bare = try check("call", cluster, ["--connect-timeout", "0.5"])
        defer { bare.process.signal(SIGKILL) }
        #expect(try await bare.step("call tools")["names"] == [])
        #expect(try await bare.step("call")["refused"]?.stringValue?.contains("unknown tool 'echo'") == true)
        _ = try await bare.process.waitForLine("the missing registry", timeout: .seconds(5)) {
            $0.contains("no registry from the coordinator")
        }
    }

    @Test("command-line mistakes are refused at once, before anything connects, each naming what is wrong")
    func usage() async throws {
        let cases: [([String], String)] = [
            (["--http", "0.0.0.0:0"], "open to the network without a token"),
            (["--http", "127.0.0.1:0", "--http-token", "client:/nonexistent/token"], "must hold a token"),
            (["--http", "127.0.0.1:0", "--http-token", "owner:/tmp/x"], "ROLE client or reader"),
            (["--http-origin", "http://example.com"], "needs --http"),
            (["--reuse-window", "-1"], "--reuse-window"),
        ]
        for (arguments, says) in cases {
            let (code, output) = try await runSkillbus(["mcp"] + arguments, timeout: .seconds(10))
            #expect(code == 2, "\(arguments)")
            #expect(output.contains { $0.contains(says) }, "\(arguments): \(output)")
        }
    }

    @Test("a client that closes standard input stops the server, and the call it left running is cancelled")
    func closingStops() async throws {
        let cluster = try await TestCluster()
        defer { cluster.terminate() }
        try await cluster.startWorker("sleeper", ["--skills", "sleep"])
        let report = try check("raw-close", cluster)
        defer { report.process.signal(SIGKILL) }
        let running = try await report.process.waitForLine("the call to run") { $0.contains(#""state": "running""#) }
        #expect(try JSONValue(parsing: running)["inFlight"] == 1, "the sleep ran before standard input closed")
        let exited = try await report.process.waitForLine("the server's exit") { $0.contains(#""state": "exited""#) }
        let document = try JSONValue(parsing: exited)
        #expect(document["code"] == 0 && (document["seconds"]?.doubleValue ?? 99) < 5)
        // Its 30 s sleep was cancelled on the bus, not left to run for nobody.
        try await waitUntil("the sleep to be cancelled", timeout: .seconds(5)) {
            try await cluster.inFlight(agent: "sleeper") == 0
        }
    }

    @Test("bad input gets JSON-RPC errors that say what was wrong, and skillbus mcp keeps serving")
    func badInput() async throws {
        let cluster = try await TestCluster()
        defer { cluster.terminate() }
        try await cluster.startWorker("tools", ["--skills", "echo,file.write"])
        let report = try check("raw", cluster)
        defer { report.process.signal(SIGKILL) }
        _ = try await report.step("done")
        let answers = report.steps("raw").map { $0["answer"] ?? .null }
        try #require(answers.count == 10, "\(report.process.output)")
        func error(_ index: Int) -> (JSONValue?, JSONValue?) {
            (answers[index]["error"]?["code"], answers[index]["id"])
        }
        #expect(error(0) == (-32700, .null))
        #expect(error(1) == (-32600, 1))
        #expect(answers[1]["error"]?["message"]?.stringValue?.contains("initialize") == true)
        #expect(answers[2]["result"]?["protocolVersion"] == "2024-11-05")
        #expect(error(3) == (-32601, 3))
        #expect(
            error(4) == (-32602, 4) && answers[4]["error"]?["message"]?.stringValue?.contains("no.such.tool") == true)
        #expect(error(5) == (-32602, 5))
        #expect(answers[6]["result"]?["isError"] == true)
        #expect(answers[6]["result"]?["_meta"]?["skillbus/error"]?["details"]?.arrayValue?.count == 2)
        // No elicitation declared: a skill that needs confirmation is refused, not run.
        #expect(answers[7]["result"]?["_meta"]?["skillbus/error"]?["code"] == "confirmation_required")
        #expect(error(8) == (-32600, .null))
        #expect(answers[9] == ["jsonrpc": "2.0", "id": 9, "result": [:]])
        #expect(report.steps("raw exit").first?["code"] == 0)
    }
}
