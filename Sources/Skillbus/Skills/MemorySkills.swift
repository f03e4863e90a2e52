/// The agent's memory from the command line and from other skills: set, get, list and delete keys in
/// the agent's own scope or the session's (the default when the request has a session).
enum MemorySkills {
    static let scopeField = ParameterField(
        "scope", .string, required: false,
        description: "agent or session (default: session when the request has one, else agent)")
    static let keyField = ParameterField("key", .string, description: "The key (1 to 1024 bytes)")

    /// The memory of the invocation's agent; an agent that keeps no context has none.
    static func memory(_ context: SkillExecutionContext, for skill: String) throws(SkillbusError) -> SkillMemory {
        guard let memory = context.memory else {
            throw SkillbusError(.unsupported, "agent '\(context.agentName)' keeps no context store, so '\(skill)' cannot run")
        }
        return memory
    }

    static func scopeName(_ scope: MemoryScope) -> JSONValue {
        switch scope {
        case .agent: "agent"
        case .session: "session"
        }
    }
}

/// Stores a JSON value under a key.
public struct MemorySetSkill: AgentSkill {
    public init() {}
    public var executionStyle: SkillExecutionStyle { .quick }
    public let identifier = "memory.set"
    public let displayName = "Remember"
    public let description = "Stores a JSON value under a key in the agent's memory (session or agent scope)."
    public let parameterSchema = ParameterSchema([
        MemorySkills.keyField, ParameterField("value", .any, description: "Any JSON value"), MemorySkills.scopeField,
    ])

    public func execute(parameters: [String: JSONValue], context: SkillExecutionContext) async throws -> SkillResult {
        let memory = try MemorySkills.memory(context, for: identifier)
        let scope = try memory.scope(named: parameters["scope"]?.stringValue)
        let key = parameters["key"]?.stringValue ?? ""
        try memory.set(key, parameters["value"] ?? .null, scope: scope)
        return .json(["key": .string(key), "scope": MemorySkills.scopeName(scope), "stored": true])
    }
}

/// Reads the value stored under a key.
public struct MemoryGetSkill: AgentSkill {
    public init() {}
    public var isIdempotent: Bool { true }
    public var retryPolicy: RetryPolicy? { RetryPolicy() }
    public var executionStyle: SkillExecutionStyle { .quick }
    public let identifier = "memory.get"
    public let displayName = "Recall"
    public let description = "Reads the value stored under a key in the agent's memory; found is false when none is."
    public let parameterSchema = ParameterSchema([MemorySkills.keyField, MemorySkills.scopeField])

    public func execute(parameters: [String: JSONValue], context: SkillExecutionContext) async throws -> SkillResult {
        let memory = try MemorySkills.memory(context, for: identifier)
        let scope = try memory.scope(named: parameters["scope"]?.stringValue)
        let key = parameters["key"]?.stringValue ?? ""
        let value = memory.get(key, scope: scope)
        return .json([
            "key": .string(key), "scope": MemorySkills.scopeName(scope), "found": .bool(value != nil),
            "value": value ?? .null,
        ])
    }
}

/// Lists the keys (with their values) that start with a prefix.
public struct MemoryListSkill: AgentSkill {
    public init() {}
    public var isIdempotent: Bool { true }
    public var retryPolicy: RetryPolicy? { RetryPolicy() }
    public var executionStyle: SkillExecutionStyle { .quick }
    public let identifier = "memory.list"
    public let displayName = "List memory"
    public let description = "Lists the keys and values of the agent's memory that start with a prefix, sorted."
    public let parameterSchema = ParameterSchema([
        ParameterField("prefix", .string, required: false, description: "Keys starting with this (default: all)"),
        MemorySkills.scopeField,
    ])

    public func execute(parameters: [String: JSONValue], context: SkillExecutionContext) async throws -> SkillResult {
        let memory = try MemorySkills.memory(context, for: identifier)
        let scope = try memory.scope(named: parameters["scope"]?.stringValue)
        let entries = memory.list(prefix: parameters["prefix"]?.stringValue ?? "", scope: scope)
        return .json([
            "scope": MemorySkills.scopeName(scope),
            "entries": .array(entries.map { ["key": .string($0.key), "value": $0.value] }),
        ])
    }
}

/// Forgets a key.
public struct MemoryDeleteSkill: AgentSkill {
    public init() {}
    public var executionStyle: SkillExecutionStyle { .quick }
    public let identifier = "memory.delete"
    public let displayName = "Forget"
    public let description = "Deletes a key from the agent's memory; deleted is false when it held none."
    public let parameterSchema = ParameterSchema([MemorySkills.keyField, MemorySkills.scopeField])

    public func execute(parameters: [String: JSONValue], context: SkillExecutionContext) async throws -> SkillResult {
        let memory = try MemorySkills.memory(context, for: identifier)
        let scope = try memory.scope(named: parameters["scope"]?.stringValue)
        let key = parameters["key"]?.stringValue ?? ""
        let deleted = try memory.delete(key, scope: scope)
        return .json(["key": .string(key), "scope": MemorySkills.scopeName(scope), "deleted": .bool(deleted)])
    }
}
