/// What a worker tells the bus when it joins (READY frame 2, PROTOCOL §5.1).
public struct Registration: Sendable, Equatable {
    public var name: String
    public var capacity: Int
    /// The worker's heartbeat interval; nil leaves the bus's own.
    public var heartbeatMs: Int?
    public var skills: [SkillDescriptor]
    /// Whether the agent takes turns (TURN), its role and what it is good at.
    public var profile: AgentProfile
    public var planner: Bool { profile.planner }

    public init(
        name: String, capacity: Int, heartbeatMs: Int?, skills: [SkillDescriptor],
        profile: AgentProfile = AgentProfile()
    ) {
        self.name = name
        self.capacity = capacity
        self.heartbeatMs = heartbeatMs
        self.skills = skills
        self.profile = profile
    }

    public var json: JSONValue {
        var object: [String: JSONValue] = [
            "name": .string(name), "capacity": .number(Double(capacity)), "skills": .array(skills.map(\.json)),
        ]
        if let heartbeatMs { object["heartbeatMs"] = .number(Double(heartbeatMs)) }
        profile.write(into: &object)
        return .object(object)
    }

    public static let capacityRange = 1...100_000
    public static let heartbeatRange = 10...CoordinatorState.maxHeartbeatMs

    /// READY as the bus reads it, checked in the order of PROTOCOL §4.5 (rows 1-4). The descriptors are
    /// parsed one by one, because a bad one is refused alone: `offers` holds each in the order listed,
    /// and `skills` those that parsed.
    static func decode(_ json: JSONValue) throws(SkillbusError) -> (registration: Registration, offers: [SkillOffer]) {
        let name = json["name"]?.stringValue ?? ""
        guard SkillDescriptor.isValidIdentifier(name) else {
            throw SkillbusError(.invalidRegistration, "agent name '\(name)' is invalid: use 1-128 of a-z A-Z 0-9 . _ -")
        }
        guard let capacity = json["capacity"]?.intValue, capacityRange.contains(capacity) else {
            throw SkillbusError(
                .invalidRegistration,
                "agent '\(name)': 'capacity' must be an integer from 1 to \(capacityRange.upperBound)")
        }
        var heartbeatMs: Int?
        if let value = json["heartbeatMs"] {
            guard let ms = value.intValue, heartbeatRange.contains(ms) else {
                throw SkillbusError(
                    .invalidRegistration,
                    "agent '\(name)': 'heartbeatMs' must be an integer from \(heartbeatRange.lowerBound) to "
                        + "\(heartbeatRange.upperBound)")
            }
            heartbeatMs = ms
        }
        guard let list = json["skills"]?.arrayValue else {
            throw SkillbusError(.invalidRegistration, "agent '\(name)': 'skills' must be an array")
        }
        let profile = try AgentProfile(reading: json, "agent '\(name)'", code: .invalidRegistration)
        let offers = list.map(SkillOffer.init(parsing:))
        let registration = Registration(
            name: name, capacity: capacity, heartbeatMs: heartbeatMs, skills: offers.compactMap(\.descriptor),
            profile: profile)
        return (registration, offers)
    }
}

/// One descriptor a worker offered (in READY or SKILLS): parsed, or the reason it could not be.
enum SkillOffer: Sendable, Equatable {
    case parsed(SkillDescriptor)
    case invalid(SkillbusError)

    init(parsing json: JSONValue) {
        do throws(SkillbusError) {
            self = .parsed(try SkillDescriptor(json: json))
        } catch {
            self = .invalid(error)
        }
    }

    var descriptor: SkillDescriptor? { if case .parsed(let descriptor) = self { descriptor } else { nil } }
}

/// The bus's answer to READY and SKILLS (WELCOME frame 2, PROTOCOL §5.7).
public struct Welcome: Sendable, Equatable {
    /// The bus's heartbeat interval.
    public var heartbeatMs: Int
    /// The identifiers the agent offers now, sorted.
    public var accepted: [String]
    /// One error per refused descriptor, in the order they were listed.
    public var refused: [SkillbusError]
    /// The feed endpoint as the bus bound it; empty when it knows none.
    public var feed: String
    /// The bus's registry epoch.
    public var epoch: String

    public init(heartbeatMs: Int, accepted: [String], refused: [SkillbusError], feed: String, epoch: String) {
        self.heartbeatMs = heartbeatMs
        self.accepted = accepted
        self.refused = refused
        self.feed = feed
        self.epoch = epoch
    }

    public var json: JSONValue {
        [
            "heartbeatMs": .number(Double(heartbeatMs)), "accepted": .array(accepted.map { .string($0) }),
            "refused": .array(refused.map(\.json)), "feed": .string(feed), "epoch": .string(epoch),
        ]
    }

    public init(json: JSONValue) throws(SkillbusError) {
        guard let heartbeatMs = json["heartbeatMs"]?.intValue, Registration.heartbeatRange.contains(heartbeatMs),
            let accepted = json["accepted"]?.arrayValue, let refused = json["refused"]?.arrayValue,
            let feed = json["feed"]?.stringValue, let epoch = json["epoch"]?.stringValue
        else {
            throw SkillbusError(
                .malformedMessage,
                "WELCOME needs 'heartbeatMs' (10 to \(Registration.heartbeatRange.upperBound)), 'accepted', 'refused', "
                    + "'feed' and 'epoch', got \(json.jsonString.prefix(200))")
        }
        let names = accepted.compactMap(\.stringValue)
        guard names.count == accepted.count else {
            throw SkillbusError(.malformedMessage, "WELCOME 'accepted' must be an array of strings")
        }
        self.init(
            heartbeatMs: heartbeatMs, accepted: names, refused: refused.map(SkillbusError.init(json:)), feed: feed,
            epoch: epoch)
    }
}

/// An agent's state as shown on the feed.
public enum AgentState: Sendable, Equatable {
    case idle, thinking, selectingSkill, streaming, completed
    case executingSkill(String)
    /// Waiting for another agent's turn it asked for: the agent or `role:NAME` it asked.
    case delegating(String)
    case failed(String)

    public var name: String {
        switch self {
        case .idle: "idle"
        case .thinking: "thinking"
        case .selectingSkill: "selectingSkill"
        case .streaming: "streaming"
        case .completed: "completed"
        case .executingSkill: "executingSkill"
        case .delegating: "delegating"
        case .failed: "failed"
        }
    }

    /// The STATE body of a turn's state: `json` plus `session` and `turn`.
    public func json(in turn: TurnRef) -> JSONValue {
        var object = json.objectValue ?? [:]
        object["session"] = .string(turn.session)
        object["turn"] = .string(turn.turn)
        if let parameters = turn.parameters { object["parameters"] = parameters }
        if let parent = turn.parent {
            object["parent"] = .string(parent)
            object["depth"] = .number(Double(turn.depth))
        }
        return .object(object)
    }

    /// `json(in:)` written straight to bytes (a turn sends several STATEs a call); with `time`, the entry of
    /// the turn document's `states` instead (§5.18: no `session`, `turn` or `parameters`).
    func write(in turn: TurnRef?, time: String? = nil, to out: inout [UInt8]) {
        var members = JSONMemberWriter()
        out.append(UInt8(ascii: "{"))
        if let parent = turn?.parent {
            members.number("depth", Double(turn?.depth ?? 0), to: &out)
            if let parameters = turn?.parameters { members.value("parameters", parameters, to: &out) }
            members.string("parent", parent, to: &out)
        } else if let parameters = turn?.parameters {
            members.value("parameters", parameters, to: &out)
        }
        if case .failed(let reason) = self { members.string("reason", reason, to: &out) }
        if let turn { members.string("session", turn.session, to: &out) }
        if case .executingSkill(let skill) = self { members.string("skill", skill, to: &out) }
        members.string("state", name, to: &out)
        if let time { members.string("time", time, to: &out) }
        if case .delegating(let target) = self { members.string("to", target, to: &out) }
        if let turn { members.string("turn", turn.turn, to: &out) }
        out.append(UInt8(ascii: "}"))
    }

    /// `{"state": name}` plus `skill` for executingSkill and `reason` for failed.
    public var json: JSONValue {
        switch self {
        case .executingSkill(let skill): ["state": .string(name), "skill": .string(skill)]
        case .delegating(let target): ["state": .string(name), "to": .string(target)]
        case .failed(let reason): ["state": .string(name), "reason": .string(reason)]
        default: ["state": .string(name)]
        }
    }

    public init(json: JSONValue) throws(SkillbusError) {
        switch json["state"]?.stringValue {
        case "idle": self = .idle
        case "thinking": self = .thinking
        case "selectingSkill": self = .selectingSkill
        case "streaming": self = .streaming
        case "completed": self = .completed
        case "executingSkill": self = .executingSkill(json["skill"]?.stringValue ?? "")
        case "delegating": self = .delegating(json["to"]?.stringValue ?? "")
        case "failed": self = .failed(json["reason"]?.stringValue ?? "")
        default:
            throw SkillbusError(.malformedMessage, "unknown agent state in \(json.jsonString)")
        }
    }
}
