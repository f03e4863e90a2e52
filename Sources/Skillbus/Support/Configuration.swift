import Foundation
import SkillbusZMQ

/// Settings of a coordinator (`configs/coordinator.json`). Absent keys keep their defaults.
public struct CoordinatorConfiguration: Sendable, Equatable {
    public var bus = "tcp://127.0.0.1:5555"
    public var feed = "tcp://127.0.0.1:5556"
    public var heartbeatMs = 1000
    public var missedHeartbeats = 3
    public var defaultTimeoutMs = 15_000
    public var queueLimit = 1024
    /// Messages larger than this are refused with message_too_large (1 MiB by default).
    public var maxMessageBytes = 1 << 20
    /// Single-flight within a round (see `CoordinatorState.Settings`).
    public var deduplication = true
    public var roundRetentionMs = 600_000
    public var retainedOutcomesLimit = 100_000
    public var retainedRoundsLimit = 10_000
    public var planStepLimit = 1000
    /// Keys and roles (CURVE with a ZAP handler); nil: no keys, and loopback endpoints only.
    public var security: CoordinatorSecurity?
    /// Without keys, bind other than loopback anyway (`--insecure`; logged loudly).
    public var insecure = false
    /// Partial output the bus forwards per invocation, and keeps per round document (bytes of parts).
    public var maxOutputBytes = 4 << 20
    public var maxRoundOutputBytes = 256 << 10
    /// How long an agent may take to answer CANCEL before the feed says it ignores it.
    public var cancelGraceMs = 2000
    /// Priorities and the wait queue (PROTOCOL §4.14).
    public var priorityPromotionMs = 5000
    public var clientQueueShare = 0.25
    /// Rate limits per skill and per client connection (PROTOCOL §4.15).
    public var rateLimits = RateLimits()
    /// The result cache's budget (PROTOCOL §4.16); 0 turns it off.
    public var cacheBytesLimit = 64 << 20
    /// The operator HTTP endpoint (`/metrics`, the dashboard); nil: none. Loopback unless `insecure`.
    public var http: HTTPAddress?
    /// Where the coordinator keeps its round journal (`journal.sqlite`); nil: rounds live in memory only.
    public var dataDir: String?
    /// Most bytes the journal keeps on disk for ended rounds; beyond it the oldest go first.
    public var journalBytesLimit = 256 << 20
    /// How long after its start a request for a skill nobody offers yet waits for an agent (PROTOCOL §4.17).
    public var startupGraceMs = 5000

    public init() {}

    var stateSettings: CoordinatorState.Settings {
        var settings = CoordinatorState.Settings()
        settings.heartbeatMs = heartbeatMs
        settings.missedHeartbeats = missedHeartbeats
        settings.defaultTimeoutMs = defaultTimeoutMs
        settings.queueLimit = queueLimit
        settings.deduplication = deduplication
        settings.roundRetentionMs = roundRetentionMs
        settings.retainedOutcomesLimit = retainedOutcomesLimit
        settings.retainedRoundsLimit = retainedRoundsLimit
        settings.planStepLimit = planStepLimit
        settings.maxOutputBytes = maxOutputBytes
        settings.maxRoundOutputBytes = maxRoundOutputBytes
        settings.cancelGraceMs = cancelGraceMs
        settings.priorityPromotionMs = priorityPromotionMs
        settings.clientQueueShare = clientQueueShare
        settings.rateLimits = rateLimits
        settings.cacheBytesLimit = cacheBytesLimit
        settings.journaled = dataDir != nil
        settings.startupGraceMs = startupGraceMs
        return settings
    }

    static let keys: Set<String> = [
        "bus", "feed", "heartbeatMs", "missedHeartbeats", "defaultTimeoutMs", "queueLimit", "maxMessageBytes",
        "deduplication", "roundRetentionMs", "retainedOutcomesLimit", "retainedRoundsLimit", "planStepLimit",
        "security", "insecure",
        "maxOutputBytes", "maxRoundOutputBytes", "cancelGraceMs", "priorityPromotionMs", "clientQueueShare",
        "rateLimits", "cacheBytesLimit", "http", "dataDir", "journalBytesLimit", "startupGraceMs",
    ]

    init(reading object: ConfigObject) throws(SkillbusError) {
        bus = try object.endpoint("bus") ?? bus
        feed = try object.endpoint("feed") ?? feed
        heartbeatMs =
            try object.int("heartbeatMs", minimum: 10, maximum: CoordinatorState.maxHeartbeatMs) ?? heartbeatMs
        missedHeartbeats = try object.int("missedHeartbeats", minimum: 1, maximum: 100) ?? missedHeartbeats
        defaultTimeoutMs =
            try object.int("defaultTimeoutMs", minimum: 1, maximum: Wire.maxTimeoutMs) ?? defaultTimeoutMs
        queueLimit = try object.int("queueLimit", minimum: 0) ?? queueLimit
        maxMessageBytes = try object.int("maxMessageBytes", minimum: 256, maximum: 1 << 30) ?? maxMessageBytes
        deduplication = try object.bool("deduplication") ?? deduplication
        roundRetentionMs = try object.int("roundRetentionMs", minimum: 0, maximum: 7 * 86_400_000) ?? roundRetentionMs
        retainedOutcomesLimit =
            try object.int("retainedOutcomesLimit", minimum: 0, maximum: 100_000_000) ?? retainedOutcomesLimit
        retainedRoundsLimit =
            try object.int("retainedRoundsLimit", minimum: 0, maximum: 10_000_000) ?? retainedRoundsLimit
        planStepLimit = try object.int("planStepLimit", minimum: 1, maximum: 1_000_000) ?? planStepLimit
        if let section = try object.object("security", allowed: CoordinatorSecurity.fields) {
            security = try CoordinatorSecurity(reading: section)
        }
        insecure = try object.bool("insecure") ?? insecure
        maxOutputBytes = try object.int("maxOutputBytes", minimum: 0, maximum: 1 << 34) ?? maxOutputBytes
        maxRoundOutputBytes = try object.int("maxRoundOutputBytes", minimum: 0, maximum: 1 << 30) ?? maxRoundOutputBytes
        cancelGraceMs = try object.int("cancelGraceMs", minimum: 1, maximum: 3_600_000) ?? cancelGraceMs
        priorityPromotionMs =
            try object.int("priorityPromotionMs", minimum: 0, maximum: 86_400_000) ?? priorityPromotionMs
        clientQueueShare = try object.fraction("clientQueueShare") ?? clientQueueShare
        cacheBytesLimit = try object.int("cacheBytesLimit", minimum: 0, maximum: 1 << 40) ?? cacheBytesLimit
        if let text = try object.string("http") {
            do throws(SkillbusError) {
                http = try HTTPAddress(parsing: text)
            } catch {
                throw object.error("http", error.message)
            }
        }
        dataDir = try object.string("dataDir") ?? dataDir
        journalBytesLimit =
            try object.int("journalBytesLimit", minimum: 1 << 16, maximum: 1 << 40) ?? journalBytesLimit
        startupGraceMs = try object.int("startupGraceMs", minimum: 0, maximum: 600_000) ?? startupGraceMs
        if let limits = try object.object("rateLimits", allowed: ["skills", "clients"]) {
            if let skills = limits.values["skills"] {
                guard let entries = skills.objectValue else {
                    throw limits.error("skills", "expected an object of skill identifiers, got \(skills.typeName)")
                }
                let table = ConfigObject(file: limits.file, path: limits.keyPath("skills"), values: entries)
                for skill in entries.keys.sorted() {
                    rateLimits.skills[skill] = try table.rateLimit(skill)
                }
            }
            rateLimits.perClient = try limits.rateLimit("clients")
        }
    }

    /// Reads a `{"version": 1, …}` coordinator file.
    public static func load(path: String) throws(SkillbusError) -> CoordinatorConfiguration {
        let object = try ConfigObject.load(path: path, allowed: keys.union(["version"]))
        return try CoordinatorConfiguration(reading: object)
    }
}

/// Settings of one worker (`configs/worker.json`, or one entry of `workers` in `configs/local.json`).
public struct WorkerConfiguration: Sendable, Equatable {
    public var name = ""
    public var coordinator = "tcp://127.0.0.1:5555"
    /// The coordinator's feed, for the registry replica; nil takes the one the coordinator names.
    public var feed: String?
    /// Built-in skill identifiers; empty means all of them.
    public var skills: [String] = []
    public var capacity = 4
    /// The directory `file.read` may read from; nil means the current directory.
    public var sandbox: String?
    public var heartbeatMs = 1000
    public var maxMessageBytes = 1 << 20
    /// Where the agent keeps its context (sessions, history, memory); nil means
    /// `DataDirectory.agent(name)`.
    public var dataDir: String?
    /// How often the agent's store commits its writes, at most (milliseconds).
    public var flushIntervalMs = 300
    /// The largest memory value (serialized JSON bytes).
    public var maxMemoryValueBytes = 1 << 20
    /// The agent's planner, as configured (`{"rules": […]}` or `{"openai": {…}}`, see `ConfiguredPlanner`);
    /// nil: it takes no turns.
    public var planner: JSONValue?
    /// The coordinator's public key (the key or its file) and this worker's secret key file, for CURVE.
    public var serverKey: String?
    public var key: String?
    /// Partial output one invocation may emit (bytes); past it the invocation fails with `output_too_large`.
    public var maxOutputBytes = 1 << 20
    /// Skills run by a program (`commands`), besides the built-ins.
    public var commands: [CommandSkillSpec] = []
    /// Overrides of the skills' own retry policy, idempotency and concurrency, by skill identifier.
    public var policies = SkillPolicies()

    public init() {}

    static let keys: Set<String> = [
        "name", "coordinator", "feed", "skills", "capacity", "sandbox", "heartbeatMs", "maxMessageBytes", "dataDir",
        "flushIntervalMs", "maxMemoryValueBytes", "planner", "serverKey", "key", "maxOutputBytes", "commands",
        "policies",
    ]

    init(reading object: ConfigObject) throws(SkillbusError) {
        name = try object.string("name") ?? name
        coordinator = try object.endpoint("coordinator") ?? coordinator
        feed = try object.endpoint("feed") ?? feed
        skills = try object.stringArray("skills") ?? skills
        capacity = try object.int("capacity", minimum: 1, maximum: 100_000) ?? capacity
        sandbox = try object.string("sandbox") ?? sandbox
        heartbeatMs =
            try object.int("heartbeatMs", minimum: 10, maximum: CoordinatorState.maxHeartbeatMs) ?? heartbeatMs
        maxMessageBytes = try object.int("maxMessageBytes", minimum: 256, maximum: 1 << 30) ?? maxMessageBytes
        dataDir = try object.string("dataDir") ?? dataDir
        flushIntervalMs = try object.int("flushIntervalMs", minimum: 1, maximum: 60_000) ?? flushIntervalMs
        maxMemoryValueBytes =
            try object.int("maxMemoryValueBytes", minimum: 16, maximum: 1 << 30) ?? maxMemoryValueBytes
        // Key files relative to the config file, as the coordinator's are; a server key may be the key itself.
        serverKey = try object.string("serverKey").map { Curve.decode($0) != nil ? $0 : object.resolvedPath($0) }
        key = try object.string("key").map(object.resolvedPath)
        maxOutputBytes = try object.int("maxOutputBytes", minimum: 0, maximum: 1 << 34) ?? maxOutputBytes
        if let planner = object.values["planner"] {
            do throws(SkillbusError) {
                try ConfiguredPlanner.check(planner)
            } catch {
                throw object.error("planner", error.message)
            }
            self.planner = planner
        }
        if let value = object.values["policies"] {
            do throws(SkillbusError) {
                policies = try SkillPolicies(json: value)
            } catch {
                throw object.error("policies", error.message)
            }
        }
        let known = Set(BuiltinSkills.identifiers)
        for (index, skill) in skills.enumerated() where !known.contains(skill) {
            throw object.error(
                "skills[\(index)]",
                "unknown built-in skill '\(skill)' (known: \(BuiltinSkills.identifiers.joined(separator: ", ")))")
        }
        for child in try object.objects("commands", allowed: CommandSkillSpec.keys) ?? [] {
            commands.append(try CommandSkillSpec(reading: child))
        }
        try CommandSkillSpec.checkUnique(
            commands, builtins: skills.isEmpty ? BuiltinSkills.identifiers : skills, in: object)
    }

    public static func load(path: String) throws(SkillbusError) -> WorkerConfiguration {
        let object = try ConfigObject.load(path: path, allowed: keys.union(["version"]))
        return try WorkerConfiguration(reading: object)
    }
}

/// What `skillbus up` starts: one coordinator and its workers (`configs/local.json`).
public struct ClusterConfiguration: Sendable, Equatable {
    public var coordinator = CoordinatorConfiguration()
    public var workers: [WorkerConfiguration] = []
    /// The folder under which every worker without a `dataDir` of its own gets `<folder>/<name>`;
    /// nil means `DataDirectory.agents`.
    public var dataDir: String?

    public init() {}

    /// The folder `up` puts its workers' data directories in.
    public var dataRoot: String { dataDir ?? DataDirectory.agents }

    public static func load(path: String) throws(SkillbusError) -> ClusterConfiguration {
        let root = try ConfigObject.load(path: path, allowed: ["version", "coordinator", "workers", "dataDir"])
        var cluster = ClusterConfiguration()
        cluster.dataDir = try root.string("dataDir")
        if let object = try root.object("coordinator", allowed: CoordinatorConfiguration.keys) {
            cluster.coordinator = try CoordinatorConfiguration(reading: object)
        }
        var names = Set<String>()
        for object in try root.objects("workers", allowed: WorkerConfiguration.keys) ?? [] {
            var worker = try WorkerConfiguration(reading: object)
            guard !worker.name.isEmpty else { throw object.error("name", "every worker needs a name") }
            guard names.insert(worker.name).inserted else {
                throw object.error("name", "worker name '\(worker.name)' is used twice")
            }
            // Workers started by `up` talk to the coordinator `up` starts.
            if try object.string("coordinator") == nil { worker.coordinator = cluster.coordinator.bus }
            cluster.workers.append(worker)
        }
        return cluster
    }
}

/// A JSON object being read as configuration: every error names the file and the key's path.
struct ConfigObject {
    let file: String
    let path: String
    let values: [String: JSONValue]

    static func load(path file: String, allowed: Set<String>) throws(SkillbusError) -> ConfigObject {
        guard let data = FileManager.default.contents(atPath: file) else {
            throw SkillbusError(.invalidConfiguration, "\(file): cannot read the file")
        }
        let value: JSONValue
        do {
            value = try JSONValue(parsing: Array(data))
        } catch {
            throw SkillbusError(.invalidConfiguration, "\(file): \(error)")
        }
        guard let values = value.objectValue else {
            throw SkillbusError(.invalidConfiguration, "\(file): the top level must be a JSON object")
        }
        let root = ConfigObject(file: file, path: "", values: values)
        guard let version = values["version"] else {
            throw root.error("version", "missing; this build reads version 1")
        }
        guard version.intValue == 1 else {
            throw root.error("version", "unsupported version \(version.jsonString); this build reads version 1")
        }
        try root.checkKeys(allowed)
        return root
    }

    func keyPath(_ key: String) -> String { path.isEmpty ? key : "\(path).\(key)" }

    func error(_ key: String, _ message: String) -> SkillbusError {
        SkillbusError(.invalidConfiguration, "\(file): \(keyPath(key)): \(message)")
    }

    func checkKeys(_ allowed: Set<String>) throws(SkillbusError) {
        for key in values.keys.sorted() where !allowed.contains(key) {
            throw error(key, "unknown key (allowed: \(allowed.sorted().joined(separator: ", ")))")
        }
    }

    func string(_ key: String) throws(SkillbusError) -> String? {
        guard let value = values[key] else { return nil }
        guard let text = value.stringValue else { throw error(key, "expected a string, got \(value.typeName)") }
        return text
    }

    func int(_ key: String, minimum: Int, maximum: Int = 1 << 40) throws(SkillbusError) -> Int? {
        guard let value = values[key] else { return nil }
        guard let number = value.intValue else { throw error(key, "expected an integer, got \(value.typeName)") }
        guard (minimum...maximum).contains(number) else {
            throw error(key, "must be from \(minimum) to \(maximum), got \(number)")
        }
        return number
    }

    /// `{"perSecond": R, "burst": B}`: R above 0 (at most a million), B from 1 (default: 1).
    func rateLimit(_ key: String) throws(SkillbusError) -> RateLimit? {
        guard let limit = try object(key, allowed: ["perSecond", "burst"]) else { return nil }
        guard case .number(let rate)? = limit.values["perSecond"], rate > 0, rate <= 1_000_000 else {
            throw limit.error("perSecond", "required: a number above 0 and at most 1000000")
        }
        let burst = try limit.int("burst", minimum: 1, maximum: 1_000_000) ?? 1
        return RateLimit(perSecond: rate, burst: burst)
    }

    /// A number above 0 and at most 1.
    func fraction(_ key: String) throws(SkillbusError) -> Double? {
        guard let value = values[key] else { return nil }
        guard case .number(let number) = value else { throw error(key, "expected a number, got \(value.typeName)") }
        guard number > 0, number <= 1 else { throw error(key, "must be above 0 and at most 1, got \(number)") }
        return number
    }

    func bool(_ key: String) throws(SkillbusError) -> Bool? {
        guard let value = values[key] else { return nil }
        guard let flag = value.boolValue else { throw error(key, "expected true or false, got \(value.typeName)") }
        return flag
    }

    func endpoint(_ key: String) throws(SkillbusError) -> String? {
        guard let text = try string(key) else { return nil }
        if let problem = Endpoint.problem(text) { throw error(key, problem) }
        return text
    }

    func stringArray(_ key: String) throws(SkillbusError) -> [String]? {
        guard let value = values[key] else { return nil }
        guard let array = value.arrayValue else {
            throw error(key, "expected an array of strings, got \(value.typeName)")
        }
        var strings: [String] = []
        for (index, item) in array.enumerated() {
            guard let text = item.stringValue else {
                throw error("\(key)[\(index)]", "expected a string, got \(item.typeName)")
            }
            strings.append(text)
        }
        return strings
    }

    func object(_ key: String, allowed: Set<String>) throws(SkillbusError) -> ConfigObject? {
        guard let value = values[key] else { return nil }
        guard let object = value.objectValue else { throw error(key, "expected an object, got \(value.typeName)") }
        let child = ConfigObject(file: file, path: keyPath(key), values: object)
        try child.checkKeys(allowed)
        return child
    }

    func objects(_ key: String, allowed: Set<String>) throws(SkillbusError) -> [ConfigObject]? {
        guard let value = values[key] else { return nil }
        guard let array = value.arrayValue else { throw error(key, "expected an array, got \(value.typeName)") }
        var children: [ConfigObject] = []
        for (index, item) in array.enumerated() {
            guard let object = item.objectValue else {
                throw error("\(key)[\(index)]", "expected an object, got \(item.typeName)")
            }
            let child = ConfigObject(file: file, path: keyPath("\(key)[\(index)]"), values: object)
            try child.checkKeys(allowed)
            children.append(child)
        }
        return children
    }
}
