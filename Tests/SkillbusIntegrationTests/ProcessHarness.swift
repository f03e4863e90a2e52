import Foundation
import Skillbus
import SkillbusCommands
import Synchronization
import Testing

/// Where the `skillbus` executable under test is: $SKILLBUS_BINARY, or this package's debug build.
let skillbusBinary: String = {
    if let path = ProcessInfo.processInfo.environment["SKILLBUS_BINARY"] { return path }
    let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent()
    return root.appendingPathComponent(".build/debug/skillbus").path
}()

/// The team's perf tool (`skillbus-perf`): $SKILLBUS_PERF_BINARY, or this package's debug build. It is given
/// the `skillbus` under test.
let skillbusPerfBinary: String = {
    if let path = ProcessInfo.processInfo.environment["SKILLBUS_PERF_BINARY"] { return path }
    let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent()
    return root.appendingPathComponent(".build/debug/skillbus-perf").path
}()

struct TimedOut: Error, CustomStringConvertible {
    let what: String
    var description: String { "timed out waiting for \(what)" }
}

/// A real child process (`skillbus` unless told otherwise) whose output lines can be awaited with a deadline.
final class SkillbusProcess: Sendable {
    let name: String
    /// Where this process keeps agent stores (its own XDG_STATE_HOME) when the test named none: no two test
    /// processes share one, and it is removed once the process is gone.
    let ownedStateDirectory: String?
    private let process: ChildProcess
    /// What the output and exit handlers record; they hold it, not the process object.
    private let record = Record()

    private final class Record: Sendable {
        let state = Mutex(State())
    }

    private struct State {
        var lines: [String] = []
        var waiters:
            [(id: Int, predicate: @Sendable (String) -> Bool, continuation: CheckedContinuation<String?, Never>)] = []
        var nextWaiter = 0
        var exited = false
        var exitWaiters: [CheckedContinuation<Void, Never>] = []
        /// Standard output and error both reached end of file: every line has been read.
        var outputEnded = false
        var drainWaiters: [CheckedContinuation<Void, Never>] = []
    }

    /// Starts `skillbus ARGS…` (or `executable PREFIX… ARGS…`).
    init(
        _ arguments: [String], name: String? = nil, environment: [String: String] = [:], clearing: [String] = [],
        directory: String? = nil, executable: String = skillbusBinary, prefix: [String] = []
    ) throws {
        let name = name ?? arguments.first ?? "skillbus"
        self.name = name
        var env = ProcessInfo.processInfo.environment
        env["SKILLBUS_COORDINATOR"] = nil
        env["SKILLBUS_FEED"] = nil
        env["SKILLBUS_SERVER_KEY"] = nil
        env["SKILLBUS_KEY"] = nil
        for key in clearing { env[key] = nil }
        if environment["XDG_STATE_HOME"] == nil {
            let directory = NSTemporaryDirectory() + "skillbus-test-state-\(getpid())-\(UUID().uuidString.prefix(8))"
            env["XDG_STATE_HOME"] = directory
            ownedStateDirectory = directory
        } else {
            ownedStateDirectory = nil
        }
        for (key, value) in environment { env[key] = value }
        let record = self.record
        process = try LineReader.run(
            executable, prefix + arguments, environment: env, directory: directory, name: "test-\(name)"
        ) { line in
            Self.received(line, record)
        } onEnd: {
            Self.outputEnded(record)
        } onExit: { _ in
            Self.terminated(record)
        }
    }

    deinit {
        process.signal(SIGKILL)
        if let ownedStateDirectory { try? FileManager.default.removeItem(atPath: ownedStateDirectory) }
    }

    var pid: Int32 { process.pid }
    var output: [String] { record.state.withLock { $0.lines } }
    /// The exit code, or the number of the signal that ended it; -1 while it runs.
    var exitCode: Int32 { process.termination?.status ?? -1 }

    private static func received(_ line: String, _ record: Record) {
        let ready = record.state.withLock { state -> [CheckedContinuation<String?, Never>] in
            state.lines.append(line)
            var ready: [CheckedContinuation<String?, Never>] = []
            state.waiters.removeAll { waiter in
                guard waiter.predicate(line) else { return false }
                ready.append(waiter.continuation)
                return true
            }
            return ready
        }
        for continuation in ready { continuation.resume(returning: line) }
    }

    /// No line will come now: whoever waits for one learns it.
    private static func outputEnded(_ record: Record) {
        let (drainWaiters, lineWaiters) = record.state.withLock { state in
            state.outputEnded = true
            defer { (state.drainWaiters, state.waiters) = ([], []) }
            return (state.drainWaiters, state.waiters.map(\.continuation))
        }
        for waiter in drainWaiters { waiter.resume() }
        for waiter in lineWaiters { waiter.resume(returning: nil) }
    }

    /// Waits until both output pipes are closed, so `output` holds every line the process wrote;
    /// gives up after `timeout` (a pipe held open by someone else must not hang the test).
    func waitForOutputEnd(timeout: Duration = .seconds(5)) async {
        await withTaskGroup(of: Void.self) { group in
            group.addTask {
                await withCheckedContinuation { continuation in
                    let done = self.record.state.withLock { state -> Bool in
                        if !state.outputEnded { state.drainWaiters.append(continuation) }
                        return state.outputEnded
                    }
                    if done { continuation.resume() }
                }
            }
            group.addTask {
                guard (try? await Task.sleep(for: timeout)) != nil else { return }
                let waiters = self.record.state.withLock { state in
                    defer { state.drainWaiters = [] }
                    return state.drainWaiters
                }
                for waiter in waiters { waiter.resume() }
            }
            await group.next()
            group.cancelAll()
        }
    }

    /// Its last lines may still be in the pipes: those waiting for a line hear at the output's end.
    private static func terminated(_ record: Record) {
        let exitWaiters = record.state.withLock { state in
            state.exited = true
            defer { state.exitWaiters = [] }
            return state.exitWaiters
        }
        for waiter in exitWaiters { waiter.resume() }
    }

    /// The first line (seen already or still to come) that satisfies `predicate`, within `timeout`; a process
    /// whose output ended without one fails at once.
    @discardableResult
    func waitForLine(
        _ what: String, timeout: Duration = .seconds(20), where predicate: @escaping @Sendable (String) -> Bool
    ) async throws -> String {
        let id = record.state.withLock { state -> Int in
            state.nextWaiter += 1
            return state.nextWaiter
        }
        let line = await withTaskGroup(of: String?.self) { group in
            group.addTask {
                await withCheckedContinuation { continuation in
                    let immediate = self.record.state.withLock { state -> String?? in
                        if let line = state.lines.first(where: predicate) { return .some(line) }
                        if state.outputEnded { return .some(nil) }
                        state.waiters.append((id, predicate, continuation))
                        return .none
                    }
                    if let immediate { continuation.resume(returning: immediate) }
                }
            }
            group.addTask {
                try? await Task.sleep(for: timeout)
                let waiter = self.record.state.withLock { state in
                    let index = state.waiters.firstIndex { $0.id == id }
                    return index.map { state.waiters.remove(at: $0).continuation }
                }
                waiter?.resume(returning: nil)
                return nil
            }
            let first = await group.next() ?? nil
            group.cancelAll()
            return first
        }
        guard let line else {
            let ended = record.state.withLock { $0.outputEnded } ? " (its output ended)" : ""
            throw TimedOut(
                what: "\(what) from \(name)\(ended); output so far:\n" + output.suffix(30).joined(separator: "\n"))
        }
        return line
    }

    /// Waits for the process to exit, within `timeout`, and returns its exit code; then, briefly, for the rest of its
    /// output (the pipes are read on their own schedule), so `output` holds what it wrote before it exited.
    @discardableResult
    func waitForExit(timeout: Duration = .seconds(20)) async throws -> Int32 {
        let exited = await withTaskGroup(of: Bool.self) { group in
            group.addTask {
                await withCheckedContinuation { continuation in
                    let done = self.record.state.withLock { state -> Bool in
                        if !state.exited { state.exitWaiters.append(continuation) }
                        return state.exited
                    }
                    if done { continuation.resume() }
                }
                return true
            }
            group.addTask {
                guard (try? await Task.sleep(for: timeout)) != nil else { return false }
                let waiters = self.record.state.withLock { state in
                    defer { state.exitWaiters = [] }
                    return state.exitWaiters
                }
                for waiter in waiters { waiter.resume() }
                return false
            }
            let first = await group.next() ?? false
            group.cancelAll()
            return first
        }
        guard exited, record.state.withLock({ $0.exited }) else {
            throw TimedOut(what: "\(name) to exit; output:\n" + output.suffix(30).joined(separator: "\n"))
        }
        // A child it left behind may hold the pipes open: not for long.
        await waitForOutputEnd(timeout: .seconds(2))
        return exitCode
    }

    func signal(_ number: Int32) { process.signal(number) }
}

/// Runs `skillbus ARGS…` to completion and returns (exit code, stdout+stderr lines).
func runSkillbus(
    _ arguments: [String], timeout: Duration = .seconds(30), environment: [String: String] = [:],
    executable: String = skillbusBinary
) async throws -> (code: Int32, output: [String]) {
    let name = URL(fileURLWithPath: executable).lastPathComponent + " " + (arguments.first ?? "")
    let process = try SkillbusProcess(arguments, name: name, environment: environment, executable: executable)
    let code = try await process.waitForExit(timeout: timeout)
    // The exit can overtake the last bytes in the pipes: read until both are closed.
    await process.waitForOutputEnd()
    return (code, process.output)
}

/// A coordinator and workers on 127.0.0.1 with ephemeral ports, stopped when the test ends.
final class TestCluster: Sendable {
    let coordinator: SkillbusProcess
    let bus: String
    let feed: String
    let workers: Mutex<[String: SkillbusProcess]>

    init(coordinatorArguments: [String] = []) async throws {
        // No startup grace unless a test asks for one: tests that want unknown_skill want it at once.
        let grace = coordinatorArguments.contains("--startup-grace-ms") ? [] : ["--startup-grace-ms", "0"]
        coordinator = try SkillbusProcess(
            ["coordinator", "--bus", "tcp://127.0.0.1:*", "--feed", "tcp://127.0.0.1:*"] + grace
                + coordinatorArguments,
            name: "coordinator")
        let ready = try await coordinator.waitForLine("ready line") { $0.hasPrefix("skillbus coordinator ready:") }
        func field(_ key: String) -> String {
            ready.split(separator: " ").first { $0.hasPrefix(key + "=") }.map { String($0.dropFirst(key.count + 1)) }
                ?? ""
        }
        bus = field("bus")
        feed = field("feed")
        workers = Mutex([:])
    }

    /// Starts a worker and waits until the coordinator lists it as a provider.
    @discardableResult
    func startWorker(_ name: String, _ arguments: [String] = []) async throws -> SkillbusProcess {
        let worker = try SkillbusProcess(
            ["worker", "--name", name, "--coordinator", bus, "--heartbeat-ms", "200"] + arguments, name: name)
        workers.withLock { $0[name] = worker }
        try await coordinator.waitForLine("\(name) to join") { $0.contains("agent '\(name)' joined") }
        return worker
    }

    func send(_ arguments: [String]) async throws -> (code: Int32, output: [String]) {
        try await runSkillbus(["send"] + arguments + ["--coordinator", bus])
    }

    /// `skillbus send … --json` parsed.
    func sendJSON(_ arguments: [String]) async throws -> (code: Int32, document: JSONValue) {
        let (code, output) = try await send(arguments + ["--json"])
        let line = output.first { $0.hasPrefix("{") } ?? "null"
        return (code, try JSONValue(parsing: line))
    }

    /// How many invocations the coordinator has running on `agent` right now (`skillbus agents --json`).
    func inFlight(agent: String) async throws -> Int {
        let listing = try await agents()
        let entry = listing["agents"]?.arrayValue?.first { $0["agent"]?.stringValue == agent }
        return entry?["inFlight"]?.intValue ?? 0
    }

    /// `skillbus agents --json` parsed.
    func agents() async throws -> JSONValue {
        let (_, output) = try await runSkillbus(["agents", "--json", "--coordinator", bus])
        return try JSONValue(parsing: output.first { $0.hasPrefix("{") } ?? "{}")
    }

    /// `skillbus skills --json` parsed: a replica's whole registry with its position.
    func registryDocument() async throws -> JSONValue {
        let (code, output) = try await runSkillbus(["skills", "--json", "--coordinator", bus, "--feed", feed])
        guard code == 0, let line = output.first(where: { $0.hasPrefix("{") }) else {
            throw TimedOut(what: "skills --json (exit \(code): \(output.joined(separator: " | ")))")
        }
        return try JSONValue(parsing: line)
    }

    /// Signals every process to stop (SIGTERM: they shut down cleanly by themselves). Synchronous, so a
    /// `defer` runs it before the test returns and no process outlives the test run.
    func terminate() {
        for worker in workers.withLock({ Array($0.values) }) { worker.signal(SIGTERM) }
        coordinator.signal(SIGTERM)
    }

    func stop() async {
        let all = workers.withLock { Array($0.values) }
        for worker in all { worker.signal(SIGTERM) }
        for worker in all { _ = try? await worker.waitForExit(timeout: .seconds(10)) }
        coordinator.signal(SIGTERM)
        _ = try? await coordinator.waitForExit(timeout: .seconds(10))
    }
}

/// Checks `condition` every 50 ms until it holds, failing after `timeout`.
func waitUntil(
    _ what: String, timeout: Duration = .seconds(20), _ condition: @Sendable () async throws -> Bool
) async throws {
    let deadline = ContinuousClock.now + timeout
    while ContinuousClock.now < deadline {
        if try await condition() { return }
        try await Task.sleep(for: .milliseconds(50))
    }
    throw TimedOut(what: what)
}
