import Foundation
import Skillbus
import Synchronization

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

        // The coordinator's journal lives beside the workers' data, so that rounds outlive this run too.
        if cluster.coordinator.dataDir == nil { cluster.coordinator.dataDir = cluster.dataRoot + "/coordinator-journal" }
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

/// Starts children, forwards their output with a name prefix, restarts crashed ones, stops them all.
final class Supervisor: Sendable {
    private let executable: String
    /// A temporary folder of this run: the children's config files (and the bench's agent stores).
    let directory: String
    private let children = Mutex<[Child]>([])

    init() throws {
        executable = URL(fileURLWithPath: "/proc/self/exe").resolvingSymlinksInPath().path
        directory = NSTemporaryDirectory() + "skillbus-up-\(getpid())"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
    }

    func write(_ value: JSONValue, name: String) throws -> String {
        let path = directory + "/" + name
        try Data(value.prettyString().utf8).write(to: URL(fileURLWithPath: path))
        return path
    }

    /// Starts a child; with `quiet`, its output is read (for its ready line) but not printed.
    func start(name: String, arguments: [String], quiet: Bool = false) -> Child {
        let child = Child(name: name, executable: executable, arguments: arguments, quiet: quiet)
        children.withLock { $0.append(child) }
        child.launch()
        return child
    }

    /// Workers first (newest first), the coordinator last, so nobody loses its coordinator mid-request.
    func stopAll() async {
        for child in children.withLock({ $0 }).reversed() { await child.stop(grace: .seconds(5)) }
    }

    func cleanUp() { try? FileManager.default.removeItem(atPath: directory) }
}

/// One supervised child process.
final class Child: Sendable {
    let name: String
    private let executable: String
    private let arguments: [String]
    private let quiet: Bool
    private let state = Mutex(State())

    private struct State {
        var process: Process?
        var stopping = false
        var restartDelay = 0.5
        var startedAt = Date()
        var ready: [String: String]?
        var readyWaiters: [CheckedContinuation<[String: String]?, Never>] = []
        var exitWaiters: [CheckedContinuation<Void, Never>] = []
    }

    init(name: String, executable: String, arguments: [String], quiet: Bool) {
        self.name = name
        self.executable = executable
        self.arguments = arguments
        self.quiet = quiet
    }

    private func emit(_ line: String) {
        if !quiet { print("[\(name)] \(line)") }
    }

    var pid: Int32? { state.withLock { $0.process?.processIdentifier } }

    func launch() {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = arguments
        var environment = ProcessInfo.processInfo.environment
        environment["SKILLBUS_SUPERVISOR_PID"] = String(getpid())
        // A child takes its keys from the config it is given, never from the shell that started up.
        environment["SKILLBUS_SERVER_KEY"] = nil
        environment["SKILLBUS_KEY"] = nil
        process.environment = environment
        process.terminationHandler = { [weak self] process in self?.exited(process) }
        do {
            try LineReader.run(process, name: "skillbus-up-\(name)") { [weak self] line in
                self?.forward(line)
            } onEnd: { [weak self] in
                self?.outputEnded()
            }
        } catch {
            emit("could not start: \(error)")
            return
        }
        state.withLock {
            $0.process = process
            $0.startedAt = Date()
        }
        emit("started (pid \(process.processIdentifier))")
    }

    /// Prints a line with the child's name in front; watches for the coordinator's ready line.
    private func forward(_ line: String) {
        emit(line)
        guard let ready = Self.parseReady(line) else { return }
        let waiters = state.withLock { state in
            state.ready = ready
            defer { state.readyWaiters = [] }
            return state.readyWaiters
        }
        for waiter in waiters { waiter.resume(returning: ready) }
    }

    /// `skillbus coordinator ready: bus=… feed=…` (and the baseline proxy's like it) as key → value.
    static func parseReady(_ line: String) -> [String: String]? {
        guard line.hasPrefix("skillbus "), let marker = line.range(of: " ready: ") else { return nil }
        var values: [String: String] = [:]
        for part in line[marker.upperBound...].split(separator: " ") {
            guard let equals = part.firstIndex(of: "=") else { continue }
            values[String(part[..<equals])] = String(part[part.index(after: equals)...])
        }
        return values.isEmpty ? nil : values
    }

    /// The child's ready line (its bound endpoints), once it printed it, or nil after `timeout`.
    func readyLine(timeout: Duration) async -> [String: String]? {
        await withTaskGroup(of: [String: String]?.self) { group in
            group.addTask {
                await withCheckedContinuation { continuation in
                    let ready = self.state.withLock { state -> [String: String]? in
                        if state.ready == nil { state.readyWaiters.append(continuation) }
                        return state.ready
                    }
                    if let ready { continuation.resume(returning: ready) }
                }
            }
            group.addTask {
                try? await Task.sleep(for: timeout)
                let waiters = self.state.withLock { state in
                    defer { state.readyWaiters = [] }
                    return state.readyWaiters
                }
                for waiter in waiters { waiter.resume(returning: nil) }
                return nil
            }
            let first = await group.next() ?? nil
            group.cancelAll()
            return first
        }
    }

    /// The child's output ended (it exited). Whoever waits for a ready line that never came learns now: a
    /// bad config or a port in use is not cured by a restart. Not at the exit itself: the child's last
    /// lines, which say why, may still be on their way through the pipes.
    private func outputEnded() {
        let readyWaiters = state.withLock { state in
            defer { state.readyWaiters = [] }
            return state.readyWaiters
        }
        for waiter in readyWaiters { waiter.resume(returning: nil) }
    }

    private func exited(_ process: Process) {
        let (stopping, delay, waiters) = state.withLock { state in
            state.process = nil
            if Date().timeIntervalSince(state.startedAt) > 30 { state.restartDelay = 0.5 }
            let delay = state.restartDelay
            if !state.stopping { state.restartDelay = min(state.restartDelay * 2, 30) }
            defer { state.exitWaiters = [] }
            return (state.stopping, delay, state.exitWaiters)
        }
        for waiter in waiters { waiter.resume() }
        let how =
            process.terminationReason == .uncaughtSignal
            ? "killed by signal \(process.terminationStatus)" : "exited with status \(process.terminationStatus)"
        guard !stopping else {
            emit("stopped (\(how))")
            return
        }
        emit("\(how); restarting in \(delay) s")
        DispatchQueue.global().asyncAfter(deadline: .now() + delay) { [weak self] in
            guard let self, !self.state.withLock({ $0.stopping }) else { return }
            self.launch()
        }
    }

    func signal(_ number: Int32) {
        if let pid { kill(pid, number) }
    }

    /// `kill -9`, and no restart: for measuring what a sudden death does.
    func killWithoutRestart() {
        guard
            let pid = state.withLock({ state -> Int32? in
                state.stopping = true
                return state.process?.processIdentifier
            })
        else { return }
        kill(pid, SIGKILL)
    }

    /// SIGTERM, then SIGKILL if it is still running after `grace`.
    func stop(grace: Duration) async {
        let process = state.withLock { state -> Process? in
            state.stopping = true
            return state.process
        }
        guard let process, process.isRunning else { return }
        let pid = process.processIdentifier
        kill(pid, SIGTERM)
        await withTaskGroup(of: Void.self) { group in
            group.addTask {
                await withCheckedContinuation { continuation in
                    let running = self.state.withLock { state -> Bool in
                        if state.process != nil { state.exitWaiters.append(continuation) }
                        return state.process != nil
                    }
                    if !running { continuation.resume() }
                }
            }
            group.addTask {
                // Cancelled when the child exits in time; otherwise it is killed, which ends the wait above.
                guard (try? await Task.sleep(for: grace)) != nil else { return }
                self.emit("did not stop within \(grace); killing pid \(pid)")
                kill(pid, SIGKILL)
            }
            await group.next()
            group.cancelAll()
        }
    }
}
