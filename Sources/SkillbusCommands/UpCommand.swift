import Foundation
import Skillbus

/// `skillbus up`
public enum UpCommand: SkillbusCommand {
    public static let spec = CommandSpec(
        name: "up",
        abstract: "Start the coordinator and the configured workers locally (the main job).",
        discussion: """
            Starts each process as a child, prefixes its log lines with its name, restarts a child that
            crashes (waiting 0.5 s, then twice as long each time up to 30 s), and on Ctrl-C or SIGTERM stops
            the workers, then the coordinator, each within a grace period.

            On SIGHUP it reads the config again: workers whose settings changed get their new config and a
            SIGHUP (they offer the new skill list at once), new workers start, removed workers stop. A
            broken config changes nothing. Coordinator settings take effect only after a restart.

            With --keys the bus and the feed use CURVE: up makes a key set in the data folder's keys/ (the
            coordinator's, one per worker, and a client and an admin key; kept for later runs) and prints the
            two variables a client needs.

            EXAMPLE: skillbus up --config configs/local.json
                     skillbus up --keys
            """,
        options: [
            OptionSpec("--config", value: "FILE", help: "Cluster config (default configs/local.json)."),
            OptionSpec("--keys", help: "Use CURVE keys (made in the data folder's keys/ on the first run)."),
        ])

    public static func run(_ arguments: ParsedArguments) async throws -> Int32 {
        let configPath = arguments.value("--config") ?? "configs/local.json"
        var cluster = try ClusterConfiguration.load(path: configPath)
        if arguments.flag("--keys") && cluster.coordinator.security != nil {
            throw UsageError(spec, "--keys: \(configPath) already gives the coordinator keys")
        }
        let localKeys = arguments.flag("--keys") ? try LocalKeys(directory: cluster.dataRoot + "/keys") : nil
        if let localKeys { cluster = try localKeys.apply(to: cluster) }
        try checkCommandSkills(cluster)
        let signals = SignalWatcher()
        let hangups = SignalWatcher([SIGHUP])
        let supervisor = try Supervisor()
        defer { supervisor.cleanUp() }

        // The coordinator journals its rounds, so that they outlive this run too.
        if cluster.coordinator.dataDir == nil { cluster.coordinator.dataDir = cluster.journalDirectory }
        let coordinatorFile = try supervisor.write(cluster.coordinator.json, name: "coordinator.json")
        let coordinator = supervisor.start(
            name: "coordinator", arguments: ["coordinator", "--config", coordinatorFile])
        guard let ready = await coordinator.readyLine(timeout: .seconds(20)), let boundBus = ready["bus"],
            let feed = ready["feed"]
        else {
            printError("error: the coordinator did not start (see its log above)")
            await supervisor.stopAll()
            return 1
        }
        let bus = boundBus.replacingOccurrences(of: "0.0.0.0", with: "127.0.0.1")
        var workers = WorkerSet(supervisor: supervisor, bus: bus, configuredBus: cluster.coordinator.bus)
        try await workers.apply(cluster)
        print(
            "skillbus up: coordinator on \(bus) (feed \(feed)), \(cluster.workers.count) worker(s). "
                + "Try: skillbus send echo text=hello --coordinator \(bus)   ·   skillbus feed --feed \(feed)")
        print("skillbus up: agents keep their context under \(cluster.dataRoot)")
        print("skillbus up: the coordinator journals rounds in \(cluster.coordinator.dataDir ?? "")")
        if let localKeys {
            print("skillbus up: keys in \(localKeys.directory); a client needs: export \(localKeys.environment)")
        }
        let reloader = FunctionService { [workers, localKeys] in
            var workers = workers
            for await _ in hangups.signals {
                do {
                    var reloaded = try ClusterConfiguration.load(path: configPath)
                    if let localKeys { reloaded = try localKeys.apply(to: reloaded) }
                    try checkCommandSkills(reloaded)
                    try await workers.apply(reloaded)
                    print("skillbus up: reloaded \(configPath): \(reloaded.workers.count) worker(s)")
                } catch {
                    printError("skillbus up: \(configPath) not reloaded, nothing changed: \(error)")
                }
            }
        }
        try await runUntilStopped([reloader], signals: signals) { signal in
            print("skillbus up: signal \(signal), stopping")
        }
        // Outside the group: the children get their own grace periods, and a cancelled task could not wait.
        await supervisor.stopAll()
        print("skillbus up: stopped")
        return 0
    }
}

extension UpCommand {
    /// Every worker's command skills must find their programs and working directories before anything
    /// starts: a mistake is reported once, naming the cluster file's key, not by a child that keeps failing.
    static func checkCommandSkills(_ cluster: ClusterConfiguration) throws {
        for worker in cluster.workers {
            _ = try WorkerCommand.skills(of: worker)
        }
    }
}

/// The workers `up` runs, brought in line with a config: on start, and again on each SIGHUP.
struct WorkerSet {
    let supervisor: Supervisor
    /// The coordinator's bus as workers reach it, and as the config spells it.
    let bus: String
    let configuredBus: String
    private var running: [String: (configuration: WorkerConfiguration, child: Child)] = [:]

    init(supervisor: Supervisor, bus: String, configuredBus: String) {
        self.supervisor = supervisor
        self.bus = bus
        self.configuredBus = configuredBus
    }

    /// Starts new workers, stops removed ones, and hands changed ones their new config with a SIGHUP.
    /// Each worker keeps its context in its own directory under the cluster's data folder.
    mutating func apply(_ cluster: ClusterConfiguration) async throws {
        let workers = cluster.workers
        let wanted = Set(workers.map(\.name))
        for (name, entry) in running where !wanted.contains(name) {
            await entry.child.stop(grace: .seconds(5))
            running[name] = nil
        }
        for var worker in workers {
            if worker.coordinator == configuredBus { worker.coordinator = bus }
            if worker.dataDir == nil { worker.dataDir = DataDirectory.agent(worker.name, under: cluster.dataRoot) }
            if let current = running[worker.name] {
                guard current.configuration != worker else { continue }
                _ = try supervisor.write(worker.json, name: "worker-\(worker.name).json")
                current.child.signal(SIGHUP)
                running[worker.name]!.configuration = worker
            } else {
                let file = try supervisor.write(worker.json, name: "worker-\(worker.name).json")
                running[worker.name] = (
                    worker, supervisor.start(name: worker.name, arguments: ["worker", "--config", file])
                )
            }
        }
    }
}
