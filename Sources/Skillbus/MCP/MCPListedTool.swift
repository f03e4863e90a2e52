import Foundation

/// One tool as an MCP server lists it (`tools/list`), and how it becomes a Skillbus skill: the descriptor
/// from its schema and annotations, its answers as results. The rules are in docs/MCP.md, "MCP servers as
/// skills"; they are pure functions, tested without a server.
public struct MCPListedTool: Sendable, Equatable {
    public var name: String
    public var title: String?
    public var description: String
    public var inputSchema: JSONValue
    /// The hints the server gives: readOnlyHint, destructiveHint, idempotentHint, openWorldHint, title.
    public var annotations: [String: JSONValue]

    public init(json: JSONValue) throws(SkillbusError) {
        guard let name = json["name"]?.stringValue, !name.isEmpty else {
            throw SkillbusError(.malformedMessage, "a listed tool has no 'name'")
        }
        guard let schema = json["inputSchema"], schema.objectValue != nil else {
            throw SkillbusError(.malformedMessage, "tool '\(name.prefix(128))' has no 'inputSchema' object")
        }
        self.name = name
        title = json["title"]?.stringValue ?? json["annotations"]?["title"]?.stringValue
        description = json["description"]?.stringValue ?? ""
        inputSchema = schema
        annotations = json["annotations"]?.objectValue ?? [:]
    }
}

extension MCPListedTool {
    /// The skill's identifier: `<server>.<tool>`, or nil when the tool's name holds a character skill
    /// identifiers do not allow (such a tool is not mounted).
    public func skillIdentifier(server: String) -> String? {
        let identifier = server + "." + name
        return SkillDescriptor.isValidIdentifier(identifier) ? identifier : nil
    }

    /// The parameters our schema can express: each property with a single JSON type keeps it, anything else
    /// (a union, `anyOf`, no type) becomes `any` and is checked by the server; `required` and descriptions
    /// carry over; a default of the declared type carries over (a null default means "optional"). Keywords
    /// beyond that (enum, ranges, patterns, nested shapes) are left to the server.
    public func parameterSchema() throws(SkillbusError) -> ParameterSchema {
        if let type = inputSchema["type"], type != "object" {
            throw SkillbusError(.invalidRegistration, "tool '\(name)': its inputSchema is not of type object")
        }
        let properties = inputSchema["properties"]?.objectValue ?? [:]
        let required = Set(inputSchema["required"]?.arrayValue?.compactMap(\.stringValue) ?? [])
        var fields: [ParameterField] = []
        for (property, schema) in properties.sorted(by: { $0.key < $1.key }) {
            let type = Self.parameterType(schema)
            var defaultValue = schema["default"]
            if let value = defaultValue, value == .null || !type.accepts(value) { defaultValue = nil }
            let words = schema["description"]?.stringValue ?? schema["title"]?.stringValue ?? ""
            fields.append(
                ParameterField(
                    property, type, required: required.contains(property), description: words,
                    default: defaultValue))
        }
        let schema = ParameterSchema(fields)
        if let problem = schema.problems.first {
            throw SkillbusError(.invalidRegistration, "tool '\(name)': \(problem)")
        }
        return schema
    }

    static func parameterType(_ schema: JSONValue) -> ParameterType {
        guard let name = schema["type"]?.stringValue, let type = ParameterType(rawValue: name), type != .any else {
            return .any
        }
        return type
    }

    /// The descriptor the worker registers. idempotentHint → idempotent; readOnlyHint → pure, but only for a
    /// server the operator trusts (annotations are hints, and a pure skill's results are cached and shared).
    /// The tool's own schema and name travel in `metadata.mcp`, for anyone who wants the richer form.
    /// `cacheMs` applies to the pure ones only.
    public func descriptor(
        server: String, trusted: Bool, timeoutMs: Int?, cacheMs: Int? = nil
    ) throws(SkillbusError) -> SkillDescriptor {
        guard let identifier = skillIdentifier(server: server) else {
            throw SkillbusError(
                .invalidRegistration,
                "tool '\(name.prefix(128))' cannot be a skill: '\(server).\(name.prefix(128))' is no skill identifier"
                    + " (a-z A-Z 0-9 . _ -, at most 128)")
        }
        let pure = trusted && annotations["readOnlyHint"] == true
        return SkillDescriptor(
            identifier: identifier, displayName: title ?? name, description: description,
            parameters: try parameterSchema(), defaultTimeoutMs: timeoutMs,
            metadata: ["mcp": ["server": .string(server), "tool": .string(name), "inputSchema": inputSchema]],
            idempotent: annotations["idempotentHint"] == true, pure: pure, cacheMs: pure ? cacheMs : nil)
    }

    /// A `tools/call` answer as a skill's result: `isError` → `skill_failed` with the server's text;
    /// `structuredContent` → a JSON result; only text blocks → their text, one per line; one image or audio
    /// block → an attachment; any other mix → JSON `{"content": […]}` as the server sent it.
    public static func result(of answer: JSONValue, skill: String) throws(SkillbusError) -> SkillResult {
        guard answer.objectValue != nil, let content = answer["content"]?.arrayValue ?? Self.noContent(answer) else {
            throw SkillbusError(
                .skillFailed, "'\(skill)': the MCP server's answer is no tool result: \(answer.jsonString.prefix(200))")
        }
        let texts = content.compactMap { $0["type"] == "text" ? $0["text"]?.stringValue : nil }
        if answer["isError"] == true {
            let words = texts.isEmpty ? "the tool failed and said nothing more" : texts.joined(separator: "\n")
            throw SkillbusError(.skillFailed, words, details: ["content": .array(content)])
        }
        if let structured = answer["structuredContent"], structured != .null { return .json(structured) }
        if texts.count == content.count { return .text(texts.joined(separator: "\n")) }
        if content.count == 1, let media = attachment(content[0], skill: skill) { return .attachment(media) }
        return .json(["content": .array(content)])
    }

    /// A result with structured content may leave `content` out in practice; treat it as empty then.
    private static func noContent(_ answer: JSONValue) -> [JSONValue]? {
        answer["content"] == nil && answer["structuredContent"] != nil ? [] : nil
    }

    private static func attachment(_ block: JSONValue, skill: String) -> SkillResult.Attachment? {
        guard block["type"] == "image" || block["type"] == "audio",
            let mediaType = block["mimeType"]?.stringValue, let base64 = block["data"]?.stringValue,
            let data = Data(base64Encoded: base64)
        else { return nil }
        let kind = block["type"]?.stringValue ?? "media"
        return SkillResult.Attachment(name: "\(skill).\(kind)", mediaType: mediaType, bytes: Array(data))
    }
}
