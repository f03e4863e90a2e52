/// One tool of a mounted MCP server, offered as the skill `<server>.<tool>`. A call waits (within its
/// deadline) for the server to be connected, calls the tool with the validated parameters as its arguments,
/// turns progress into partial output, and the answer into a result (`MCPListedTool.result`). Cancelling the
/// invocation (CANCEL, the deadline) sends `notifications/cancelled`.
struct MCPToolSkill: AgentSkill {
    let skill: SkillDescriptor
    let tool: String
    let mount: MCPServerMount

    var identifier: String { skill.identifier }
    var displayName: String { skill.displayName }
    var description: String { skill.description }
    var parameterSchema: ParameterSchema { skill.parameters }
    var defaultTimeoutMs: Int? { skill.defaultTimeoutMs }
    var isIdempotent: Bool { skill.idempotent }
    var isPure: Bool { skill.pure }
    var cacheMs: Int? { skill.cacheMs }
    var metadata: [String: JSONValue] { skill.metadata }

    func execute(parameters: [String: JSONValue], context: SkillExecutionContext) async throws -> SkillResult {
        let client = try await mount.connectedClient(until: context.deadline)
        let answer = try await client.callTool(
            tool, arguments: parameters, deadline: context.deadline,
            progress: { progress in
                // Partial output past the agent's limit cancels the invocation by itself; nothing to do here.
                try? context.emit(Self.text(of: progress))
            })
        return try MCPListedTool.result(of: answer, skill: identifier)
    }

    /// A progress notification as a line of partial output: its message, else how far it got.
    static func text(of progress: MCPSessionState.Progress) -> String {
        if let message = progress.message, !message.isEmpty { return message }
        let done = JSONValue.number(progress.progress).jsonString
        return progress.total.map { "progress \(done)/\(JSONValue.number($0).jsonString)" } ?? "progress \(done)"
    }
}
