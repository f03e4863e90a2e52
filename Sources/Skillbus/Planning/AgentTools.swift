/// The other agents as tools of a chat-completions model (PROTOCOL §3.7.1, §3.7.2): `ask_<agent>` asks one a
/// `message` (a nested turn, whose reply is the tool's result), `transfer_to_<agent>` hands the session over
/// with a `note`. The agent part of the name is written as skills' are (`ToolNames`).
enum AgentTools {
    static let askPrefix = "ask_"
    static let transferPrefix = "transfer_to_"

    static func tools(_ agents: [TeamMember]) -> [JSONValue] {
        agents.flatMap { agent -> [JSONValue] in
            let about = [agent.role.map { "plays the role '\($0)'" }, agent.description].compactMap { $0 }
                .joined(separator: "; ")
            let who = "agent '\(agent.name)'" + (about.isEmpty ? "" : " (\(about))")
            return [
                function(
                    askPrefix + ToolNames.name(for: agent.name),
                    "Ask \(who) a question or give it a task; its answer comes back as this tool's result.",
                    parameter: "message", "What to ask the agent, complete in itself."),
                function(
                    transferPrefix + ToolNames.name(for: agent.name),
                    "Hand this conversation over to \(who): it answers the user's message instead of you.",
                    parameter: "note", "Why you hand over, and what the agent should know."),
            ]
        }
    }

    private static func function(_ name: String, _ description: String, parameter: String, _ about: String) -> JSONValue {
        [
            "type": "function",
            "function": [
                "name": .string(name), "description": .string(description),
                "parameters": [
                    "type": "object", "properties": [parameter: ["type": "string", "description": .string(about)]],
                    "required": [.string(parameter)], "additionalProperties": false,
                ],
            ],
        ]
    }

    /// The tool name of a step that asked `target` (so that the model sees its earlier calls as it made them).
    static func askName(_ target: AgentTarget) -> String {
        switch target {
        case .agent(let name): askPrefix + ToolNames.name(for: name)
        case .role(let role): askPrefix + "role_" + ToolNames.name(for: role)
        }
    }

    /// The decision a call of an agent tool stands for; nil when `name` is no agent tool of `agents`.
    static func decision(for name: String, arguments: JSONValue?, among agents: [TeamMember]) -> PlannerDecision? {
        for agent in agents {
            let part = ToolNames.name(for: agent.name)
            if name == askPrefix + part {
                return .ask(.agent(agent.name), message: arguments?["message"]?.stringValue ?? "")
            }
            if name == transferPrefix + part {
                return .handoff(.agent(agent.name), note: arguments?["note"]?.stringValue ?? "")
            }
        }
        return nil
    }
}
