import Foundation
import Skillbus
import SkillbusTestSupport
import SkillbusZMQ
import Synchronization
import Testing

/// The openai planner in a real worker against a scripted chat-completions server (Tests/interop/
/// chat_server.py) that streams like llama.cpp's and checks what it is sent.
@Suite("OpenAI planner", .serialized, .timeLimit(.minutes(3)))
struct OpenAIPlannerTests {
    static let keyVariable = "SKILLBUS_TEST_CHAT_KEY"

    /// A coordinator, "thinker" (echo and memory.set, the openai planner) and "calc" (math.eval, sleep);
    /// returns once thinker's replica holds calc's skills, so that every turn sees the whole registry.
    func cluster(baseURL: String, key: String? = "test-key", timeoutSeconds: Double = 10) async throws -> TestCluster {
        let cluster = try await TestCluster()
        let openai: JSONValue = [
            "baseURL": .string(baseURL), "model": "test-model", "apiKeyEnv": .string(Self.keyVariable),
            "timeoutSeconds": .number(timeoutSeconds), "system": "You are Skillbus's test agent.",
        ]
        let config = NSTemporaryDirectory() + "skillbus-openai-\(UUID().uuidString.prefix(8)).json"
        try Data(
            JSONValue.object([
                "version": 1, "name": "thinker", "skills": ["echo", "memory.set"], "planner": ["openai": openai],
            ]).serialized()
        ).write(to: URL(fileURLWithPath: config))
        defer { try? FileManager.default.removeItem(atPath: config) }
        let worker = try SkillbusProcess(
            ["worker", "--name", "thinker", "--coordinator", cluster.bus, "--heartbeat-ms", "200", "--config", config],
            name: "thinker", environment: key.map { [Self.keyVariable: $0] } ?? [:], clearing: [Self.keyVariable])
        cluster.workers.withLock { $0["thinker"] = worker }
        try await cluster.coordinator.waitForLine("thinker to join") { $0.contains("agent 'thinker' joined") }
        try await cluster.startWorker("calc", ["--skills", "math.eval,sleep"])
        try await waitUntil("thinker's replica to hold the whole registry") {
            let listing = try await cluster.agents()
            let thinker = listing["agents"]?.arrayValue?.first { $0["agent"] == "thinker" }
            return thinker?["registryInSync"] == true && listing["agents"]?.arrayValue?.count == 2
        }
        return cluster
    }

    @Test("a tool call runs the skill, its result goes back, and the reply streams while the endpoint writes it")
    func toolCallThenStreamedReply() async throws {
        let go = NSTemporaryDirectory() + "skillbus-chat-go-\(UUID().uuidString.prefix(8))"
        defer { try? FileManager.default.removeItem(atPath: go) }
        let server = try await ChatServer(answers: [
            ["toolCalls": [["name": "math__eval", "arguments": #"{"expression": "6*7"}"#]]],
            ["content": ["6*7 ", "is ", "forty", "-two."], "delayMs": 60, "holdBeforeLast": .string(go)],
        ])
        defer { server.stop() }
        let cluster = try await cluster(baseURL: server.baseURL)
        defer { cluster.terminate() }
        let client = try await SkillbusClient.connect(endpoint: cluster.bus, context: try ZMQContext())
        defer { client.close() }

        let batches = Mutex<[String]>([])
        let (agent, document) = try await client.ask("what is 6*7?", sessionID: "chat-1") { piece in
            batches.withLock { $0.append(piece) }
            // The server holds its last piece until this file exists: a piece that arrives here before it
            // was forwarded while the endpoint's answer was still open.
            _ = FileManager.default.createFile(atPath: go, contents: nil)
        }
        #expect(agent == "thinker" && document["status"] == "ok")
        #expect(document["reply"] == "6*7 is forty-two.")
        let calls = document["calls"]?.arrayValue ?? []
        #expect(calls.count == 1 && calls.first?["skill"] == "math.eval" && calls.first?["status"] == "ok")
        #expect(calls.first?["result"]?["json"]?["value"] == 42)
        let pieces = batches.withLock { $0 }
        #expect(pieces.joined() == "6*7 is forty-two." && pieces.count >= 2, "\(pieces)")

        let requests = try server.requests()
        try #require(requests.count == 2)
        #expect(requests.allSatisfy { $0["authorization"] == "Bearer test-key" })
        let first = requests[0]["body"] ?? [:]
        #expect(first["stream"] == true && first["model"] == "test-model")
        #expect(try await tools(first) == expectedTools(client.skills()))
        let roles = first["messages"]?.arrayValue?.compactMap { $0["role"]?.stringValue }
        #expect(roles == ["system", "user"])
        #expect(first["messages"]?.arrayValue?.last?["content"] == "what is 6*7?")
        // The second request carries the call and its result, answering the call by its id.
        let messages = requests[1]["body"]?["messages"]?.arrayValue ?? []
        let call = messages.first { $0["tool_calls"] != nil }?["tool_calls"]?.arrayValue?.first
        #expect(call?["function"]?["name"] == "math__eval")
        #expect(call?["function"]?["arguments"] == #"{"expression":"6*7"}"#)
        let result = messages.last
        #expect(result?["role"] == "tool" && result?["tool_call_id"] == call?["id"])
        #expect(result?["content"]?.stringValue?.contains("42") == true, "\(String(describing: result))")
    }

    @Test(
        "an unknown tool, arguments that are not JSON, and invalid parameters go back to the model, which corrects them"
    )
    func corrections() async throws {
        let server = try await ChatServer(answers: [
            ["toolCalls": [["name": "weather__today", "arguments": #"{"city": "Oslo"}"#]]],
            ["toolCalls": [["name": "math__eval", "arguments": #"{"expression": "1+1""#]]],
            ["toolCalls": [["name": "math__eval", "arguments": #"{"expr": "1+1"}"#]]],
            ["toolCalls": [["name": "math__eval", "arguments": #"{"expression": "1+1"}"#]]],
            // Two calls in one answer: both run, and the model is asked only once more.
            [
                "toolCalls": [
                    ["name": "echo", "arguments": #"{"text": "one"}"#],
                    ["name": "echo", "arguments": #"{"text": "two"}"#],
                ]
            ],
            ["content": ["1+1 is 2"]],
        ])
        defer { server.stop() }
        let cluster = try await cluster(baseURL: server.baseURL)
        defer { cluster.terminate() }
        let client = try await SkillbusClient.connect(endpoint: cluster.bus, context: try ZMQContext())
        defer { client.close() }

        let (_, document) = try await client.ask("what is 1+1?")
        #expect(document["reply"] == "1+1 is 2")
        let calls = document["calls"]?.arrayValue ?? []
        #expect(
            calls.map { $0["skill"]?.stringValue ?? "" } == [
                "weather.today", "math.eval", "math.eval", "math.eval", "echo", "echo",
            ])
        #expect(
            calls.map { $0["error"]?["code"]?.stringValue ?? $0["status"]?.stringValue ?? "" }
                == ["unknown_skill", "invalid_parameters", "invalid_parameters", "ok", "ok", "ok"])
        #expect(calls[1]["error"]?["message"]?.stringValue?.contains("not JSON") == true)
        #expect(calls.suffix(2).map { $0["result"]?["text"] } == ["one", "two"])

        let requests = try server.requests()
        #expect(requests.count == 6, "the two echo calls were served from one answer")
        let results = (requests.last?["body"]?["messages"]?.arrayValue ?? []).filter { $0["role"] == "tool" }
            .compactMap { $0["content"]?.stringValue }
        #expect(results.count == 6)
        #expect(results[0].hasPrefix("error unknown_skill:"), "\(results[0])")
        #expect(results[1].contains("not JSON") && results[2].contains("unknown parameter 'expr'"), "\(results)")
        #expect(results[3].contains("2") && results[4] == "one" && results[5] == "two", "\(results)")
    }

    @Test(
        "401, a stream that is not JSON, and a 500 fail their turns clearly; a short 429 is retried; the worker serves on"
    )
    func endpointFailures() async throws {
        let server = try await ChatServer(answers: [
            ["status": 401, "body": ["error": ["message": "invalid api key"]]],
            ["raw": "data: {this is not json\n\n"],
            ["status": 429, "body": ["error": ["message": "slow down"]], "headers": ["Retry-After": "0"]],
            ["whole": ["content": "after the retry"]],
            ["status": 500, "body": ["error": ["message": "the model crashed"]]],
            ["status": 429, "body": ["error": ["message": "slow down"]], "headers": ["Retry-After": "120"]],
            ["content": ["still ", "serving"]],
        ])
        defer { server.stop() }
        let cluster = try await cluster(baseURL: server.baseURL)
        defer { cluster.terminate() }
        let client = try await SkillbusClient.connect(endpoint: cluster.bus, context: try ZMQContext())
        defer { client.close() }

        func failure(_ message: String) async -> SkillbusError? {
            do {
                let (_, document) = try await client.ask(message)
                Issue.record("'\(message)' ended \(document)")
                return nil
            } catch {
                return error
            }
        }
        let refused = await failure("one")
        #expect(
            refused?.message.contains("the endpoint refused the API key (401): invalid api key") == true,
            "\(String(describing: refused))")
        #expect(refused?.details?["states"]?.arrayValue?.last?["state"] == "failed")
        let garbled = await failure("two")
        #expect(garbled?.message.contains("not JSON") == true, "\(String(describing: garbled))")
        let (_, retried) = try await client.ask("three")
        #expect(retried["reply"] == "after the retry")
        let crashed = await failure("four")
        #expect(crashed?.message.contains("HTTP 500: the model crashed") == true, "\(String(describing: crashed))")
        let limited = await failure("five")
        #expect(
            limited?.message.contains("rate limiting requests (429) and asks to retry after 120 s") == true,
            "\(String(describing: limited))")
        let (agent, served) = try await client.ask("six")
        #expect(agent == "thinker" && served["reply"] == "still serving")
        #expect(try server.requests().count == 7)
    }

    @Test(
        "an unreachable endpoint fails the turn with its address; a worker whose key variable is unset does not start")
    func unreachableAndMissingKey() async throws {
        // A port that was free a moment ago: nothing listens there.
        let port = try unusedLoopbackPort()
        let baseURL = "http://127.0.0.1:\(port)/v1"
        let cluster = try await cluster(baseURL: baseURL)
        defer { cluster.terminate() }
        let client = try await SkillbusClient.connect(endpoint: cluster.bus, context: try ZMQContext())
        defer { client.close() }
        do {
            _ = try await client.ask("anyone there?")
            Issue.record("the turn succeeded")
        } catch {
            #expect(error.code == .plannerUnavailable, "\(error)")
            #expect(error.message.contains("the planner's endpoint at \(baseURL) is unreachable"), "\(error)")
        }
        // Turns that name no agent now go to one whose planner answers, while there is one.
        let rules: JSONValue = ["rules": [["intent": "anyone", "skill": "echo", "params": ["text": "here"], "reply": "{result}"]]]
        let config = NSTemporaryDirectory() + "skillbus-rules-\(UUID().uuidString.prefix(8)).json"
        try Data(JSONValue.object(["version": 1, "name": "steady", "skills": ["echo"], "planner": rules]).serialized())
            .write(to: URL(fileURLWithPath: config))
        defer { try? FileManager.default.removeItem(atPath: config) }
        try await cluster.startWorker("steady", ["--config", config])
        for _ in 0..<4 { #expect(try await client.ask("anyone there?").agent == "steady") }
        let (code, output) = try await runSkillbus(
            ["worker", "--name", "keyless", "--coordinator", cluster.bus, "--config", try keylessConfig(baseURL)])
        #expect(code == 1)
        #expect(output.contains { $0.contains("\(Self.keyVariable)") && $0.contains("is not set") }, "\(output)")
    }

    @Test("cancelling an ask cancels the planner's request at once, while the endpoint is silent or streaming")
    func cancelling() async throws {
        let server = try await ChatServer(answers: [
            ["stallMs": 20_000, "content": ["too late"]],
            ["content": ["a ", "slow ", "reply"], "delayMs": 20_000],
        ])
        defer { server.stop() }
        let cluster = try await cluster(baseURL: server.baseURL)
        defer { cluster.terminate() }
        let client = try await SkillbusClient.connect(endpoint: cluster.bus, context: try ZMQContext())
        defer { client.close() }
        for (number, message) in ["silent", "streaming"].enumerated() {
            let started = Mutex(false)
            let ask = Task { try await client.ask(message) { _ in started.withLock { $0 = true } } }
            try await waitUntil("the request to reach the server") {
                try server.requests().count == number + 1 && (number == 0 || started.withLock { $0 })
            }
            let cancelled = ContinuousClock.now
            ask.cancel()
            let outcome = await ask.result
            // The client gives a turn that does not stop 5 s before it returns anyway.
            #expect(ContinuousClock.now - cancelled < .seconds(4), "\(message): the turn did not stop at once")
            #expect(throws: SkillbusError.self) { try outcome.get() }
            if case .failure(let error as SkillbusError) = outcome {
                #expect(error.code == .cancelled, "\(message): \(error)")
            }
        }
    }

    @Test("an endpoint silent for longer than timeoutSeconds fails the turn with a timeout, soon after it")
    func idleTimeout() async throws {
        let server = try await ChatServer(answers: [["stallMs": 8_000, "content": ["too late"]]])
        defer { server.stop() }
        let cluster = try await cluster(baseURL: server.baseURL, timeoutSeconds: 1)
        defer { cluster.terminate() }
        let client = try await SkillbusClient.connect(endpoint: cluster.bus, context: try ZMQContext())
        defer { client.close() }
        let asked = ContinuousClock.now
        do {
            _ = try await client.ask("are you there?")
            Issue.record("the turn succeeded")
        } catch {
            #expect(error.message.contains("at \(server.baseURL) sent nothing for 1 s"), "\(error)")
        }
        // The timeout is checked about once a second, so it fires between 1 and about 2 s of silence.
        let waited = ContinuousClock.now - asked
        #expect(waited >= .seconds(1) && waited < .seconds(4), "\(waited)")
    }

    func keylessConfig(_ baseURL: String) throws -> String {
        let path = NSTemporaryDirectory() + "skillbus-openai-keyless-\(UUID().uuidString.prefix(8)).json"
        let openai: JSONValue = ["baseURL": .string(baseURL), "model": "m", "apiKeyEnv": .string(Self.keyVariable)]
        try Data(JSONValue.object(["version": 1, "planner": ["openai": openai]]).serialized())
            .write(to: URL(fileURLWithPath: path))
        return path
    }

    /// The `tools` of a request, by name.
    func tools(_ body: JSONValue) -> [String: JSONValue] {
        Dictionary(
            (body["tools"]?.arrayValue ?? []).map { ($0["function"]?["name"]?.stringValue ?? "?", $0) },
            uniquingKeysWith: { first, _ in first })
    }

    /// What the registry's skills should look like as tools, written from the catalog's wire form.
    func expectedTools(_ catalog: SkillCatalog) -> [String: JSONValue] {
        var tools: [String: JSONValue] = [:]
        for entry in catalog.skills {
            let skill = entry.descriptor.json
            let name = (skill["identifier"]?.stringValue ?? "").replacingOccurrences(of: ".", with: "__")
            var properties: [String: JSONValue] = [:]
            var required: [JSONValue] = []
            for field in skill["parameters"]?.arrayValue ?? [] {
                let fieldName = field["name"]?.stringValue ?? ""
                var property: [String: JSONValue] = [:]
                property["type"] =
                    field["type"] == "any" ? ["string", "number", "boolean", "array", "object"] : field["type"]
                if let description = field["description"], description != "" { property["description"] = description }
                if let value = field["default"] { property["default"] = value }
                properties[fieldName] = .object(property)
                if field["required"] == true { required.append(.string(fieldName)) }
            }
            tools[name] = [
                "type": "function",
                "function": [
                    "name": .string(name), "description": skill["description"] ?? "",
                    "parameters": [
                        "type": "object", "properties": .object(properties), "required": .array(required),
                        "additionalProperties": false,
                    ],
                ],
            ]
        }
        return tools
    }
}

/// Tests/interop/chat_server.py with a script, on an ephemeral port; `requests()` reads what it was sent.
final class ChatServer: Sendable {
    let process: SkillbusProcess
    let port: Int
    let directory: String

    init(model: String = "test-model", apiKey: String? = "test-key", answers: [JSONValue]) async throws {
        directory = NSTemporaryDirectory() + "skillbus-chat-\(UUID().uuidString.prefix(8))"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        let script: JSONValue = [
            "model": .string(model), "apiKey": apiKey.map { .string($0) } ?? .null, "answers": .array(answers),
        ]
        try Data(script.serialized()).write(to: URL(fileURLWithPath: directory + "/script.json"))
        let program = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent("interop/chat_server.py").path
        process = try SkillbusProcess(
            ["-u", program, directory + "/script.json", directory + "/requests.jsonl"], name: "chat server",
            executable: "/usr/bin/env", prefix: ["python3"])
        let line = try await process.waitForLine("the chat server's port") { $0.hasPrefix("listening ") }
        port = Int(line.dropFirst("listening ".count)) ?? 0
    }

    var baseURL: String { "http://127.0.0.1:\(port)/v1" }

    /// Every request so far, in order: `{"path", "authorization", "body", "time"}` (Unix seconds).
    func requests() throws -> [JSONValue] {
        guard let data = FileManager.default.contents(atPath: directory + "/requests.jsonl") else { return [] }
        return try String(decoding: data, as: UTF8.self).split(separator: "\n").map {
            try JSONValue(parsing: String($0))
        }
    }

    func stop() {
        process.signal(SIGTERM)
        try? FileManager.default.removeItem(atPath: directory)
    }
}
