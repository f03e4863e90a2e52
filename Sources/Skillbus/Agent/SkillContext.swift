/// A skill's view of its agent's memory: keys → JSON values in the agent's own scope or in the
/// session's. Writes reach the agent's store at once for every later read, and its disk within the
/// store's flush interval.
public struct SkillMemory: Sendable {
    let store: AgentStore
    /// The session of the invocation; empty when it has none.
    public let sessionID: String

    /// `session` when the invocation has a session, `agent` otherwise.
    public var defaultScope: MemoryScope { sessionID.isEmpty ? .agent : .session(sessionID) }

    /// The scope a caller names (`"agent"` or `"session"`; nil: the default), checked against the
    /// invocation: session scope needs a session.
    public func scope(named name: String?) throws(SkillbusError) -> MemoryScope {
        switch name {
        case nil: return defaultScope
        case "agent": return .agent
        case "session":
            guard !sessionID.isEmpty else {
                throw SkillbusError(
                    .invalidParameters,
                    "scope 'session' needs a session: send the request with a session id (--session), or use scope 'agent'")
            }
            return .session(sessionID)
        case let other?:
            throw SkillbusError(.invalidParameters, "scope must be 'agent' or 'session', got '\(other.prefix(64))'")
        }
    }

    public func get(_ key: String, scope: MemoryScope) -> JSONValue? { store.memory(key, scope: scope) }

    public func set(_ key: String, _ value: JSONValue, scope: MemoryScope) throws(SkillbusError) {
        try store.setMemory(key, value, scope: scope)
    }

    @discardableResult
    public func delete(_ key: String, scope: MemoryScope) throws(SkillbusError) -> Bool {
        try store.deleteMemory(key, scope: scope)
    }

    /// Every key starting with `prefix`, sorted, with its value.
    public func list(prefix: String = "", scope: MemoryScope) -> [(key: String, value: JSONValue)] {
        store.memory(prefix: prefix, scope: scope)
    }
}

/// The session an invocation runs in, as its skill sees it: its id and its history so far (read-only).
public struct SkillSession: Sendable {
    let store: AgentStore
    public let id: String

    /// The session's messages in order; empty for a session this agent has not seen before.
    public func history() async throws(SkillbusError) -> [SessionMessage] { try await store.history(id) ?? [] }

    public var summary: SessionSummary? { store.session(id) }
}
