import Foundation
import Skillbus
import SkillbusZMQ

/// `skillbus coordinator`
public enum CoordinatorCommand: SkillbusCommand {
    public static let spec = CommandSpec(
        name: "coordinator",
        abstract: "Run the coordinator: the bus that routes requests, and the feed.",
        discussion: """
            Binds a ROUTER (the bus) for clients and workers and an XPUB (the feed) for watchers, then serves
            until SIGINT or SIGTERM. Prints one line 'skillbus coordinator ready: bus=… feed=…' on standard
            output once both are bound (with real ports when an endpoint ends in ':*').
            deploy/skillbus-coordinator.service runs it with glibc's malloc on transparent huge pages
            (GLIBC_TUNABLES), which keeps remembered rounds cheap to reach.

            Without keys it binds loopback endpoints only (127.x, localhost, ::1, ipc, inproc): with a
            "security" section in its config (its secret key, and every public key that may connect with its
            role) the bus and the feed are CURVE sockets and it binds anywhere; --insecure binds anywhere
            without keys, and says so loudly. See README "Keys and roles".

            --http HOST:PORT (config "http") also serves the operator endpoint there: a live dashboard at /,
            Prometheus metrics at /metrics, /state (JSON) and /events (server-sent events); the ready line then
            ends in http=HOST:PORT. It is loopback only unless --insecure: it has no keys.
            With --data-dir (config "dataDir") it journals every round in DIR/journal.sqlite: a round id sent
            again after a restart gets its stored document, and a round the restart interrupted is answered
            'interrupted' (or runs again, when all its skills are idempotent). See README "Durability".
            With "ha" in its config it keeps that journal in PostgreSQL and joins a coordinator group: the
            database elects one leader, the others answer every message with not_leader naming it. A coordinator
            that lost the lead exits with status 1 (restarted, it joins as a standby). See PROTOCOL §3.11.

            EXAMPLE: skillbus coordinator --config /etc/skillbus/coordinator.json --bus tcp://0.0.0.0:5555
            """,
        options: [
            OptionSpec("--bus", value: "ENDPOINT", help: "Bus endpoint to bind (default \(Defaults.bus))."),
            OptionSpec("--feed", value: "ENDPOINT", help: "Feed endpoint to bind (default \(Defaults.feed))."),
            OptionSpec("--config", value: "FILE", help: "Coordinator config (JSON, version 1)."),
            OptionSpec("--heartbeat-ms", value: "MS", help: "Heartbeat interval to workers (default 1000)."),
            OptionSpec("--max-message-bytes", value: "N", help: "Largest accepted message (default 1048576)."),
            OptionSpec("--no-dedup", help: "Execute identical invocations of a round each time (for measuring)."),
            OptionSpec("--insecure", help: "Without keys, bind other than loopback anyway (anyone may connect)."),
            OptionSpec(
                "--http", value: "HOST:PORT",
                help: "Serve the dashboard and /metrics there (e.g. 127.0.0.1:8080; port 0 takes a free one)."),
            OptionSpec(
                "--data-dir", value: "DIR",
                help: "Keep the round journal here (journal.sqlite): rounds survive a restart (default: memory only)."),
            OptionSpec(
                "--startup-grace-ms", value: "MS",
                help: "After start, requests for skills nobody offers yet wait this long for an agent (default 5000)."),
            logLevelOption,
        ])

    public static func configuration(_ arguments: ParsedArguments) throws -> CoordinatorConfiguration {
        var configuration = CoordinatorConfiguration()
        if let value = Defaults.environmentBus, Endpoint.problem(value) == nil { configuration.bus = value }
        if let value = Defaults.environmentFeed, Endpoint.problem(value) == nil { configuration.feed = value }
        if let path = arguments.value("--config") { configuration = try CoordinatorConfiguration.load(path: path) }
        if let bus = try arguments.endpoint("--bus", in: spec) { configuration.bus = bus }
        if let feed = try arguments.endpoint("--feed", in: spec) { configuration.feed = feed }
        if let ms = try arguments.int("--heartbeat-ms", minimum: 10, maximum: CoordinatorState.maxHeartbeatMs, in: spec)
        {
            configuration.heartbeatMs = ms
        }
        if let bytes = try arguments.int("--max-message-bytes", minimum: 256, maximum: 1 << 30, in: spec) {
            configuration.maxMessageBytes = bytes
        }
        if arguments.flag("--no-dedup") { configuration.deduplication = false }
        if arguments.flag("--insecure") { configuration.insecure = true }
        if let text = arguments.value("--http") {
            do throws(SkillbusError) {
                configuration.http = try HTTPAddress(parsing: text)
            } catch {
                throw UsageError(spec, "option '--http': \(error.message)")
            }
        }
        if let directory = arguments.value("--data-dir") { configuration.dataDir = directory }
        if let ms = try arguments.int("--startup-grace-ms", minimum: 0, maximum: 600_000, in: spec) {
            configuration.startupGraceMs = ms
        }
        if let problem = BindCheck.problem(configuration) { throw SkillbusError(.invalidConfiguration, problem) }
        return configuration
    }

    public static func run(_ arguments: ParsedArguments) async throws -> Int32 {
        let configuration = try configuration(arguments)
        let logger = Logger(
            label: "coordinator", level: try Logger.Level(option: arguments.value("--log-level"), spec: spec))
        let signals = SignalWatcher()
        let context = try ZMQContext()
        let coordinator: Coordinator
        do {
            coordinator = try await Coordinator.start(configuration: configuration, context: context, logger: logger)
        } catch {
            printError("error: cannot start the coordinator: \(error)")
            return 1
        }
        if let security = configuration.security {
            let roles = AccessPolicy.Role.allCases.map { role in
                "\(security.policy.keys.filter { $0.role == role }.count) \(role.rawValue)"
            }
            let readers = AccessPolicy.Role.allCases.filter(security.policy.feedRoles.contains).map(\.rawValue)
            logger.info(
                "keys: CURVE on bus and feed, server key \(security.keys.publicKey); \(roles.joined(separator: ", ")) "
                    + "key(s); the feed admits \(readers.isEmpty ? "nobody" : readers.joined(separator: ", "))")
        }
        let http = coordinator.httpAddress.map { " http=\($0)" } ?? ""
        print("skillbus coordinator ready: bus=\(coordinator.busEndpoint) feed=\(coordinator.feedEndpoint)\(http)")
        try await runUntilStopped([coordinator], signals: signals, logger: logger) { signal in
            logger.info("signal \(signal): stopping")
        }
        if let failure = coordinator.failure {
            printError("error: the coordinator stopped: \(failure)")
            // At once, without the process's exit handlers: a thread of the deposed coordinator may still be inside
            // libpq (a commit on a cut network), and tearing the libraries down under it crashes the exit.
            fflush(nil)
            _exit(1)
        }
        return 0
    }
}

/// `skillbus worker`
public enum WorkerCommand: SkillbusCommand {
    public static let spec = CommandSpec(
        name: "worker",
        abstract: "Run an agent that offers skills to the coordinator.",
        discussion: """
            Connects to the coordinator's bus, registers the chosen built-in skills, and runs up to CAPACITY
            invocations at once until SIGINT or SIGTERM. Built-in skills: \(BuiltinSkills.identifiers.joined(separator: ", ")).
            Its --config may also declare command skills ("commands"): programs in any language run as
            skills, their output lines streamed (README, "Skills in any language"), and MCP servers
            ("mcpServers"), launched or reached over HTTP and supervised, whose tools it offers as skills
            <server>.<tool> (docs/MCP.md).
            On SIGHUP it reads its --config file again and offers the skills listed there from then on.
            It follows the registry on the feed endpoint the coordinator names (or --feed).
            --policy overrides what a skill declares about retries and concurrency (a config's "policies"):
            retry (an object, or null for none), idempotent, concurrency (how many run at once, or null).

            EXAMPLE: skillbus worker --name alpha --skills echo,math.eval --capacity 8
                     skillbus worker --name beta --skills sleep --policy 'sleep={"concurrency":1}'
                     skillbus worker --config configs/mcp-worker.json
            """,
        options: [
            OptionSpec("--name", value: "NAME", help: "Agent name, unique on the bus (required)."),
            coordinatorOption,
            OptionSpec(
                "--feed", value: "ENDPOINT[,…]",
                help: "Feed endpoint (default: the one the coordinator names); a group's: several, comma-separated."),
            OptionSpec("--skills", value: "a,b,…", help: "Built-in skills to offer (default: all)."),
            OptionSpec("--capacity", value: "N", help: "Invocations run at once (default 4)."),
            OptionSpec(
                "--sandbox", value: "DIR",
                help: "Directory file.read may read (default: current; $STATE_DIRECTORY/files under systemd)."),
            OptionSpec(
                "--data-dir", value: "DIR",
                help: "Where the agent keeps its sessions and memory (default \(DataDirectory.agents)/NAME;"
                    + " $STATE_DIRECTORY/context under systemd)."),
            OptionSpec("--heartbeat-ms", value: "MS", help: "Heartbeat interval (default 1000)."),
            OptionSpec("--config", value: "FILE", help: "Worker config (JSON, version 1)."),
            serverKeyOption, keyOption,
            OptionSpec(
                "--policy", value: "SKILL=JSON", help: "Override a skill's retry, idempotent or concurrency.",
                repeatable: true),
            logLevelOption,
        ])

    public static func configuration(_ arguments: ParsedArguments) throws -> WorkerConfiguration {
        var configuration = WorkerConfiguration()
        if let value = Defaults.environmentBus, Endpoint.listProblem(value) == nil { configuration.coordinator = value }
        if let path = arguments.value("--config") { configuration = try WorkerConfiguration.load(path: path) }
        if let name = arguments.value("--name") { configuration.name = name }
        if let endpoint = try arguments.endpoints("--coordinator", in: spec) { configuration.coordinator = endpoint }
        if let endpoint = try arguments.endpoints("--feed", in: spec) { configuration.feed = endpoint }
        if let list = arguments.value("--skills") {
            let skills = list.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }
            configuration.skills = skills
            for skill in skills where !BuiltinSkills.identifiers.contains(skill) {
                throw UsageError(
                    spec,
                    "option '--skills': unknown skill '\(skill)' (known: \(BuiltinSkills.identifiers.joined(separator: ", ")))"
                )
            }
        }
        if let capacity = try arguments.int("--capacity", minimum: 1, maximum: 100_000, in: spec) {
            configuration.capacity = capacity
        }
        if let sandbox = arguments.value("--sandbox") { configuration.sandbox = sandbox }
        if let directory = arguments.value("--data-dir") { configuration.dataDir = directory }
        if let ms = try arguments.int("--heartbeat-ms", minimum: 10, maximum: CoordinatorState.maxHeartbeatMs, in: spec)
        {
            configuration.heartbeatMs = ms
        }
        for item in arguments.all("--policy") {
            guard let equals = item.firstIndex(of: "="),
                let json = try? JSONValue(parsing: String(item[item.index(after: equals)...]))
            else {
                throw UsageError(spec, "option '--policy': expected SKILL=JSON, e.g. sleep={\"concurrency\":1}, got '\(item)'")
            }
            let skill = String(item[..<equals])
            do throws(SkillbusError) {
                configuration.policies.overrides[skill] = try SkillPolicies.override(skill, json)
            } catch {
                throw UsageError(spec, "option '--policy': \(error.message)")
            }
        }
        guard SkillDescriptor.isValidIdentifier(configuration.name) else {
            throw UsageError(spec, "option '--name' is required: 1-128 of a-z A-Z 0-9 . _ -")
        }
        return configuration
    }

    public static func run(_ arguments: ParsedArguments) async throws -> Int32 {
        let configuration = try configuration(arguments)
        let logger = Logger(
            label: "worker \(configuration.name)",
            level: try Logger.Level(option: arguments.value("--log-level"), spec: spec))
        let skills = try skills(of: configuration)
        let signals = SignalWatcher()
        let context = try ZMQContext()
        var storeOptions = AgentStore.Options()
        storeOptions.flushIntervalMs = configuration.flushIntervalMs
        storeOptions.maxValueBytes = configuration.maxMemoryValueBytes
        let dataDirectory = configuration.dataDir ?? DataDirectory.worker(configuration.name)
        // A key that cannot be used is a configuration error (exit 2), found before anything starts.
        let credentials = try Defaults.credentials(
            arguments, spec, serverKey: configuration.serverKey, key: configuration.key)
        var options = AgentWorker.Options(
            name: configuration.name, coordinator: configuration.coordinator,
            capacity: configuration.capacity, heartbeatMs: configuration.heartbeatMs,
            maxMessageBytes: configuration.maxMessageBytes, feed: configuration.feed,
            dataDirectory: dataDirectory, store: storeOptions)
        options.maxOutputBytes = configuration.maxOutputBytes
        options.role = configuration.role
        options.description = configuration.description
        let worker: AgentWorker
        do {
            // A planner that cannot be made (its key variable is unset, say) stops the start like a store would.
            options.planner = try configuration.planner.map { try ConfiguredPlanner.make($0) }
            options.credentials = credentials
            worker = try await AgentWorker.connect(options: options, skills: skills, context: context, logger: logger)
        } catch {
            printError("error: agent '\(configuration.name)' cannot start: \(error)")
            return 1
        }
        logger.info(
            "connecting to \(configuration.coordinator) with \(skills.map(\.identifier).joined(separator: ", "));"
                + " context in \(dataDirectory)")
        let mounts = mcpMounts(configuration, worker: worker, logger: logger)
        let hangups = SignalWatcher([SIGHUP])
        let reloader = FunctionService {
            for await _ in hangups.signals { reload(arguments, worker: worker, logger: logger) }
        }
        // Stopped in reverse: the reloader first, then the worker (its cancellation is its graceful stop), then
        // the MCP servers it mounted, once nothing calls them any more.
        try await runUntilStopped(mounts + [worker, reloader], signals: signals, logger: logger) { signal in
            logger.info("signal \(signal): stopping")
        }
        // The goodbye (DISCONNECT) is flushed when the context ends; the worker holds the context, so end
        // it here rather than whenever the last reference goes.
        await context.terminate(within: .seconds(1))
        return 0
    }

    /// The built-ins a configuration names and its command skills, whose programs and working directories
    /// must be found (an error names the config key), with the config's policies applied.
    public static func skills(of configuration: WorkerConfiguration) throws -> [any AgentSkill] {
        let sandbox = try configuration.sandbox ?? DataDirectory.sandbox()
        var skills = try BuiltinSkills.make(configuration.builtins, sandbox: sandbox)
        for spec in configuration.commands { skills.append(try CommandSkill(spec: spec, sandbox: sandbox)) }
        return try configuration.policies.apply(to: skills)
    }

    /// The configuration's MCP servers, each publishing its tools as skills `<server>.<tool>` on `worker`, with
    /// the configuration's policies applied to them as to any skill.
    static func mcpMounts(_ configuration: WorkerConfiguration, worker: AgentWorker, logger: Logger) -> [MCPServerMount] {
        configuration.mcpServers.map { spec in
            MCPServerMount(spec: spec, logger: logger, clientVersion: SkillbusCLI.version) { skills in
                do {
                    worker.replaceSkills(withPrefix: spec.name + ".", by: try configuration.policies.apply(to: skills))
                } catch {
                    logger.error("MCP server '\(spec.name)': its tools are not offered: \(error)")
                }
            }
        }
    }

    /// SIGHUP: the config file's skill list (and sandbox) again; a broken file changes nothing.
    static func reload(_ arguments: ParsedArguments, worker: AgentWorker, logger: Logger) {
        guard arguments.value("--config") != nil else {
            return logger.warning("SIGHUP: nothing to reload (started without --config)")
        }
        do {
            let configuration = try configuration(arguments)
            let skills = try skills(of: configuration)
            // What the mounted MCP servers offer stays; the servers themselves change only with a restart.
            worker.setSkills(skills, keepingPrefixes: configuration.mcpServers.map { $0.name + "." })
            logger.info("SIGHUP: now offering \(skills.map(\.identifier).sorted().joined(separator: ", "))")
            if configuration.capacity != worker.options.capacity || configuration.name != worker.options.name {
                logger.warning("SIGHUP: name and capacity changes take effect only after a restart")
            }
        } catch {
            logger.error("SIGHUP: config not reloaded, skills unchanged: \(error)")
        }
    }
}
