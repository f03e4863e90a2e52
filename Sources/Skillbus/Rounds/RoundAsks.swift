/// What a team round asks of agents (PROTOCOL §3.5.10): one agent or role asked a message (an `ask` body or
/// a plan step with `ask`), or several agents asked the same message (an `asks` body). Each ask is a turn the
/// bus starts for the round.
public struct AskStep: Sendable, Equatable {
    /// The agent, or a role (the bus picks a live agent with a planner that plays it when the ask starts).
    public var target: AgentTarget
    public var message: MessageText

    public init(target: AgentTarget, message: MessageText) {
        self.target = target
        self.message = message
    }

    /// `{"agent": NAME, "message": M}` or `{"role": ROLE, "message": M}`.
    public var json: JSONValue {
        switch target {
        case .agent(let name): ["agent": .string(name), "message": message.json]
        case .role(let role): ["role": .string(role), "message": message.json]
        }
    }

    /// Reads an ask object; `what` names it in errors (`ask`, `plan step 'draft'`).
    init(json: JSONValue, _ what: String) throws(SkillbusError) {
        guard json.objectValue != nil else { throw RoundSpec.invalid("\(what): 'ask' must be an object") }
        switch (json["agent"], json["role"]) {
        case (let agent?, nil):
            guard let name = agent.stringValue, !name.isEmpty, !name.contains(":") else {
                throw RoundSpec.invalid("\(what): 'agent' must be an agent name")
            }
            target = .agent(name)
        case (nil, let role?):
            guard let name = role.stringValue, AgentProfile.isValidRole(name) else {
                throw RoundSpec.invalid(
                    "\(what): 'role' must be a role (1-\(AgentProfile.maxRoleBytes) of a-z A-Z 0-9 _ -)")
            }
            target = .role(name)
        case (nil, nil):
            throw RoundSpec.invalid("\(what): an ask names an 'agent' or a 'role'")
        case (_?, _?):
            throw RoundSpec.invalid("\(what): an ask names an 'agent' or a 'role', not both")
        }
        message = try MessageText(json: json["message"], what)
    }
}

/// Whom an `asks` body asks: named agents, every agent with a planner that plays a role, or every agent with
/// a planner. Resolved to agent names when the round is accepted, sorted by name for a role or `all`.
public enum AgentGroup: Sendable, Equatable {
    case agents([String])
    case role(String)
    case all
}

/// The text of an ask: a string, a reference to an earlier step's result (`{"$ref": "draft.reply"}`), or an
/// array of strings and references joined without separators. A referenced value that is not a string is
/// written as compact JSON. Kept as the JSON it was given in, which is also how the body is compared.
public struct MessageText: Sendable, Equatable {
    public let json: JSONValue

    /// A message with nothing to resolve.
    public init(_ text: String) { json = .string(text) }

    init(json: JSONValue?, _ what: String) throws(SkillbusError) {
        guard let json else { throw RoundSpec.invalid("\(what): an ask needs a 'message'") }
        let pieces = json.arrayValue ?? [json]
        guard !pieces.isEmpty, pieces.allSatisfy({ $0.stringValue != nil || Reference($0) != nil }) else {
            throw RoundSpec.invalid(
                "\(what): 'message' must be a string, a {\"$ref\": …}, or a non-empty array of strings and references")
        }
        self.json = json
    }

    var references: [Reference] { (json.arrayValue ?? [json]).compactMap(Reference.init) }

    /// The text with every reference replaced by what it names in `results` (step id → result form).
    func resolve(_ results: [String: JSONValue]) -> Result<String, SkillbusError> {
        var text = ""
        for piece in json.arrayValue ?? [json] {
            if let literal = piece.stringValue {
                text += literal
                continue
            }
            switch piece.resolvingReferences(results) {
            case .success(let value): text += value.stringValue ?? value.jsonString
            case .failure(let error): return .failure(error)
            }
        }
        return .success(text)
    }
}

extension RoundSpec {
    /// `{"ask": {"agent" | "role", "message"}}`: its message is text, with no step to refer to.
    static func parseAsk(_ body: JSONValue) throws(SkillbusError) -> RoundSpec {
        let ask = try AskStep(json: body, "ask")
        if let reference = ask.message.references.first {
            throw invalid("ask: reference '\(reference.text)' names no step: a round of one ask has none")
        }
        return .ask(ask)
    }

    /// `{"asks": {"agents": [..] | "all", "role": R, "message": M, "aggregate": A}}`.
    static func parseAsks(_ body: JSONValue) throws(SkillbusError) -> RoundSpec {
        let group: AgentGroup
        switch (body["agents"], body["role"]) {
        case (nil, nil), (.string("all")?, nil): group = .all
        case (.array(let list)?, nil):
            let names = list.compactMap(\.stringValue)
            guard names.count == list.count, !names.isEmpty, Set(names).count == names.count,
                !names.contains(where: \.isEmpty)
            else {
                throw invalid("asks: 'agents' must be \"all\" or a non-empty list of distinct agent names")
            }
            group = .agents(names)
        case (nil, let role?):
            guard let name = role.stringValue, AgentProfile.isValidRole(name) else {
                throw invalid("asks: 'role' must be a role (1-\(AgentProfile.maxRoleBytes) of a-z A-Z 0-9 _ -)")
            }
            group = .role(name)
        case (_?, nil):
            throw invalid("asks: 'agents' must be \"all\" or a list of agent names")
        case (_?, _?):
            throw invalid("asks: give 'agents' or 'role', not both")
        }
        guard let message = body["message"]?.stringValue else { throw invalid("asks: 'message' must be a string") }
        let mode = body["aggregate"]?.stringValue ?? "all"
        guard let aggregate = Aggregation(rawValue: mode) else {
            throw invalid("asks: 'aggregate' must be all, first or majority, got '\(mode)'")
        }
        return .asks(group, message: message, aggregate: aggregate)
    }

    /// The `asks` body's JSON: `agents` a list or `"all"`, or `role`.
    static func asksJSON(_ group: AgentGroup, _ message: String, _ aggregate: Aggregation) -> JSONValue {
        var object: [String: JSONValue] = ["message": .string(message), "aggregate": .string(aggregate.rawValue)]
        switch group {
        case .agents(let names): object["agents"] = .array(names.map { .string($0) })
        case .role(let role): object["role"] = .string(role)
        case .all: object["agents"] = "all"
        }
        return ["asks": .object(object)]
    }

    /// Whether the round asks agents for turns: such a round is never run again after a restart (a turn is not
    /// idempotent, PROTOCOL §3.5.9).
    public var asksAgents: Bool {
        switch self {
        case .ask, .asks: true
        case .plan(let steps, _): steps.contains { $0.ask != nil }
        case .invoke, .fanout: false
        }
    }
}
