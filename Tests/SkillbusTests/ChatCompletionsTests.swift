import Foundation
import Testing

@testable import Skillbus

/// The openai planner's parts without sockets: function names, JSON Schema, the messages, server-sent
/// events split anywhere, the answer's chunks, tool calls as steps, and the configuration.
@Suite("Chat completions")
struct ChatCompletionsTests {
    static func skill(_ identifier: String, _ fields: [ParameterField] = [], description: String = "d")
        -> SkillDescriptor
    {
        SkillDescriptor(
            identifier: identifier, displayName: identifier, description: description, parameters: .init(fields))
    }

    // MARK: - Names

    @Test(
        "a dot becomes __ and back; names that would not come back, or are too long, are hashed and found through the registry",
        arguments: [
            "math.eval", "echo", "memory_set", "text.stats", "a-b.c_d", "a__b", "a_.b", "x..y", "_.", ".",
            String(repeating: "long.name", count: 14),
        ])
    func names(_ identifier: String) {
        let name = ToolNames.name(for: identifier)
        #expect(name.range(of: "^[a-zA-Z0-9_-]{1,64}$", options: .regularExpression) != nil, "\(name)")
        let skills = [Self.skill("other.skill"), Self.skill(identifier)]
        #expect(ToolNames.skill(for: name, among: skills) == identifier)
        // Without the registry a readable name still comes back.
        if !name.contains("_h") { #expect(ToolNames.skill(for: name, among: []) == identifier) }
    }

    @Test("names of the common identifiers read well; distinct identifiers get distinct names")
    func readableNames() {
        #expect(ToolNames.name(for: "math.eval") == "math__eval")
        #expect(ToolNames.name(for: "memory.set") == "memory__set")
        #expect(ToolNames.name(for: "a__b") != ToolNames.name(for: "a.b"))
        #expect(ToolNames.name(for: "a_.b") != ToolNames.name(for: "a._b"))
        #expect(
            ToolNames.name(for: String(repeating: "a", count: 100))
                != ToolNames.name(for: String(repeating: "a", count: 101)))
        // A model that writes the identifier itself, or a name nobody offers.
        #expect(ToolNames.skill(for: "math.eval", among: [Self.skill("math.eval")]) == "math.eval")
        #expect(ToolNames.skill(for: "weather__today", among: [Self.skill("math.eval")]) == "weather.today")
        #expect(
            ToolNames.name(for: "get weather").range(of: "^[a-zA-Z0-9_-]{1,64}$", options: .regularExpression) != nil)
    }

    // MARK: - The request

    @Test("parameter schemas become JSON Schema: types, descriptions, defaults, required, any")
    func jsonSchema() {
        let schema = ParameterSchema([
            ParameterField("key", .string, description: "The key"),
            ParameterField("value", .any),
            ParameterField("count", .integer, required: false, default: 3),
            ParameterField("flags", .array, required: false),
        ])
        #expect(
            schema.jsonSchema == [
                "type": "object", "additionalProperties": false, "required": ["key", "value"],
                "properties": [
                    "key": ["type": "string", "description": "The key"],
                    "value": ["type": ["string", "number", "boolean", "array", "object"]],
                    "count": ["type": "integer", "default": 3], "flags": ["type": "array"],
                ],
            ])
        #expect(ParameterSchema([]).jsonSchema["required"] == [])
    }

    @Test("tools: one function per skill, sorted, with the skill's own description")
    func tools() {
        let tools = ChatCompletionsRequest.tools([
            Self.skill("text.stats", [ParameterField("text", .string)], description: "Counts words."),
            Self.skill("echo"),
        ])
        #expect(tools.map { $0["function"]?["name"] } == ["echo", "text__stats"])
        #expect(tools[1]["type"] == "function" && tools[1]["function"]?["description"] == "Counts words.")
        #expect(tools[1]["function"]?["parameters"]?["required"] == ["text"])
    }

    @Test("messages: system, the history with calls paired to results, the message, then the turn's steps")
    func messages() {
        let now = Date()
        func message(_ index: Int, _ role: SessionMessage.Role, _ content: JSONValue) -> SessionMessage {
            SessionMessage(index: index, role: role, content: content, time: now, round: "r")
        }
        let history = [
            message(0, .user, "hi"),
            message(1, .skillCall, ["skill": "echo", "params": ["text": "hi"]]),
            message(2, .skillCall, ["skill": "math.eval", "params": ["expression": "1/"]]),  // never answered
            message(3, .skillResult, ["skill": "echo", "status": "ok", "result": ["type": "text", "text": "hi"]]),
            // A result no call of this history asked for.
            message(4, .skillResult, ["skill": "sleep", "status": "ok", "result": ["type": "text", "text": "x"]]),
            message(5, .agent, "hello"),
        ]
        let steps = [
            PlannerStep(skill: "math.eval", parameters: ["expression": "6*7"], outcome: .success(.json(["value": 42]))),
            PlannerStep(
                skill: "echo", parameters: ["txt": "x"],
                outcome: .failure(
                    SkillbusError(.invalidParameters, "invalid parameters for 'echo': unknown parameter 'txt'"))),
        ]
        let input = PlannerInput(message: "what is 6*7?", history: history, steps: steps, skills: [])
        let messages = ChatCompletionsRequest.messages(system: "Be brief.", input)
        #expect(
            messages.map { $0["role"]?.stringValue ?? "" } == [
                "system", "user", "assistant", "tool", "assistant", "user", "assistant", "tool", "assistant", "tool",
            ])
        #expect(
            messages[2]["tool_calls"]?.arrayValue?.first?["function"] == [
                "name": "echo", "arguments": #"{"text":"hi"}"#,
            ])
        #expect(
            messages[3]["tool_call_id"] == messages[2]["tool_calls"]?.arrayValue?.first?["id"]
                && messages[3]["content"] == "hi")
        #expect(messages[5]["content"] == "what is 6*7?")
        #expect(messages[6]["tool_calls"]?.arrayValue?.first?["function"]?["name"] == "math__eval")
        #expect(messages[7]["content"] == #"{"value":42}"# && messages[7]["tool_call_id"] == "call_0")
        #expect(
            messages[9]["content"] == "error invalid_parameters: invalid parameters for 'echo': unknown parameter 'txt'"
        )
        #expect(Set(messages.compactMap { $0["tool_calls"]?.arrayValue?.first?["id"] }).count == 3)
    }

    @Test("a long tool result is cut, never inside a character")
    func longResult() {
        let text = String(repeating: "é", count: ChatCompletionsRequest.maxToolResultBytes)
        let cut = ChatCompletionsRequest.toolResult(.success(.text(text)))
        #expect(cut.utf8.count < ChatCompletionsRequest.maxToolResultBytes + 100 && !cut.contains("\u{FFFD}"))
        #expect(cut.hasSuffix("(cut: \(ChatCompletionsRequest.maxToolResultBytes) more bytes)"))
    }

    // MARK: - Server-sent events

    static let stream = Array(
        (": keep-alive\r\n" + "data: {\"a\":1}\r\n\r\n" + "event: ping\ndata: x\n\n"
            + "data: line one\ndata:line two\n\n"
            + "data: ünïcödé ✓\r\r" + "id: 7\nretry: 10\n\n" + "data: [DONE]\n\n").utf8)

    @Test("server-sent events: fields, comments, multi-line data, every line ending")
    func events() {
        var parser = ServerSentEvents()
        let events = parser.receive(Self.stream)
        #expect(
            events == [
                .init(type: "message", data: #"{"a":1}"#), .init(type: "ping", data: "x"),
                .init(type: "message", data: "line one\nline two"), .init(type: "message", data: "ünïcödé ✓"),
                .init(type: "message", data: "[DONE]"),
            ])
        #expect(parser.finish() == nil)
    }

    @Test("server-sent events split at every byte give the same events", arguments: [1, 2, 3, 5, 7, 13])
    func splitEvents(_ size: Int) {
        var whole = ServerSentEvents()
        let expected = whole.receive(Self.stream)
        var parser = ServerSentEvents()
        var events: [ServerSentEvents.Event] = []
        var start = 0
        while start < Self.stream.count {
            events += parser.receive(Self.stream[start..<min(start + size, Self.stream.count)])
            start += size
        }
        #expect(events == expected)
    }

    @Test("a body that ends without its blank line still gives its last event")
    func unterminated() {
        var parser = ServerSentEvents()
        #expect(parser.receive(Array("data: last".utf8)) == [])
        #expect(parser.finish() == .init(type: "message", data: "last"))
    }

    // MARK: - The answer

    static func chunk(_ delta: JSONValue, finish: String? = nil) -> JSONValue {
        ["choices": [["index": 0, "delta": delta, "finish_reason": finish.map { .string($0) } ?? .null]]]
    }

    @Test("text deltas make a reply from the first text that is not blank, the blank before it included")
    func reply() throws {
        var answer = ChatCompletionStream()
        #expect(try answer.receive(Self.chunk(["role": "assistant", "content": ""])) == "")
        #expect(try answer.receive(Self.chunk(["content": "\n"])) == "")
        #expect(answer.kind == .undecided)
        #expect(try answer.receive(Self.chunk(["content": "Hel"])) == "\nHel")
        #expect(answer.kind == .reply)
        #expect(try answer.receive(Self.chunk(["content": "lo"])) == "lo")
        // Tool calls after the reply began are ignored.
        _ = try answer.receive(Self.chunk(["tool_calls": [["index": 0, "function": ["name": "echo"]]]]))
        #expect(try answer.receive(Self.chunk([:], finish: "stop")) == "")
        #expect(answer.kind == .reply && answer.toolCalls == [] && answer.finishReason == "stop")
        #expect(try answer.receive(["choices": [], "usage": ["total_tokens": 9]]) == "")
    }

    @Test("tool calls: fragments by index, arguments in pieces, in the order the calls began")
    func toolCalls() throws {
        var answer = ChatCompletionStream()
        _ = try answer.receive(Self.chunk(["role": "assistant", "content": .null]))
        _ = try answer.receive(Self.chunk(["content": " "]))
        _ = try answer.receive(
            Self.chunk([
                "tool_calls": [
                    ["index": 0, "id": "a", "type": "function", "function": ["name": "math__eval", "arguments": ""]]
                ]
            ]))
        _ = try answer.receive(Self.chunk(["tool_calls": [["index": 0, "function": ["arguments": "{\"expre"]]]]))
        _ = try answer.receive(
            Self.chunk(["tool_calls": [["index": 1, "id": "b", "function": ["name": "echo", "arguments": "{}"]]]]))
        _ = try answer.receive(
            Self.chunk(["tool_calls": [["index": 0, "function": ["arguments": "ssion\": \"1\"}"]]]]))
        #expect(try answer.receive(Self.chunk(["content": "ignored"])) == "")
        #expect(answer.kind == .toolCalls)
        #expect(
            answer.toolCalls == [
                .init(name: "math__eval", arguments: #"{"expression": "1"}"#), .init(name: "echo", arguments: "{}"),
            ])
        // A whole (not streamed) answer, with arguments given as an object.
        var whole = ChatCompletionStream()
        _ = try whole.receive([
            "choices": [["message": ["tool_calls": [["function": ["name": "echo", "arguments": ["text": "x"]]]]]]]
        ])
        #expect(whole.toolCalls == [.init(name: "echo", arguments: #"{"text":"x"}"#)])
    }

    @Test("an error inside the stream and chunks of the wrong shape are clear failures")
    func badChunks() {
        for (chunk, words) in [
            (["error": ["message": "model overloaded"]] as JSONValue, "model overloaded"),
            ([1, 2], "not an object"), (Self.chunk(["content": 5]), "'content' is integer"),
            (Self.chunk(["tool_calls": "x"]), "'tool_calls' is string"),
        ] {
            var answer = ChatCompletionStream()
            #expect(throws: ChatEndpointError.self) { _ = try answer.receive(chunk) }
            do { _ = try answer.receive(chunk) } catch { #expect(error.message.contains(words), "\(error)") }
        }
    }

    @Test("a tool call as a step: arguments parsed; arguments that are no JSON object go back as a failed step")
    func decisions() throws {
        let skills = [Self.skill("math.eval")]
        func decide(_ arguments: String) throws -> PlannerDecision {
            try OpenAIPlanner.decision(for: .init(name: "math__eval", arguments: arguments), skills: skills)
        }
        #expect(try decide(#"{"expression": "1+1"}"#) == .call(skill: "math.eval", parameters: ["expression": "1+1"]))
        #expect(try decide("  ") == .call(skill: "math.eval", parameters: [:]))
        for (arguments, words) in [(#"{"expression": "1+1""#, "not JSON"), ("[1]", "are array, not an object")] {
            guard case .invalidCall(let skill, let error) = try decide(arguments) else {
                Issue.record("\(arguments) was taken")
                continue
            }
            #expect(
                skill == "math.eval" && error.code == .invalidParameters && error.message.contains(words), "\(error)")
        }
        #expect(throws: ChatEndpointError.self) {
            try OpenAIPlanner.decision(for: .init(name: "", arguments: "{}"), skills: skills)
        }
    }

    @Test("the later calls of one answer are handed out step by step; a failed one sends the turn back to the model")
    func batches() {
        let pending = PendingCalls()
        let calls: [PlannerDecision] = [
            .call(skill: "echo", parameters: ["text": "1"]), .call(skill: "echo", parameters: ["text": "2"]),
            .call(skill: "echo", parameters: ["text": "3"]),
        ]
        var input = PlannerInput(message: "m", skills: [])
        pending.remember(calls, after: input)
        #expect(pending.next(after: input) == nil)  // the first call is the planner's own answer
        func ran(_ text: String, ok: Bool = true) {
            input.steps.append(
                PlannerStep(
                    skill: "echo", parameters: ["text": .string(text)],
                    outcome: ok ? .success(.text(text)) : .failure(SkillbusError(.skillFailed, "no"))))
        }
        ran("1")
        #expect(pending.next(after: PlannerInput(message: "other", steps: input.steps, skills: [])) == nil)
        #expect(pending.next(after: input) == calls[1])
        ran("2")
        #expect(pending.next(after: input) == calls[2])
        ran("3")
        #expect(pending.next(after: input) == nil)  // all served: ask the model

        var again = PlannerInput(message: "n", skills: [])
        pending.remember(calls, after: again)
        again.steps.append(
            PlannerStep(skill: "echo", parameters: ["text": "1"], outcome: .failure(SkillbusError(.busy, "busy"))))
        #expect(pending.next(after: again) == nil)
    }

    // MARK: - Configuration and errors

    @Test("settings: the address, the model, the key's variable, the timeout, checked with errors that name the key")
    func settings() throws {
        let settings = try OpenAIPlanner.Settings(json: [
            "baseURL": "http://127.0.0.1:8080/v1/", "model": "qwen", "apiKeyEnv": "MY_KEY", "timeoutSeconds": 5,
            "system": "Be brief.", "temperature": 0.2,
        ])
        #expect(
            settings.baseURL == "http://127.0.0.1:8080/v1" && settings.model == "qwen" && settings.apiKeyEnv == "MY_KEY"
        )
        #expect(settings.endpoint.absoluteString == "http://127.0.0.1:8080/v1/chat/completions")
        #expect(settings.timeoutSeconds == 5 && settings.system == "Be brief." && settings.temperature == 0.2)
        #expect(
            try OpenAIPlanner.Settings(json: ["baseURL": "https://api.example.com/v1", "model": "m"]).timeoutSeconds
                == 60)

        for (json, words) in [
            (["model": "m"] as JSONValue, "openai.baseURL: missing"),
            (
                ["baseURL": "127.0.0.1:8080", "model": "m"],
                "openai.baseURL: '127.0.0.1:8080' is not a URL (e.g. http://127.0.0.1:8080/v1)"
            ),
            (["baseURL": "ftp://host/v1", "model": "m"], "not an http or https URL"),
            (["baseURL": "http://h/v1?x=1", "model": "m"], "query or fragment"),
            (["baseURL": "http://h/v1"], "openai.model: missing"),
            (["baseURL": "http://h/v1", "model": 3], "openai.model: expected a string"),
            (["baseURL": "http://h/v1", "model": "m", "apiKey": "sk-…"], "openai.apiKey: unknown key"),
            (["baseURL": "http://h/v1", "model": "m", "apiKeyEnv": "not a name"], "openai.apiKeyEnv"),
            (["baseURL": "http://h/v1", "model": "m", "timeoutSeconds": 0], "openai.timeoutSeconds: must be from"),
            (["baseURL": "http://h/v1", "model": "m", "temperature": "hot"], "openai.temperature: expected a number"),
            ("http://h/v1", "openai: expected an object"),
        ] {
            do {
                _ = try OpenAIPlanner.Settings(json: json)
                Issue.record("\(json) was taken")
            } catch {
                #expect(error.code == .invalidConfiguration && error.message.contains(words), "\(error.message)")
            }
        }
    }

    @Test("the key's variable is read when the planner is made; a configured planner is rules or openai")
    func makingPlanners() throws {
        let openai: JSONValue = ["openai": ["baseURL": "http://h/v1", "model": "m", "apiKeyEnv": "THE_KEY"]]
        try ConfiguredPlanner.check(openai)
        #expect(try ConfiguredPlanner.make(openai, environment: ["THE_KEY": "k"]) is OpenAIPlanner)
        do {
            _ = try ConfiguredPlanner.make(openai, environment: [:])
            Issue.record("made without its key")
        } catch {
            #expect(error.message.contains("THE_KEY") && error.message.contains("is not set"), "\(error.message)")
        }
        #expect(try ConfiguredPlanner.make(["rules": []]) is RulesPlanner)
        for json in [["llama": [:]] as JSONValue, ["rules": [], "openai": [:]], "rules"] {
            #expect(throws: SkillbusError.self) { try ConfiguredPlanner.check(json) }
        }
    }

    @Test("answers outside 2xx become messages that say what to do")
    func statusErrors() {
        let body = #"{"error": {"message": "Incorrect API key provided"}}"#
        #expect(
            OpenAIPlanner.statusError(401, body: body, retryAfter: nil, hasKey: true).message
                == "the endpoint refused the API key (401): Incorrect API key provided")
        #expect(OpenAIPlanner.statusError(401, body: "", retryAfter: nil, hasKey: false).message.contains("apiKeyEnv"))
        let limited = OpenAIPlanner.statusError(429, body: "", retryAfter: .seconds(30), hasKey: true)
        #expect(limited.code == .rateLimited && limited.message.contains("retry after 30 s"))
        #expect(OpenAIPlanner.statusError(404, body: "", retryAfter: nil, hasKey: true).message.contains("/v1"))
        let long = OpenAIPlanner.statusError(
            502, body: String(repeating: "x", count: 1000), retryAfter: nil, hasKey: true)
        #expect(long.message.hasPrefix("the endpoint answered HTTP 502: xxx") && long.message.count < 400)
        #expect(OpenAIPlanner.retryAfter("2") == .seconds(2) && OpenAIPlanner.retryAfter("0.5") == .milliseconds(500))
        #expect(
            OpenAIPlanner.retryAfter("Wed, 21 Oct 2015 07:28:00 GMT") == nil && OpenAIPlanner.retryAfter(nil) == nil)
    }
}
