/// Who a turn is for, as a client or a planner names it: one agent by name, or a role — then the bus picks
/// a live agent with a planner that plays it (PROTOCOL §3.7). On the wire a role is written `role:NAME`,
/// which no agent name can be (`:` is not allowed in names).
public enum AgentTarget: Sendable, Hashable, CustomStringConvertible {
    case agent(String)
    case role(String)

    static let rolePrefix = "role:"

    /// Reads `text`; nil for empty text (no target).
    public init?(_ text: String) {
        guard !text.isEmpty else { return nil }
        if text.hasPrefix(Self.rolePrefix) {
            self = .role(String(text.dropFirst(Self.rolePrefix.count)))
        } else {
            self = .agent(text)
        }
    }

    /// As written on the wire and in documents.
    public var text: String {
        switch self {
        case .agent(let name): name
        case .role(let role): Self.rolePrefix + role
        }
    }

    /// As a person reads it: `agent 'alpha'`, `role 'critic'`.
    public var description: String {
        switch self {
        case .agent(let name): "agent '\(name.prefix(128))'"
        case .role(let role): "role '\(role.prefix(128))'"
        }
    }
}
