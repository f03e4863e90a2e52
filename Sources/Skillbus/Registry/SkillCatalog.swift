/// Every skill on offer with its descriptor and providers (SKILLS reply frame 3, PROTOCOL §5.9). The bus
/// answers it with each provider's load; a registry replica tells the same catalog without the load,
/// which only the bus knows (`skillbus skills --json`, §5.15).
public struct SkillCatalog: Sendable, Equatable {
    public struct Provider: Sendable, Equatable {
        public var agent: String
        public var capacity: Int
        /// Invocations it runs now; nil when the teller does not know (a replica).
        public var inFlight: Int?

        public init(agent: String, capacity: Int, inFlight: Int? = nil) {
            self.agent = agent
            self.capacity = capacity
            self.inFlight = inFlight
        }
    }

    public struct Entry: Sendable, Equatable {
        public var descriptor: SkillDescriptor
        /// Sorted by agent name.
        public var providers: [Provider]
    }

    /// Sorted by identifier.
    public var skills: [Entry]

    /// The catalog of `registry`; `provider` says how a provider, by name, is shown (nil leaves it out).
    public init(registry: Registry, provider: (String) -> Provider?) {
        skills = registry.skills.sorted { $0.key < $1.key }.map { _, skill in
            Entry(descriptor: skill.descriptor, providers: skill.providers.compactMap(provider))
        }
    }

    /// A replica's view: capacities from the registry's entries, no load.
    public init(registry: Registry) {
        self.init(registry: registry) { name in
            registry.agents[name].map { Provider(agent: name, capacity: $0.capacity) }
        }
    }

    /// `[entry…]`: each entry is the normalised descriptor (§5.2) with `providers` added.
    public var entriesJSON: JSONValue {
        .array(
            skills.map { entry in
                var object = entry.descriptor.json.objectValue ?? [:]
                object["providers"] = .array(entry.providers.map(\.json))
                return .object(object)
            })
    }

    /// The SKILLS answer: `{"skills": [entry…]}`.
    public var json: JSONValue { ["skills": entriesJSON] }

    public init(json: JSONValue) throws(SkillbusError) {
        let reader = DocumentReader(json, "catalog")
        var skills: [Entry] = []
        for item in try reader.array("skills") {
            let descriptor = try SkillDescriptor(json: item)
            var providers: [Provider] = []
            for provider in try DocumentReader(item, "catalog entry '\(descriptor.identifier)'").array("providers") {
                providers.append(try Provider(json: provider))
            }
            skills.append(Entry(descriptor: descriptor, providers: providers))
        }
        self.skills = skills
    }
}

extension SkillCatalog.Provider {
    public var json: JSONValue {
        var object: [String: JSONValue] = ["agent": .string(agent), "capacity": .number(Double(capacity))]
        if let inFlight { object["inFlight"] = .number(Double(inFlight)) }
        return .object(object)
    }

    public init(json: JSONValue) throws(SkillbusError) {
        let reader = DocumentReader(json, "catalog provider")
        self.init(
            agent: try reader.string("agent"), capacity: try reader.int("capacity"),
            inFlight: reader.optional("inFlight").flatMap(\.intValue))
    }
}
