/// The shared skill registry: which agent offers which skills. The coordinator holds the authoritative
/// copy and publishes every change as one sequenced `RegistryUpdate`; a `RegistryReplica` rebuilds the
/// same value from a snapshot plus those updates.
///
/// It is keyed by agent: each update replaces one agent's whole entry (or removes it), so applying an
/// update twice, or a snapshot after an update, gives the same result. The per-skill view is derived.
public struct Registry: Sendable, Equatable {
    /// One agent's part of the registry.
    public struct Agent: Sendable, Equatable {
        public var name: String
        public var capacity: Int
        /// Sorted by identifier.
        public var skills: [SkillDescriptor]
        /// Whether it takes turns, its role and description (teams of agents).
        public var profile: AgentProfile

        public init(name: String, capacity: Int, skills: [SkillDescriptor], profile: AgentProfile = AgentProfile()) {
            self.name = name
            self.capacity = capacity
            self.skills = skills.sorted { $0.identifier < $1.identifier }
            self.profile = profile
        }

        public var json: JSONValue {
            var object: [String: JSONValue] = [
                "agent": .string(name), "capacity": .number(Double(capacity)), "skills": .array(skills.map(\.json)),
            ]
            profile.write(into: &object)
            return .object(object)
        }

        public init(json: JSONValue) throws(SkillbusError) {
            guard let name = json["agent"]?.stringValue, SkillDescriptor.isValidIdentifier(name),
                let capacity = json["capacity"]?.intValue, capacity > 0, let list = json["skills"]?.arrayValue
            else {
                throw SkillbusError(
                    .malformedMessage, "a registry entry needs 'agent', 'capacity' and 'skills', got \(json.jsonString)"
                )
            }
            var skills: [SkillDescriptor] = []
            for item in list { skills.append(try SkillDescriptor(json: item)) }
            let profile = try AgentProfile(reading: json, "registry entry '\(name)'", code: .malformedMessage)
            self.init(name: name, capacity: capacity, skills: skills, profile: profile)
        }
    }

    /// One skill as the registry shows it: its descriptor and the agents that offer it.
    public struct Skill: Sendable, Equatable {
        public var descriptor: SkillDescriptor
        /// Agent names, sorted.
        public var providers: [String]
    }

    public private(set) var agents: [String: Agent] = [:]
    /// Derived from `agents`.
    public private(set) var skills: [String: Skill] = [:]

    public init() {}

    public init(agents: [Agent]) {
        for agent in agents { set(agent.name, to: agent) }
    }

    public static func == (lhs: Registry, rhs: Registry) -> Bool { lhs.agents == rhs.agents }

    /// Replaces (or with nil removes) one agent's entry. Returns the skills it now offers that it did
    /// not before, and those it no longer offers.
    @discardableResult
    public mutating func set(_ name: String, to entry: Agent?) -> (provided: [String], withdrawn: [String]) {
        let before = Set(agents[name]?.skills.map(\.identifier) ?? [])
        let after = Set(entry?.skills.map(\.identifier) ?? [])
        for identifier in before.subtracting(after) {
            skills[identifier]?.providers.removeAll { $0 == name }
            if skills[identifier]?.providers.isEmpty == true { skills[identifier] = nil }
        }
        agents[name] = entry
        for descriptor in entry?.skills ?? [] {
            if var skill = skills[descriptor.identifier] {
                if !skill.providers.contains(name) {
                    skill.providers.insert(name, at: skill.providers.firstIndex { $0 > name } ?? skill.providers.count)
                }
                skill.descriptor = descriptor
                skills[descriptor.identifier] = skill
            } else {
                skills[descriptor.identifier] = Skill(descriptor: descriptor, providers: [name])
            }
        }
        return (after.subtracting(before).sorted(), before.subtracting(after).sorted())
    }

    /// Why `descriptor` may not join the registry for `agent`: another agent offers the same identifier
    /// with a parameter schema that accepts other parameters. Nil when it may.
    public func conflict(_ descriptor: SkillDescriptor, agent: String) -> SkillbusError? {
        guard let skill = skills[descriptor.identifier],
            !skill.descriptor.parameters.accepts(sameParametersAs: descriptor.parameters),
            let holder = skill.providers.first(where: { $0 != agent })
        else { return nil }
        return SkillbusError(
            .schemaConflict,
            "skill '\(descriptor.identifier)' of agent '\(agent)' has a different parameter schema from the one "
                + "agent '\(holder)' registered; use another identifier or the same schema",
            details: [
                "skill": .string(descriptor.identifier), "agent": .string(agent), "registeredBy": .string(holder),
                "registered": skill.descriptor.parameters.json, "offered": descriptor.parameters.json,
            ])
    }

    /// The registry's own descriptor for an identifier it already holds under the same schema, so that
    /// every provider of a skill shows one descriptor (the first registered keeps its metadata).
    public func canonical(_ descriptor: SkillDescriptor, agent: String) -> SkillDescriptor {
        guard let skill = skills[descriptor.identifier], skill.providers.contains(where: { $0 != agent }),
            skill.descriptor.parameters.accepts(sameParametersAs: descriptor.parameters)
        else { return descriptor }
        return skill.descriptor
    }

    /// Agents sorted by name: the order of snapshots, digests and listings.
    public var sortedAgents: [Agent] { agents.sorted { $0.key < $1.key }.map(\.value) }

    /// `{"agents": [entry…]}`, sorted by agent name.
    public var json: JSONValue { ["agents": .array(sortedAgents.map(\.json))] }

    /// 64-bit FNV-1a over the sorted entries, as 16 hex digits: two registries with the same digest hold
    /// the same contents, so processes can compare whole registries without sending them.
    public var digest: String {
        var hash: UInt64 = 0xcbf2_9ce4_8422_2325
        for agent in sortedAgents {
            for byte in agent.json.serialized() {
                hash = (hash ^ UInt64(byte)) &* 0x0000_0100_0000_01b3
            }
            hash = (hash ^ 0x0a) &* 0x0000_0100_0000_01b3
        }
        let hex = String(hash, radix: 16)
        return String(repeating: "0", count: 16 - hex.count) + hex
    }
}

/// One change to the registry, as published on the feed under `registry.update`.
public struct RegistryUpdate: Sendable, Equatable {
    /// Names the coordinator's lifetime: sequence numbers start again with every new epoch.
    public var epoch: String
    public var sequence: UInt64
    public var agent: String
    /// The agent's entry from now on; nil when it left.
    public var entry: Registry.Agent?
    /// For people reading the feed: what changed.
    public var provided: [String]
    public var withdrawn: [String]
    public var reason: String

    public init(
        epoch: String, sequence: UInt64, agent: String, entry: Registry.Agent?, provided: [String] = [],
        withdrawn: [String] = [], reason: String = ""
    ) {
        self.epoch = epoch
        self.sequence = sequence
        self.agent = agent
        self.entry = entry
        self.provided = provided
        self.withdrawn = withdrawn
        self.reason = reason
    }

    public var fields: [String: JSONValue] {
        [
            "epoch": .string(epoch), "seq": .number(Double(sequence)), "agent": .string(agent),
            "entry": entry?.json ?? .null, "provided": .array(provided.map { .string($0) }),
            "withdrawn": .array(withdrawn.map { .string($0) }), "reason": .string(reason),
        ]
    }

    public init(json: JSONValue) throws(SkillbusError) {
        guard let epoch = json["epoch"]?.stringValue, let sequence = json["seq"]?.intValue, sequence > 0,
            let agent = json["agent"]?.stringValue, let entryJSON = json["entry"]
        else {
            throw SkillbusError(
                .malformedMessage, "a registry update needs 'epoch', 'seq' > 0, 'agent' and 'entry'")
        }
        let entry = entryJSON == .null ? nil : try Registry.Agent(json: entryJSON)
        guard entry.map({ $0.name == agent }) ?? true else {
            throw SkillbusError(.malformedMessage, "registry update for '\(agent)' carries the entry of another agent")
        }
        self.init(
            epoch: epoch, sequence: UInt64(sequence), agent: agent, entry: entry,
            provided: json["provided"]?.arrayValue?.compactMap(\.stringValue) ?? [],
            withdrawn: json["withdrawn"]?.arrayValue?.compactMap(\.stringValue) ?? [],
            reason: json["reason"]?.stringValue ?? "")
    }
}

/// Where a copy of the registry stands: which coordinator lifetime, which update, and a digest of the contents.
public struct RegistryPosition: Sendable, Equatable {
    public var epoch: String
    public var sequence: UInt64
    public var digest: String

    public init(epoch: String, sequence: UInt64, digest: String) {
        self.epoch = epoch
        self.sequence = sequence
        self.digest = digest
    }

    public var json: JSONValue {
        ["epoch": .string(epoch), "seq": .number(Double(sequence)), "digest": .string(digest)]
    }

    public init?(json: JSONValue) {
        guard let epoch = json["epoch"]?.stringValue, let sequence = json["seq"]?.intValue, sequence >= 0,
            let digest = json["digest"]?.stringValue
        else { return nil }
        self.init(epoch: epoch, sequence: UInt64(sequence), digest: digest)
    }
}

/// The coordinator's side: the authoritative registry and the sequence of its updates.
public struct RegistryLedger: Sendable {
    public let epoch: String
    public private(set) var registry = Registry()
    public private(set) var sequence: UInt64 = 0
    /// Each agent's entry as SNAPSHOT sends it, serialized once per change rather than once per snapshot.
    public private(set) var serializedEntries: [String: [UInt8]] = [:]
    private var cachedDigest: (sequence: UInt64, digest: String)?

    public init(epoch: String) { self.epoch = epoch }

    /// Sets one agent's entry; returns the update to publish, or nil when nothing changed.
    public mutating func set(_ agent: String, to entry: Registry.Agent?, reason: String) -> RegistryUpdate? {
        guard registry.agents[agent] != entry else { return nil }
        let (provided, withdrawn) = registry.set(agent, to: entry)
        serializedEntries[agent] = entry?.json.serialized()
        sequence += 1
        return RegistryUpdate(
            epoch: epoch, sequence: sequence, agent: agent, entry: entry, provided: provided, withdrawn: withdrawn,
            reason: reason)
    }

    /// Computed once per sequence number: the heartbeat and `agents` ask for it often.
    public mutating func position() -> RegistryPosition {
        if let cached = cachedDigest, cached.sequence == sequence {
            return RegistryPosition(epoch: epoch, sequence: sequence, digest: cached.digest)
        }
        let digest = registry.digest
        cachedDigest = (sequence, digest)
        return RegistryPosition(epoch: epoch, sequence: sequence, digest: digest)
    }
}
