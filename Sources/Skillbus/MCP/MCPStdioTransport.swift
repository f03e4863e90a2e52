import Dispatch
import Foundation
import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

/// MCP over stdio: the server is a subprocess (in a process group of its own) that reads newline-delimited
/// JSON-RPC on its standard input and writes it on its standard output; its standard error goes to the
/// worker's log, line by line. Reading each pipe blocks, so each has a thread of its own; writes go through
/// a serial queue, so a server slow to read never blocks a caller's task.
///
/// Closing follows the spec's shutdown: standard input closed, then SIGTERM to the group, then SIGKILL.
final class MCPStdioTransport: MCPTransport {
    struct Launch: Sendable {
        /// The program, looked up in PATH when it has no slash, and its arguments.
        var command: String
        var arguments: [String]
        /// Added to (or replacing in) the worker's own environment.
        var environment: [String: String]
    }

    /// A line longer than this is no message we accept: the connection is dropped.
    static let longestLine = 16 << 20
    static let graceAfterClose: Duration = .milliseconds(500)
    static let graceAfterTerm: Duration = .seconds(1)

    private let launch: Launch
    private let server: String
    private let logger: Logger
    private let writes: DispatchQueue
    /// The process and its stdin, once started; stdin is -1 once closed.
    private let process = Mutex<(pid: pid_t, stdin: Int32)?>(nil)
    private let closedOnce = Mutex(false)

    init(server: String, launch: Launch, logger: Logger) {
        self.server = server
        self.launch = launch
        self.logger = logger
        writes = DispatchQueue(label: "skillbus-mcp-\(server)-stdin")
    }

    func start(
        receive: @escaping @Sendable (JSONRPCMessage) -> Void, closed: @escaping @Sendable (String) -> Void
    ) async throws(SkillbusError) {
        Glibc.signal(SIGPIPE, SIG_IGN)  // a server gone while we write is EPIPE, not our death
        let pipes: [[Int32]]
        switch ChildProcess.makePipes(3) {
        case .success(let made): pipes = made
        case .failure(let failure): throw failure.error(.unreachable, "cannot make a pipe")
        }
        let (input, output, errors) = (pipes[0], pipes[1], pipes[2])
        var environment = ProcessInfo.processInfo.environment
        for (name, value) in launch.environment { environment[name] = value }
        let started = ChildProcess.start(
            launch.command, argv: [launch.command] + launch.arguments,
            environment: environment.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }, directory: nil,
            input: input[0], output: output[1], errors: errors[1], searchingPath: true)
        Glibc.close(input[0])
        Glibc.close(output[1])
        Glibc.close(errors[1])
        let child: pid_t
        switch started {
        case .success(let pid): child = pid
        case .failure(let failure):
            Glibc.close(input[1])
            Glibc.close(output[0])
            Glibc.close(errors[0])
            throw failure.error(.unreachable, "cannot start '\(launch.command)'")
        }
        process.withLock { $0 = (child, input[1]) }
        let stderrTail = Mutex<[String]>([])
        let stderrDone = DispatchSemaphore(value: 0)
        Self.thread("skillbus-mcp-\(server)-stderr") { [logger, server] in
            Self.readLines(errors[0], limit: 64 << 10) { line in
                logger.info("MCP server '\(server)': \(line)")
                stderrTail.withLock { tail in
                    tail.append(line)
                    if tail.count > 5 { tail.removeFirst() }
                }
                return true
            }
            Glibc.close(errors[0])
            stderrDone.signal()
        }
        Self.thread("skillbus-mcp-\(server)-stdout") { [self] in
            var garbage: String?
            let ending = Self.readLines(output[0], limit: Self.longestLine) { line in
                guard !line.allSatisfy(\.isWhitespace) else { return true }
                do throws(JSONRPCError) {
                    receive(try JSONRPCMessage(parsing: Array(line.utf8)))
                    return true
                } catch {
                    garbage =
                        "it wrote something that is no MCP message on its standard output"
                        + " (\(error.message.prefix(200))): \(line.prefix(120))"
                    return false
                }
            }
            Glibc.close(output[0])
            let status = reap(child)
            // Its last words on stderr explain a crash best; they are all read once the pipe ends.
            _ = stderrDone.wait(timeout: .now() + .milliseconds(500))
            let tail = stderrTail.withLock { $0.last.map { " (its last words: \($0.prefix(300)))" } ?? "" }
            let reason = garbage ?? (ending.map { "its standard output \($0)" } ?? "it \(status)\(tail)")
            closed(reason)
        }
    }

    func send(_ message: JSONRPCMessage) async throws(SkillbusError) {
        guard let fd = process.withLock({ $0?.stdin }), fd >= 0 else {
            throw SkillbusError(.skillFailed, "MCP server '\(server)' is not running")
        }
        let bytes = message.encoded() + [UInt8(ascii: "\n")]
        writes.async { [self] in
            // Read again here: a close queued before this write has closed the descriptor.
            guard let fd = process.withLock({ $0?.stdin }), fd >= 0 else { return }
            var offset = 0
            while offset < bytes.count {
                let written = bytes[offset...].withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
                if written < 0 {
                    if errno == EINTR { continue }
                    return logger.warning(
                        "MCP server '\(server)': cannot write to it: \(String(cString: strerror(errno)))")
                }
                offset += written
            }
        }
    }

    /// Closes its standard input (after what is queued is written); the reader reaps it, terminating it when
    /// it does not leave by itself.
    func close() {
        guard
            !closedOnce.withLock({ flag in
                defer { flag = true }
                return flag
            })
        else { return }
        writes.async { [self] in
            process.withLock { entry in
                guard let fd = entry?.stdin, fd >= 0 else { return }
                Glibc.close(fd)
                entry?.stdin = -1
            }
        }
        // A server that does not leave when its input ends is made to, even while its output stays open.
        let timers = DispatchQueue.global()
        timers.asyncAfter(deadline: .now() + Self.graceAfterClose.dispatchInterval) { [self] in signal(SIGTERM) }
        timers.asyncAfter(deadline: .now() + (Self.graceAfterClose + Self.graceAfterTerm).dispatchInterval) {
            [self] in signal(SIGKILL)
        }
    }

    /// Signals the server's process group, unless it was reaped already (its pid may be someone else's).
    private func signal(_ number: Int32) {
        process.withLock { entry in
            guard let pid = entry?.pid, pid > 0 else { return }
            kill(-pid, number)
        }
    }

    /// Waits for the process after its stdout ended: a grace period, then SIGTERM to its group, then SIGKILL.
    /// The status in words ("exited with code 1", "was killed by signal 9").
    private func reap(_ pid: pid_t) -> String {
        close()
        let start = ContinuousClock.now
        var status: Int32 = 0
        var signalled = 0
        while waitpid(pid, &status, WNOHANG) == 0 {
            let waited = ContinuousClock.now - start
            if signalled == 0, waited >= Self.graceAfterClose {
                kill(-pid, SIGTERM)
                signalled = 1
            } else if signalled == 1, waited >= Self.graceAfterClose + Self.graceAfterTerm {
                kill(-pid, SIGKILL)
                signalled = 2
            }
            usleep(10_000)
        }
        kill(-pid, SIGKILL)  // whatever it left in its group goes with it
        process.withLock { $0 = (pid: 0, stdin: -1) }  // reaped: never signalled again
        let code = (status >> 8) & 0xFF
        let number = status & 0x7F
        return number == 0 ? "exited with code \(code)" : "was killed by signal \(number)"
    }

    /// Reads lines until end of file or until `line` returns false; nil at end of file, else why it stopped.
    @discardableResult
    private static func readLines(_ fd: Int32, limit: Int, _ line: (String) -> Bool) -> String? {
        var buffer: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 64 << 10)
        while true {
            let count = chunk.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
            if count < 0, errno == EINTR { continue }
            guard count > 0 else { return nil }
            var start = buffer.count
            buffer.append(contentsOf: chunk[0..<count])
            while let newline = buffer[start...].firstIndex(of: UInt8(ascii: "\n")) {
                guard line(String(decoding: buffer[..<newline], as: UTF8.self)) else { return "was refused" }
                buffer.removeSubrange(...newline)
                start = 0
            }
            if buffer.count > limit { return "held a line longer than \(limit) bytes" }
        }
    }

    private static func thread(_ name: String, _ body: @escaping @Sendable () -> Void) {
        let thread = Thread(block: body)
        thread.name = name
        thread.start()
    }

}

extension Duration {
    var dispatchInterval: DispatchTimeInterval {
        .nanoseconds(Int(components.seconds) * 1_000_000_000 + Int(components.attoseconds / 1_000_000_000))
    }
}
