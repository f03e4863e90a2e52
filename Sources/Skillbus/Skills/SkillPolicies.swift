/// A worker's own say over how its skills are retried and how many of each run at once, over what the
/// skills declare themselves: a worker config's `policies`, or `skillbus worker --policy SKILL=JSON`.
///
///     {"sleep": {"concurrency": 1}, "echo": {"retry": null}, "text.stats": {"retry": {"attempts": 2}}}
///
/// Each key given replaces the skill's own declaration; `null` removes it (`"retry": null`: no retries).
public struct SkillPolicies: Sendable, Equatable {
    public struct Override: Sendable, Equatable {
        /// `.some(nil)`: no policy; nil: the skill's own.
        public var retry: RetryPolicy??
        public var idempotent: Bool?
        /// `.some(nil)`: no limit; nil: the skill's own.
        public var concurrency: Int??
        public var pure: Bool?
        /// `.some(nil)`: no caching; nil: the skill's own.
        public var cacheMs: Int??

        public init(
            retry: RetryPolicy?? = nil, idempotent: Bool? = nil, concurrency: Int?? = nil, pure: Bool? = nil,
            cacheMs: Int?? = nil
        ) {
            self.retry = retry
            self.idempotent = idempotent
            self.concurrency = concurrency
            self.pure = pure
            self.cacheMs = cacheMs
        }
    }

    public var overrides: [String: Override]

    public init(_ overrides: [String: Override] = [:]) { self.overrides = overrides }

    public var isEmpty: Bool { overrides.isEmpty }

    static let keys: Set<String> = ["retry", "idempotent", "concurrency", "pure", "cacheMs"]

    /// Reads `{"skill": {"retry": …, "idempotent": …, "concurrency": …}, …}`; errors name the skill and key.
    public init(json: JSONValue) throws(SkillbusError) {
        guard let object = json.objectValue else {
            throw SkillbusError(.invalidConfiguration, "policies must be an object of skill identifier → policy")
        }
        var overrides: [String: Override] = [:]
        for (skill, value) in object {
            overrides[skill] = try Self.override(skill, value)
        }
        self.init(overrides)
    }

    /// One skill's override, as `--policy` gives it.
    public static func override(_ skill: String, _ value: JSONValue) throws(SkillbusError) -> Override {
        func refuse(_ message: String) -> SkillbusError {
            SkillbusError(.invalidConfiguration, "policy of '\(skill)': \(message)")
        }
        guard let fields = value.objectValue else { throw refuse("expected an object with retry, idempotent, concurrency") }
        if let unknown = fields.keys.sorted().first(where: { !keys.contains($0) }) {
            throw refuse("unknown key '\(unknown)' (expected retry, idempotent, concurrency, pure, cacheMs)")
        }
        var override = Override()
        do throws(SkillbusError) {
            if let retry = fields["retry"] {
                override.retry = .some(retry == .null ? nil : try RetryPolicy(json: retry, skill: skill))
            }
            if let flag = fields["idempotent"] {
                guard let value = flag.boolValue else { throw refuse("'idempotent' must be true or false") }
                override.idempotent = value
            }
            if let limit = fields["concurrency"] {
                if limit == .null {
                    override.concurrency = .some(nil)
                } else {
                    guard let value = limit.intValue, (1...100_000).contains(value) else {
                        throw refuse("'concurrency' must be an integer from 1 to 100000, or null")
                    }
                    override.concurrency = value
                }
            }
            if let flag = fields["pure"] {
                guard let value = flag.boolValue else { throw refuse("'pure' must be true or false") }
                override.pure = value
            }
            if let lifetime = fields["cacheMs"] {
                if lifetime == .null {
                    override.cacheMs = .some(nil)
                } else {
                    guard let value = lifetime.intValue, (1...SkillDescriptor.maxCacheMs).contains(value) else {
                        throw refuse("'cacheMs' must be an integer from 1 to \(SkillDescriptor.maxCacheMs), or null")
                    }
                    override.cacheMs = value
                }
            }
        } catch where error.code == .invalidRegistration {
            throw refuse(error.message)
        }
        return override
    }

    /// The skills with the overrides applied; a combination the registry would refuse (a retry of
    /// `agent_lost` for a skill made not idempotent, say) is refused here, naming the skill.
    public func apply(to skills: [any AgentSkill]) throws(SkillbusError) -> [any AgentSkill] {
        var result: [any AgentSkill] = []
        for skill in skills {
            guard let override = overrides[skill.identifier] else {
                result.append(skill)
                continue
            }
            let overridden = PolicyOverriddenSkill(
                base: skill, retryPolicy: override.retry ?? skill.retryPolicy,
                isIdempotent: override.idempotent ?? skill.isIdempotent,
                concurrencyLimit: override.concurrency ?? skill.concurrencyLimit, isPure: override.pure ?? skill.isPure,
                cacheMs: override.cacheMs ?? skill.cacheMs)
            do throws(SkillbusError) {
                _ = try SkillDescriptor(json: overridden.descriptor.json)
            } catch {
                throw SkillbusError(.invalidConfiguration, "policy of '\(skill.identifier)': \(error.message)")
            }
            result.append(overridden)
        }
        return result
    }

    /// The file form.
    public var json: JSONValue {
        .object(
            overrides.mapValues { override in
                var object: [String: JSONValue] = [:]
                if let retry = override.retry { object["retry"] = retry?.json ?? .null }
                if let idempotent = override.idempotent { object["idempotent"] = .bool(idempotent) }
                if let concurrency = override.concurrency {
                    object["concurrency"] = concurrency.map { .number(Double($0)) } ?? .null
                }
                if let pure = override.pure { object["pure"] = .bool(pure) }
                if let cacheMs = override.cacheMs { object["cacheMs"] = cacheMs.map { .number(Double($0)) } ?? .null }
                return .object(object)
            })
    }
}

/// A skill as it is, but for the retry, idempotency, concurrency and caching a worker's policies gave it.
struct PolicyOverriddenSkill: AgentSkill {
    let base: any AgentSkill
    let retryPolicy: RetryPolicy?
    let isIdempotent: Bool
    let concurrencyLimit: Int?
    let isPure: Bool
    let cacheMs: Int?

    var identifier: String { base.identifier }
    var displayName: String { base.displayName }
    var description: String { base.description }
    var parameterSchema: ParameterSchema { base.parameterSchema }
    var defaultTimeoutMs: Int? { base.defaultTimeoutMs }
    var executionStyle: SkillExecutionStyle { base.executionStyle }
    var needsConfirmation: Bool { base.needsConfirmation }
    var metadata: [String: JSONValue] { base.metadata }

    func execute(parameters: [String: JSONValue], context: SkillExecutionContext) async throws -> SkillResult {
        try await base.execute(parameters: parameters, context: context)
    }
}
