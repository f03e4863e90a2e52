import SkillbusZMQ

/// Who may connect to a coordinator that has keys, and as what: every public key it knows, with a name, a
/// role and (for a worker) the agent names it may register; and which roles may read the feed. A plain
/// value: the ZAP handler asks it about connections, the coordinator's loop about messages.
public struct AccessPolicy: Sendable, Equatable {
    public enum Role: String, Sendable, CaseIterable {
        /// Sends rounds, requests, turns, queries and listings.
        case client
        /// Everything a client does, and registers as one of its agent names.
        case worker
        /// Everything a client does; the role for operators (PROTOCOL §12).
        case admin
    }

    public struct Key: Sendable, Equatable {
        /// Unique among the policy's keys; the connection's "User-Id".
        public var name: String
        public var role: Role
        /// Z85.
        public var publicKey: String
        /// The agent names this key may register (worker keys only). A name belongs to one key.
        public var agents: [String]

        public init(name: String, role: Role, publicKey: String, agents: [String] = []) {
            self.name = name
            self.role = role
            self.publicKey = publicKey
            self.agents = agents
        }

        /// Whether a READY with this agent name is this key's to send.
        public func mayRegister(_ agent: String) -> Bool { role == .worker && agents.contains(agent) }
    }

    /// The ZAP domains of the coordinator's two sockets.
    public static let busDomain = "skillbus.bus"
    public static let feedDomain = "skillbus.feed"

    public private(set) var keys: [Key]
    public var feedRoles: Set<Role>
    private var byPublicKey: [[UInt8]: Int] = [:]
    private var byName: [String: Int] = [:]

    /// Checks what no lookup could repair later: names and public keys unique, agent names valid and each
    /// owned by one worker key, agents only on worker keys. The message names the key at fault.
    public init(keys: [Key], feedRoles: Set<Role> = Set(Role.allCases)) throws(SkillbusError) {
        self.keys = keys
        self.feedRoles = feedRoles
        var owners: [String: String] = [:]
        for (index, key) in keys.enumerated() {
            func refuse(_ problem: String) -> SkillbusError {
                SkillbusError(.invalidConfiguration, "security.keys[\(index)] ('\(key.name)'): \(problem)")
            }
            guard SkillDescriptor.isValidIdentifier(key.name) else { throw refuse("name: 1-128 of a-z A-Z 0-9 . _ -") }
            guard let raw = Curve.decode(key.publicKey) else { throw refuse("publicKey is no Z85 key of 40 characters") }
            guard byName.updateValue(index, forKey: key.name) == nil else { throw refuse("the name is used twice") }
            if let other = byPublicKey.updateValue(index, forKey: raw) {
                throw refuse("the same public key as '\(keys[other].name)'; one key, one entry")
            }
            if key.role == .worker, key.agents.isEmpty { throw refuse("a worker key needs the agent names it may use") }
            if key.role != .worker, !key.agents.isEmpty { throw refuse("only worker keys register agents") }
            for agent in key.agents {
                guard SkillDescriptor.isValidIdentifier(agent) else { throw refuse("agent name '\(agent)' is invalid") }
                if let owner = owners.updateValue(key.name, forKey: agent) {
                    throw refuse("agent name '\(agent)' already belongs to key '\(owner)'")
                }
            }
        }
    }

    public func key(named name: String) -> Key? { byName[name].map { keys[$0] } }

    public func key(raw publicKey: [UInt8]) -> Key? { byPublicKey[publicKey].map { keys[$0] } }

    /// The ZAP handler's answer for a connection: the key's name as its user id, or why not.
    public func authenticate(_ request: ZAPRequest) -> ZAPVerdict {
        guard request.mechanism == "CURVE", let credential = request.credentials.first, credential.count == 32 else {
            return .refuse(reason: "not a CURVE connection (\(request.mechanism))")
        }
        guard let key = key(raw: credential) else { return .refuse(reason: "unknown key") }
        switch request.domain {
        case Self.busDomain:
            return .accept(userID: key.name)
        case Self.feedDomain:
            guard feedRoles.contains(key.role) else {
                return .refuse(reason: "key '\(key.name)' (\(key.role.rawValue)) may not read the feed")
            }
            return .accept(userID: key.name)
        default:
            return .refuse(reason: "unknown ZAP domain '\(request.domain.prefix(64))'")
        }
    }

    /// Why the key behind `userID` may not send this client message, or nil when it may: every role may
    /// send every client message about its own requests; cancelling a whole round by id, whoever sent it,
    /// is an admin key's.
    public func refusal(of message: ClientMessage, from userID: String?) -> SkillbusError? {
        guard let key = userID.flatMap(key(named:)) else {
            return SkillbusError(.notAllowed, "this connection has no key the bus knows")
        }
        if case .cancelRound = message, key.role != .admin {
            return SkillbusError(
                .notAllowed,
                "key '\(key.name)' (\(key.role.rawValue)) may not cancel a round by id; an admin key may, "
                    + "and any key may cancel its own requests")
        }
        return nil
    }

    /// Why the key behind `userID` may not send this worker message, or nil when it may. Worker messages
    /// are only a worker key's, and READY only with one of its names.
    public func refusal(of message: WorkerMessage, from userID: String?) -> SkillbusError? {
        guard let key = userID.flatMap(key(named:)) else {
            return SkillbusError(.notAllowed, "this connection has no key the bus knows")
        }
        guard key.role == .worker else {
            return SkillbusError(.notAllowed, "key '\(key.name)' (\(key.role.rawValue)) may not send worker messages")
        }
        guard case .ready(let body) = message else { return nil }
        let name = body["name"]?.stringValue ?? ""
        guard key.mayRegister(name) else {
            return SkillbusError(
                .notAllowed, "key '\(key.name)' may not register agent '\(name.prefix(128))'",
                details: ["agent": .string(name), "key": .string(key.name)])
        }
        return nil
    }
}
