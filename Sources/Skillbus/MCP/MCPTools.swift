import Foundation

/// The MCP protocol revisions `skillbus mcp` speaks, newest first.
public enum MCPVersion {
    public static let supported = ["2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"]
    public static var latest: String { supported[0] }

    /// The revision to answer an `initialize` with: the client's when we speak it, else our newest (the
    /// client then decides whether it can go on).
    public static func negotiate(_ requested: String?) -> String {
        guard let requested, supported.contains(requested) else { return latest }
        return requested
    }
}

/// One tool of the listing: a skill of the registry, or an agent with a planner that the tool asks.
public struct MCPTool: Sendable, Equatable {
    public enum Target: Sendable, Equatable {
        case skill(SkillDescriptor)
        case agent(String)
    }

    public var name: String
    public var target: Target
    public var json: JSONValue

    /// Agents appear as `ask.<agent>`; a skill of that very name wins over the agent.
    public static let agentPrefix = "ask."

    public init(skill: SkillDescriptor) {
        name = skill.identifier
        target = .skill(skill)
        var object: [String: JSONValue] = [
            "name": .string(skill.identifier), "title": .string(skill.displayName),
            "description": .string(skill.description.isEmpty ? skill.displayName : skill.description),
            "inputSchema": MCPTool.inputSchema(skill.parameters),
            "annotations": [
                "title": .string(skill.displayName), "readOnlyHint": .bool(skill.pure),
                "destructiveHint": .bool(skill.needsConfirmation), "idempotentHint": .bool(skill.idempotent),
            ],
        ]
        if skill.needsConfirmation {
            object["description"] = .string(
                (object["description"]?.stringValue ?? "") + " (Asks the user to confirm before it runs.)")
        }
        json = .object(object)
    }

    public init(agent: Registry.Agent) {
        name = MCPTool.agentPrefix + agent.name
        target = .agent(agent.name)
        var about = "Ask the Skillbus agent '\(agent.name)'"
        if let role = agent.profile.role { about += " (role \(role))" }
        about += ": it answers the message, calling skills as it decides, and its reply is the result."
        if let description = agent.profile.description { about += " " + description }
        let schema = ParameterSchema([
            ParameterField("message", .string, description: "What to say to the agent")
        ])
        json = [
            "name": .string(name), "title": .string("Ask \(agent.name)"), "description": .string(about),
            "inputSchema": MCPTool.inputSchema(schema),
        ]
    }

    /// JSON Schema 2020-12 for a parameter schema: an object of exactly these properties.
    public static func inputSchema(_ schema: ParameterSchema) -> JSONValue {
        var object = schema.jsonSchema.objectValue ?? [:]
        object["$schema"] = "https://json-schema.org/draft/2020-12/schema"
        return .object(object)
    }
}

/// The registry as a list of tools: every skill, then every agent with a planner, in name order.
public struct MCPToolList: Sendable, Equatable {
    public private(set) var tools: [MCPTool]

    public init(_ registry: Registry) {
        var byName: [String: MCPTool] = [:]
        for skill in registry.skills.values { byName[skill.descriptor.identifier] = MCPTool(skill: skill.descriptor) }
        for agent in registry.agents.values where agent.profile.planner {
            let tool = MCPTool(agent: agent)
            if byName[tool.name] == nil { byName[tool.name] = tool }
        }
        tools = byName.values.sorted { $0.name < $1.name }
    }

    public func tool(named name: String) -> MCPTool? { tools.first { $0.name == name } }

    /// The tool `name` names in `registry`, found without listing them all (a call's look-up): the skill of
    /// that identifier, else the agent with a planner that `ask.<agent>` names.
    public static func tool(named name: String, in registry: Registry) -> MCPTool? {
        if let skill = registry.skills[name] { return MCPTool(skill: skill.descriptor) }
        guard name.hasPrefix(MCPTool.agentPrefix),
            let agent = registry.agents[String(name.dropFirst(MCPTool.agentPrefix.count))], agent.profile.planner
        else { return nil }
        return MCPTool(agent: agent)
    }

    /// One page after `cursor` (nil: the first), and the cursor of the next page when there is one.
    /// A cursor names the last tool of its page, so a registry that changes between pages skips or
    /// repeats nothing that stayed.
    public func page(after cursor: String?, size: Int) throws(JSONRPCError) -> (tools: [MCPTool], next: String?) {
        var start = 0
        if let cursor {
            guard let data = Data(base64Encoded: cursor), let text = String(data: data, encoding: .utf8),
                text.hasPrefix("after:")
            else { throw JSONRPCError.invalidParams("invalid cursor '\(cursor.prefix(64))'") }
            let last = String(text.dropFirst("after:".count))
            start = tools.firstIndex { $0.name > last } ?? tools.count
        }
        let page = Array(tools[start..<min(tools.count, start + size)])
        guard start + size < tools.count, let last = page.last else { return (page, nil) }
        return (page, Data(("after:" + last.name).utf8).base64EncodedString())
    }
}
