import Foundation
import SkillbusZMQ

/// Settings of a coordinator (`configs/coordinator.json`). Absent keys keep their defaults. Its own keys are
/// declared in `settings` with the state machine's tunables (`CoordinatorState.Settings.declared`), which it
/// holds in `state` and offers as its own members (`configuration.heartbeatMs`).
@dynamicMemberLookup
public struct CoordinatorConfiguration: SettingsFile, Sendable, Equatable {
    public var bus = "tcp://127.0.0.1:5555"
    public var feed = "tcp://127.0.0.1:5556"
    /// Messages larger than this are refused with message_too_large (1 MiB by default).
    public var maxMessageBytes = 1 << 20
    /// Keys and roles (CURVE with a ZAP handler); nil: no keys, and loopback endpoints only.
    public var security: CoordinatorSecurity?
    /// Without keys, bind other than loopback anyway (`--insecure`; logged loudly).
    public var insecure = false
    /// The operator HTTP endpoint (`/metrics`, the dashboard); nil: none. Loopback unless `insecure`.
    public var http: HTTPAddress?
    /// Where the coordinator keeps its round journal (`journal.sqlite`); nil: rounds live in memory only.
    public var dataDir: String?
    /// Most bytes the journal keeps on disk for ended rounds; beyond it the oldest go first.
    public var journalBytesLimit = 256 << 20
    /// A coordinator group: the journal in PostgreSQL (instead of `dataDir`'s SQLite file) and one leader.
    public var ha: CoordinatorGroupSettings?
    /// A journaled round's answer waits for the commit of its document (PROTOCOL §3.5.9): every `ok` a client
    /// got is in the journal.
    public var answerAfterCommit = false
    /// The state machine's tunables.
    public var state = CoordinatorState.Settings()

    public init() {}

    public subscript<Value>(dynamicMember path: WritableKeyPath<CoordinatorState.Settings, Value>) -> Value {
        get { state[keyPath: path] }
        set { state[keyPath: path] = newValue }
    }

    var stateSettings: CoordinatorState.Settings {
        var settings = state
        settings.journaled = dataDir != nil || ha != nil
        return settings
    }

    public static let settings: [Setting<CoordinatorConfiguration>] =
        [
            .endpoint("bus", \.bus, "The bus endpoint to bind."),
            .endpoint("feed", \.feed, "The feed endpoint to bind."),
            .integer("maxMessageBytes", \.maxMessageBytes, 256...(1 << 30), "Largest accepted message (bytes)."),
            Setting(
                "security", help: "Keys and roles: secretKey, keys, feedRoles (PROTOCOL §12).",
                read: { object, configuration throws(SkillbusError) in
                    if let section = try object.object("security", allowed: CoordinatorSecurity.fields) {
                        configuration.security = try CoordinatorSecurity(reading: section)
                    }
                }, write: { $0.security?.json }),
            .flag("insecure", \.insecure, "Without keys, bind other than loopback anyway."),
            Setting(
                "http", help: "The operator HTTP endpoint, HOST:PORT (metrics, state, the dashboard).",
                read: { object, configuration throws(SkillbusError) in
                    guard let text = try object.string("http") else { return }
                    do throws(SkillbusError) {
                        configuration.http = try HTTPAddress(parsing: text)
                    } catch {
                        throw object.error("http", error.message)
                    }
                }, write: { $0.http.map { .string($0.description) } }),
            .text("dataDir", \.dataDir, "Where the round journal is kept; none: rounds live in memory only."),
            .integer(
                "journalBytesLimit", \.journalBytesLimit, (1 << 16)...(1 << 40),
                "Most bytes the journal keeps for ended rounds."),
            Setting(
                "ha", help: "A coordinator group: database (postgresql://…), group, passwordEnv or passwordFile.",
                read: { object, configuration throws(SkillbusError) in
                    if let section = try object.object("ha", allowed: CoordinatorGroupSettings.fields) {
                        configuration.ha = try CoordinatorGroupSettings(reading: section)
                    }
                }, write: { $0.ha?.json }),
            .flag(
                "answerAfterCommit", \.answerAfterCommit,
                "A journaled round's answer waits for the commit of its document (every ok is journaled)."),
        ] + CoordinatorState.Settings.declared.map { $0.lifted(\.state) }

    /// Reads a `{"version": 1, …}` coordinator file.
    public static func load(path: String) throws(SkillbusError) -> CoordinatorConfiguration {
        try CoordinatorConfiguration(reading: try ConfigObject.load(path: path))
    }
}

/// Settings of one worker (`configs/worker.json`, or one entry of `workers` in `configs/local.json`).
public struct WorkerConfiguration: SettingsFile, Sendable, Equatable {
    public var name = ""
    public var coordinator = "tcp://127.0.0.1:5555"
    /// The coordinator's feed, for the registry replica; nil takes the one the coordinator names.
    public var feed: String?
    /// Built-in skill identifiers; nil means all of them, an empty list none.
    public var skills: [String]?
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
    /// The role the agent plays in a team (a short word) and what it is good at; both go to other agents.
    public var role: String?
    public var description: String?
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
    /// MCP servers whose tools it offers as skills `<server>.<tool>` (docs/MCP.md).
    public var mcpServers: [MCPServerSpec] = []

    public init() {}

    /// The built-ins it offers.
    public var builtins: [String] { skills ?? BuiltinSkills.identifiers }

    public static let settings: [Setting<WorkerConfiguration>] = [
        .text("name", \.name, "The agent's name, unique on the bus."),
        .endpoints(
            "coordinator", \.coordinator,
            "The coordinator's bus endpoint; a group's: several, as \"a,b\" or [\"a\", \"b\"] "
                + "(it follows the leader)."),
        .endpoints(
            "feed", \.feed,
            "The coordinator's feed endpoint (a group's: several); none: the one the coordinator names."),
        Setting(
            "skills", help: "The built-in skills it offers; absent: all of them, [] none.",
            read: { object, worker throws(SkillbusError) in
                guard let skills = try object.stringArray("skills") else { return }
                let known = Set(BuiltinSkills.identifiers)
                let problems = skills.enumerated().filter { !known.contains($0.element) }.map { index, skill in
                    object.error(
                        "skills[\(index)]",
                        "unknown built-in skill '\(skill)' (known: \(BuiltinSkills.identifiers.joined(separator: ", ")))"
                    ).message
                }
                try ConfigObject.throwing(problems)
                worker.skills = skills
            }, write: { $0.skills.map { .array($0.map { .string($0) }) } }),
        .integer("capacity", \.capacity, 1...100_000, "Invocations run at once."),
        .text("sandbox", \.sandbox, "The directory file.read and file.write work in; none: the current one."),
        .integer("heartbeatMs", \.heartbeatMs, 10...CoordinatorState.maxHeartbeatMs, "Heartbeat interval (ms)."),
        .integer("maxMessageBytes", \.maxMessageBytes, 256...(1 << 30), "Largest accepted message (bytes)."),
        .text("dataDir", \.dataDir, "Where the agent keeps its context; none: the default data directory."),
        .integer("flushIntervalMs", \.flushIntervalMs, 1...60_000, "How often the context store commits, at most (ms)."),
        .integer("maxMemoryValueBytes", \.maxMemoryValueBytes, 16...(1 << 30), "The largest memory value (bytes)."),
        .value(
            "role", \.role, "The role it plays in a team, a short word other agents and clients can name.",
            reading: { object, key throws(SkillbusError) in
                guard let role = try object.string(key) else { return nil }
                guard AgentProfile.isValidRole(role) else {
                    throw object.error(key, "'\(role)' is no role: use 1-\(AgentProfile.maxRoleBytes) of a-z A-Z 0-9 _ -")
                }
                return role
            }, writing: { $0.map { .string($0) } }),
        .text("description", \.description, "What the agent is good at, for other agents' planners."),
        Setting(
            "planner", help: "How the agent takes turns: {\"rules\": […]} or {\"openai\": {…}}.",
            read: { object, worker throws(SkillbusError) in
                guard let planner = object.values["planner"] else { return }
                do throws(SkillbusError) {
                    try ConfiguredPlanner.check(planner)
                } catch {
                    throw object.error("planner", error.message)
                }
                worker.planner = planner
            }, write: { $0.planner }),
        // Key files relative to the config file, as the coordinator's are; a server key may be the key itself.
        .value(
            "serverKey", \.serverKey, "The coordinator's public key, or its file.",
            reading: { object, key throws(SkillbusError) in
                try object.string(key).map { KeyFiles.publicKeyOrPath($0, besideConfig: object) }
            }, writing: { $0.map { .string($0) } }),
        .value(
            "key", \.key, "This worker's secret key file (NAME.key).",
            reading: { object, key throws(SkillbusError) in try object.string(key).map(object.resolvedPath) },
            writing: { $0.map { .string($0) } }),
        .integer("maxOutputBytes", \.maxOutputBytes, 0...(1 << 34), "Partial output one invocation may emit (bytes)."),
        Setting(
            "commands", help: "Programs run as skills (README: skills in any language).",
            read: { object, worker throws(SkillbusError) in
                var problems: [String] = []
                for child in try object.objects("commands", allowed: CommandSkillSpec.keys) ?? [] {
                    do throws(SkillbusError) {
                        worker.commands.append(try CommandSkillSpec(reading: child))
                    } catch {
                        problems += ConfigObject.problems(in: error)
                    }
                }
                try ConfigObject.throwing(problems)
                try CommandSkillSpec.checkUnique(worker.commands, builtins: worker.builtins, in: object)
            }, write: { $0.commands.isEmpty ? JSONValue?.none : .array($0.commands.map(\.json)) }),
        Setting(
            "policies", help: "Overrides of the skills' retry policy, idempotency, concurrency and cache.",
            read: { object, worker throws(SkillbusError) in
                guard let value = object.values["policies"] else { return }
                do throws(SkillbusError) {
                    worker.policies = try SkillPolicies(json: value)
                } catch {
                    throw object.error("policies", error.message)
                }
            }, write: { $0.policies.isEmpty ? JSONValue?.none : $0.policies.json }),
        Setting(
            "mcpServers", help: "MCP servers whose tools it offers as skills <server>.<tool> (docs/MCP.md).",
            read: { object, worker throws(SkillbusError) in
                if let servers = try MCPServerSpec.list(in: object) { worker.mcpServers = servers }
            }, write: { $0.mcpServers.isEmpty ? JSONValue?.none : .array($0.mcpServers.map(\.json)) }),
    ]

    public static func load(path: String) throws(SkillbusError) -> WorkerConfiguration {
        try WorkerConfiguration(reading: try ConfigObject.load(path: path))
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

    /// Where `up`'s coordinator journals its rounds when its own config names no `dataDir`: in the cluster's
    /// `dataDir` when it names one, else beside the default agents' folder.
    public var journalDirectory: String { dataDir.map { $0 + "/coordinator-journal" } ?? DataDirectory.coordinator }

    public static func load(path: String) throws(SkillbusError) -> ClusterConfiguration {
        let root = try ConfigObject.load(path: path)
        try root.checkKeys(["coordinator", "workers", "dataDir"])
        var cluster = ClusterConfiguration()
        cluster.dataDir = try root.string("dataDir")
        if let object = try root.object("coordinator", allowed: nil) {
            cluster.coordinator = try CoordinatorConfiguration(reading: object)
        }
        var names = Set<String>()
        for object in try root.objects("workers", allowed: nil) ?? [] {
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

