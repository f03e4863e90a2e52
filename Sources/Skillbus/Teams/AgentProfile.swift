/// What an agent says of itself for teamwork: whether it takes turns (it has a planner), the role it plays
/// (a short word other agents and clients can name instead of its name) and what it is good at. Part of
/// its registration and of its registry entry, so every replica — and so every other agent's planner —
/// sees it.
public struct AgentProfile: Sendable, Equatable, Hashable {
    public var planner: Bool
    public var role: String?
    public var description: String?

    public init(planner: Bool = false, role: String? = nil, description: String? = nil) {
        self.planner = planner
        self.role = role
        self.description = description
    }

    public static let maxRoleBytes = 64
    public static let maxDescriptionBytes = 1024

    /// A role is a short word: 1 to 64 of `a-z A-Z 0-9 _ -`.
    public static func isValidRole(_ role: String) -> Bool {
        !role.isEmpty && role.utf8.count <= maxRoleBytes
            && role.utf8.allSatisfy { byte in
                (byte >= 0x61 && byte <= 0x7A) || (byte >= 0x41 && byte <= 0x5A) || (byte >= 0x30 && byte <= 0x39)
                    || byte == 0x5F || byte == 0x2D
            }
    }

    /// Its keys of a registration or registry entry, written only when set: an entry without them is the
    /// same bytes as before teams (the registry digest does not move).
    func write(into object: inout [String: JSONValue]) {
        if planner { object["planner"] = true }
        if let role { object["role"] = .string(role) }
        if let description { object["description"] = .string(description) }
    }

    /// Reads the keys of `json`; `what` names the agent in errors.
    init(reading json: JSONValue, _ what: String, code: SkillbusError.Code) throws(SkillbusError) {
        self.init()
        if let value = json["planner"] {
            guard let flag = value.boolValue else { throw SkillbusError(code, "\(what): 'planner' must be true or false") }
            planner = flag
        }
        if let value = json["role"] {
            guard let text = value.stringValue, Self.isValidRole(text) else {
                throw SkillbusError(
                    code, "\(what): 'role' must be a short word (1-\(Self.maxRoleBytes) of a-z A-Z 0-9 _ -)")
            }
            role = text
        }
        if let value = json["description"] {
            guard let text = value.stringValue, text.utf8.count <= Self.maxDescriptionBytes else {
                throw SkillbusError(code, "\(what): 'description' must be a string of at most \(Self.maxDescriptionBytes) bytes")
            }
            description = text
        }
    }
}
