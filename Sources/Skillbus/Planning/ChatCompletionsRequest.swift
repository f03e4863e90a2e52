/// The body of a chat-completions request (the OpenAI API that llama.cpp's server, Ollama and vLLM speak as
/// well): the registry's skills become `tools`, the session's history and this turn so far `messages`.
/// Everything is rebuilt from the `PlannerInput` on every request, so the planner keeps no conversation.
enum ChatCompletionsRequest {
    /// A tool result longer than this is cut: one large file must not fill the model's whole context.
    static let maxToolResultBytes = 32 * 1024

    static func body(_ settings: OpenAIPlanner.Settings, _ input: PlannerInput) -> JSONValue {
        var body: [String: JSONValue] = [
            "model": .string(settings.model), "stream": true,
            "messages": .array(messages(system: settings.system, input)),
        ]
        let tools = tools(input.skills) + AgentTools.tools(input.agents)
        if !tools.isEmpty { body["tools"] = .array(tools) }
        if let temperature = settings.temperature { body["temperature"] = .number(temperature) }
        return .object(body)
    }

    /// One function per skill, sorted by name: its description as the skill wrote it, its parameters as
    /// JSON Schema.
    static func tools(_ skills: [SkillDescriptor]) -> [JSONValue] {
        skills.sorted { $0.identifier < $1.identifier }.map { skill in
            [
                "type": "function",
                "function": [
                    "name": .string(ToolNames.name(for: skill.identifier)),
                    "description": .string(skill.description.isEmpty ? skill.displayName : skill.description),
                    "parameters": skill.parameters.jsonSchema,
                ],
            ]
        }
    }

    /// The system prompt, the session's history, the user's message, then each of this turn's steps as a
    /// tool call of the assistant and its result.
    static func messages(system: String?, _ input: PlannerInput) -> [JSONValue] {
        var messages: [JSONValue] = []
        if let system, !system.isEmpty { messages.append(["role": "system", "content": .string(system)]) }
        if let handoff = input.team?.handoff {
            let note = handoff.note.isEmpty ? "" : " Its note: \(handoff.note)"
            messages.append(
                ["role": "system", "content": .string("Agent '\(handoff.from)' handed this conversation to you.\(note)")])
        }
        messages += history(input.history)
        messages.append(["role": "user", "content": .string(input.message)])
        for (index, step) in input.steps.enumerated() {
            messages += exchange(
                id: "call_\(index)", name: step.asked.map(AgentTools.askName) ?? ToolNames.name(for: step.skill),
                arguments: .object(step.parameters), outcome: step.outcome)
        }
        return messages
    }

    /// The history as messages. A skill call is paired with the next result of the same skill, and both go
    /// in at the result's place (a tool result must follow its call); what cannot be paired is left out.
    static func history(_ history: [SessionMessage]) -> [JSONValue] {
        var messages: [JSONValue] = []
        var waiting: [(skill: String, arguments: JSONValue)] = []
        for message in history {
            switch message.role {
            case .user:
                messages.append(["role": "user", "content": .string(text(of: message.content))])
            case .agent:
                messages.append(["role": "assistant", "content": .string(text(of: message.content))])
            case .skillCall:
                guard let skill = message.content["skill"]?.stringValue else { continue }
                waiting.append((skill, message.content["params"] ?? [:]))
            case .skillResult:
                guard let skill = message.content["skill"]?.stringValue,
                    let call = waiting.firstIndex(where: { $0.skill == skill })
                else { continue }
                let arguments = waiting.remove(at: call).arguments
                let outcome: Result<SkillResult, SkillbusError>
                if message.content["status"] == "ok", let result = message.content["result"],
                    let parsed = try? SkillResult(json: result)
                {
                    outcome = .success(parsed)
                } else {
                    outcome = .failure(SkillbusError(json: message.content["error"] ?? [:]))
                }
                messages += exchange(
                    id: "history_\(message.index)", name: ToolNames.name(for: skill), arguments: arguments,
                    outcome: outcome)
            }
        }
        return messages
    }

    /// An assistant message with one tool call, and the tool's answer to it.
    static func exchange(
        id: String, name: String, arguments: JSONValue, outcome: Result<SkillResult, SkillbusError>
    ) -> [JSONValue] {
        let call: JSONValue = [
            "id": .string(id), "type": "function",
            "function": ["name": .string(name), "arguments": .string(arguments.jsonString)],
        ]
        return [
            ["role": "assistant", "tool_calls": [call]],
            ["role": "tool", "tool_call_id": .string(id), "content": .string(toolResult(outcome))],
        ]
    }

    /// What the model reads as a tool's result: the text, the JSON, or the error with its code, so that it
    /// can correct a call (the message of `invalid_parameters` lists every problem).
    static func toolResult(_ outcome: Result<SkillResult, SkillbusError>) -> String {
        let text: String
        switch outcome {
        case .success(.text(let value)): text = value
        case .success(.json(let value)): text = value.jsonString
        case .success(let other): text = other.humanReadable
        case .failure(let error): text = "error \(error.code.rawValue): \(error.message)"
        }
        guard text.utf8.count > maxToolResultBytes else { return text }
        var cut = String(decoding: text.utf8.prefix(maxToolResultBytes), as: UTF8.self)
        if cut.last == "\u{FFFD}" { cut.removeLast() }  // half a character at the cut
        return cut + " … (cut: \(text.utf8.count - maxToolResultBytes) more bytes)"
    }

    private static func text(of content: JSONValue) -> String {
        content.stringValue ?? content["text"]?.stringValue ?? content.jsonString
    }
}

/// Skill identifiers as function names. The API allows `^[a-zA-Z0-9_-]{1,64}$`; identifiers are 1–128 of
/// `a-z A-Z 0-9 . _ -`. A dot becomes `__` (`math.eval` → `math__eval`), which reads well and is undone by
/// turning `__` back into a dot. Where that would not give the identifier back (`a__b`, `a_.b`) or the name
/// would be too long or hold other characters (a name a model made up), the name is a prefix and a hash of
/// the identifier instead; such names are found again through the registry's skills.
enum ToolNames {
    static let maxLength = 64

    static func name(for skill: String) -> String {
        let readable = String(
            skill.replacingOccurrences(of: ".", with: "__").map { allowed($0) ? $0 : "_" })
        if !readable.isEmpty, readable.utf8.count <= maxLength, identifier(readable) == skill { return readable }
        let hash = String(fnv1a(skill), radix: 16)
        let padded = String(repeating: "0", count: 16 - hash.count) + hash
        return String(readable.prefix(maxLength - 18)) + "_h" + padded
    }

    private static func allowed(_ character: Character) -> Bool {
        character.isASCII && (character.isLetter || character.isNumber || character == "_" || character == "-")
    }

    /// The skill a function name stands for: one of `skills` whose name it is, else the identifier the name
    /// reads as (which the bus then refuses as `unknown_skill` if nobody offers it).
    static func skill(for name: String, among skills: [SkillDescriptor]) -> String {
        if let skill = skills.first(where: { self.name(for: $0.identifier) == name }) { return skill.identifier }
        return identifier(name)
    }

    private static func identifier(_ name: String) -> String { name.replacingOccurrences(of: "__", with: ".") }

    /// FNV-1a over the identifier's bytes: stable across processes, unlike `Hasher`.
    private static func fnv1a(_ text: String) -> UInt64 {
        text.utf8.reduce(0xcbf2_9ce4_8422_2325 as UInt64) { hash, byte in (hash ^ UInt64(byte)) &* 0x100_0000_01b3 }
    }
}
