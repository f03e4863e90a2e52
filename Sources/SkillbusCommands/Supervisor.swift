import Foundation
import Skillbus
import Synchronization

/// Starts children, forwards their output with a name prefix, restarts crashed ones, stops them all.
/// `up` and `bench` run this program's own commands; the team's perf tool runs a `skillbus` it names.
public final class Supervisor: Sendable {
    private let executable: String
    /// A temporary folder of this run: the children's config files (and the bench's agent stores).
    public let directory: String
    private let children = Mutex<[Child]>([])

    /// Children run `executable`, or this program when it is nil.
    public init(executable: String? = nil) throws {
        self.executable = executable ?? URL(fileURLWithPath: "/proc/self/exe").resolvingSymlinksInPath().path
        directory = NSTemporaryDirectory() + "skillbus-up-\(getpid())"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
    }

    public func write(_ value: JSONValue, name: String) throws -> String {
        let path = directory + "/" + name
        try Data(value.prettyString().utf8).write(to: URL(fileURLWithPath: path))
        return path
    }

    /// Starts a child, with `environment` added to this process's; with `quiet`, its output is read (for its
    /// ready line) but not printed.
    public func start(
        name: String, arguments: [String], environment: [String: String] = [:], quiet: Bool = false
    ) -> Child {
        let child = Child(
            name: name, executable: executable, arguments: arguments, environment: environment, quiet: quiet)
        children.withLock { $0.append(child) }
        child.launch()
        return child
    }

    /// Workers first (newest first), the coordinator last, so nobody loses its coordinator mid-request.
    public func stopAll() async {
        for child in children.withLock({ $0 }).reversed() { await child.stop(grace: .seconds(5)) }
    }

    public func cleanUp() { try? FileManager.default.removeItem(atPath: directory) }
}

/// One supervised child process.
public final class Child: Sendable {
    public let name: String
    private let executable: String
    private let arguments: [String]
    /// Added to this process's environment for the child.
    private let addedEnvironment: [String: String]
    private let quiet: Bool
    private let state = Mutex(State())

    private struct State {
        var process: ChildProcess?
        var stopping = false
        var restartDelay = 0.5
        var startedAt = Date()
        var ready: [String: String]?
        var readyWaiters: [CheckedContinuation<[String: String]?, Never>] = []
        var exitWaiters: [CheckedContinuation<Void, Never>] = []
    }

    init(name: String, executable: String, arguments: [String], environment: [String: String], quiet: Bool) {
        self.name = name
        self.executable = executable
        self.arguments = arguments
        self.addedEnvironment = environment
        self.quiet = quiet
    }

    private func emit(_ line: String) {
        if !quiet { print("[\(name)] \(line)") }
    }

    public var pid: Int32? { state.withLock { $0.process?.pid } }

    func launch() {
        var environment = ProcessInfo.processInfo.environment
        environment["SKILLBUS_SUPERVISOR_PID"] = String(getpid())
        // A child takes its keys from the config it is given, never from the shell that started up.
        environment["SKILLBUS_SERVER_KEY"] = nil
        environment["SKILLBUS_KEY"] = nil
        environment.merge(addedEnvironment) { _, given in given }
        // Held while it starts, so that an exit right away finds it recorded.
        let started = state.withLock { state -> Result<ChildProcess, any Error> in
            let started = Result {
                try LineReader.run(executable, arguments, environment: environment, name: "skillbus-up-\(name)") {
                    [weak self] line in
                    self?.forward(line)
                } onEnd: { [weak self] in
                    self?.outputEnded()
                } onExit: { [weak self] termination in
                    self?.exited(termination)
                }
            }
            if case .success(let process) = started { (state.process, state.startedAt) = (process, Date()) }
            return started
        }
        switch started {
        case .success(let process): emit("started (pid \(process.pid))")
        case .failure(let error): emit("could not start: \(error)")
        }
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
    public func readyLine(timeout: Duration) async -> [String: String]? {
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

    private func exited(_ termination: ChildProcess.Termination) {
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
            switch termination {
            case .signalled(let number): "killed by signal \(number)"
            case .exited(let code): "exited with status \(code)"
            }
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

    public func signal(_ number: Int32) {
        state.withLock { $0.process }?.signal(number)
    }

    /// `kill -9`, and no restart: for measuring what a sudden death does.
    public func killWithoutRestart() {
        let process = state.withLock { state -> ChildProcess? in
            state.stopping = true
            return state.process
        }
        process?.signal(SIGKILL)
    }

    /// SIGTERM, then SIGKILL if it is still running after `grace`.
    public func stop(grace: Duration) async {
        let process = state.withLock { state -> ChildProcess? in
            state.stopping = true
            return state.process
        }
        guard let process, process.isRunning else { return }
        let pid = process.pid
        process.signal(SIGTERM)
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
                process.signal(SIGKILL)
            }
            await group.next()
            group.cancelAll()
        }
    }
}
