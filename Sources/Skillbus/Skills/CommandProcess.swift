import Foundation
import SkillbusZMQ
import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

/// One run of a command skill's program: spawned with posix_spawn (no shell) in a process group of its
/// own, in a given directory with a given environment; its standard output read line by line, the last
/// lines of its standard error kept. Stopping it (cancel, timeout, too much output) signals the whole
/// group: SIGTERM, then SIGKILL after a grace period. When the program itself exits, whatever it left
/// running in its group is killed, so nothing outlives the invocation (a process that left the group
/// with setsid is beyond reach).
///
/// `run` blocks: it belongs on a thread of its own, never on Swift's cooperative pool.
final class CommandProcess: Sendable {
    struct Launch: Sendable {
        /// An absolute path: the program is never looked up here.
        var program: String
        /// argv, argv[0] included.
        var arguments: [String]
        /// `NAME=value` entries: the child's whole environment.
        var environment: [String]
        var directory: String
        /// Written to standard input, which is then closed; nil gives it /dev/null.
        var input: [UInt8]?
    }

    /// Why the run was stopped before the program ended by itself.
    enum Stop: Sendable, Equatable {
        case cancelled
        case timedOut
        /// The output handler refused a line, or standard output passed its limit.
        case failed(SkillbusError)
    }

    struct Ending: Sendable {
        /// `exited(code)` or `signalled(number)`, from the wait status.
        enum Status: Sendable, Equatable {
            case exited(Int32)
            case signalled(Int32)
        }
        var status: Status
        var stdout: [UInt8]
        var stderrTail: [String]
        var stopped: Stop?
    }

    static let graceAfterTerm: Duration = .seconds(1)
    static let stderrLines = 20
    /// A line longer than this is passed on in pieces of this size.
    static let longestLine = 64 << 10

    let pid: pid_t
    private let stdoutFD: Int32
    private let stderrFD: Int32
    private let stdinFD: Int32?
    private let input: [UInt8]
    private let wake: WakePipe
    private let stopRequest = Mutex<Stop?>(nil)

    private init(pid: pid_t, fds: (Int32, Int32, Int32?), input: [UInt8], wake: WakePipe) {
        self.pid = pid
        (stdoutFD, stderrFD, stdinFD) = fds
        self.input = input
        self.wake = wake
    }

    /// Starts the program; throws `command_failed` when it cannot be started (the errno's text in the
    /// message).
    static func spawn(_ launch: Launch) throws(SkillbusError) -> CommandProcess {
        _ = ignoreBrokenPipes
        let pipes: [[Int32]]
        switch ChildProcess.makePipes(launch.input == nil ? 2 : 3) {
        case .success(let made): pipes = made
        case .failure(let failure): throw failure.error(.commandFailed, "cannot make a pipe")
        }
        let wake: WakePipe
        do {
            wake = try WakePipe()
        } catch {
            for fd in pipes.joined() { close(fd) }
            throw SkillbusError(.commandFailed, "cannot start '\(launch.program)': \(error)")
        }
        let started = ChildProcess.start(
            launch.program, argv: launch.arguments, environment: launch.environment, directory: launch.directory,
            input: launch.input != nil ? pipes[2][0] : nil, output: pipes[0][1], errors: pipes[1][1])
        // The child's ends belong to the child now.
        close(pipes[0][1])
        close(pipes[1][1])
        if launch.input != nil { close(pipes[2][0]) }
        let pid: pid_t
        switch started {
        case .success(let started): pid = started
        case .failure(let failure):
            close(pipes[0][0])
            close(pipes[1][0])
            if launch.input != nil { close(pipes[2][1]) }
            wake.close()
            throw failure.error(.commandFailed, "cannot start '\(launch.program)'")
        }
        let parentEnds = [pipes[0][0], pipes[1][0]] + (launch.input != nil ? [pipes[2][1]] : [])
        for fd in parentEnds { _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK) }
        return CommandProcess(
            pid: pid, fds: (pipes[0][0], pipes[1][0], launch.input != nil ? pipes[2][1] : nil),
            input: launch.input ?? [], wake: wake)
    }

    /// Writing into a pipe whose reader is gone must be an error (EPIPE), not the agent's death.
    private static let ignoreBrokenPipes: Void = { signal(SIGPIPE, SIG_IGN) }()

    /// Asks `run` to stop the program: its group gets SIGTERM at once, SIGKILL after the grace period.
    /// The first reason given is the one reported.
    func stop(_ reason: Stop) {
        stopRequest.withLock { if $0 == nil { $0 = reason } }
        wake.wake()
    }

    /// Runs the program to its end: reads its output, hands each line of standard output to `onLine`
    /// (which may refuse it, and so stop the program), stops it at `deadline` or when asked, and reaps
    /// it. Blocks the calling thread.
    func run(
        deadline: ContinuousClock.Instant, maxStdoutBytes: Int,
        onLine: (String) throws(SkillbusError) -> Void
    ) -> Ending {
        var reader = OutputReader(maxStdoutBytes: maxStdoutBytes)
        var stopped: Stop?
        var termSent: ContinuousClock.Instant?
        var killed = false
        var status: Int32?
        var drainUntil: ContinuousClock.Instant?
        var open = (stdout: true, stderr: true)
        var stdinFD = self.stdinFD
        var written = 0
        var idleWait = 1
        defer {
            if open.stdout { close(stdoutFD) }
            if open.stderr { close(stderrFD) }
            if let stdinFD { close(stdinFD) }
            wake.close()
        }
        while true {
            let now = ContinuousClock.now
            if stopped == nil { stopped = stopRequest.withLock { $0 } ?? reader.refusal }
            if stopped == nil, now >= deadline { stopped = .timedOut }
            if stopped != nil, status == nil {
                if termSent == nil {
                    kill(-pid, SIGTERM)
                    termSent = now
                } else if !killed, let termSent, now - termSent >= Self.graceAfterTerm {
                    kill(-pid, SIGKILL)
                    killed = true
                }
            }
            if status == nil {
                var raw: Int32 = 0
                if waitpid(pid, &raw, WNOHANG) == pid {
                    status = raw
                    // The program is done: what it left running in its group goes with it.
                    kill(-pid, SIGKILL)
                    drainUntil = now + .seconds(1)
                }
            }
            if status != nil, !open.stdout && !open.stderr || drainUntil.map({ now >= $0 }) == true { break }

            var fds: [pollfd] = [pollfd(fd: wake.readEnd, events: Int16(POLLIN), revents: 0)]
            if open.stdout { fds.append(pollfd(fd: stdoutFD, events: Int16(POLLIN), revents: 0)) }
            if open.stderr { fds.append(pollfd(fd: stderrFD, events: Int16(POLLIN), revents: 0)) }
            if let stdinFD { fds.append(pollfd(fd: stdinFD, events: Int16(POLLOUT), revents: 0)) }
            // Between the pipes' end and the program's exit nothing wakes us: look again soon, then less often.
            var timeout = open.stdout || open.stderr ? 50 : idleWait
            if !(open.stdout || open.stderr) { idleWait = min(idleWait * 2, 50) }
            if stopped == nil {
                let left = deadline - now
                timeout = min(timeout, max(1, Int(left / .milliseconds(1)) + 1))
            }
            _ = Glibc.poll(&fds, nfds_t(fds.count), Int32(timeout))
            if fds[0].revents != 0 { wake.drain() }
            if open.stdout, !reader.read(stdoutFD, stdout: true, delivering: stopped == nil, to: onLine) {
                close(stdoutFD)
                open.stdout = false
            }
            if open.stderr, !reader.read(stderrFD, stdout: false, delivering: false, to: { _ throws(SkillbusError) in })
            {
                close(stderrFD)
                open.stderr = false
            }
            if let fd = stdinFD {
                let finished = input.withUnsafeBytes { bytes -> Bool in
                    while written < bytes.count {
                        let count = write(fd, bytes.baseAddress! + written, bytes.count - written)
                        if count > 0 {
                            written += count
                        } else {
                            // EAGAIN: later. EPIPE: the program does not read it; that is its business.
                            return count < 0 && errno != EAGAIN && errno != EINTR
                        }
                    }
                    return true
                }
                if finished {
                    close(fd)
                    stdinFD = nil
                }
            }
        }
        let raw = status ?? 0
        let ending: Ending.Status = raw & 0x7F == 0 ? .exited((raw >> 8) & 0xFF) : .signalled(raw & 0x7F)
        return Ending(status: ending, stdout: reader.stdout, stderrTail: reader.stderrTail, stopped: stopped)
    }
}

/// What the run reads: standard output whole (up to its limit) and split into lines, standard error's
/// last lines.
private struct OutputReader {
    let maxStdoutBytes: Int
    var stdout: [UInt8] = []
    var lineStart = 0
    var stderrLine: [UInt8] = []
    var stderrTail: [String] = []
    /// Set when a line was refused or standard output passed its limit: the run stops the program.
    var refusal: CommandProcess.Stop?
    private var buffer = [UInt8](repeating: 0, count: 64 << 10)

    init(maxStdoutBytes: Int) { self.maxStdoutBytes = maxStdoutBytes }

    /// Reads what is there; false at end of file (or on an error that ends the pipe).
    mutating func read(
        _ fd: Int32, stdout isStdout: Bool, delivering: Bool, to deliver: (String) throws(SkillbusError) -> Void
    ) -> Bool {
        while true {
            let count = buffer.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress, $0.count) }
            if count < 0 { return errno == EAGAIN || errno == EINTR }
            if count == 0 {
                if isStdout { flushLine(final: true, delivering, deliver) } else { endStderrLine() }
                return false
            }
            if isStdout {
                guard refusal == nil else { continue }  // stopping: drain, keep nothing
                // Up to the limit it is output like any other; the lines in it are passed on first.
                let kept = min(count, maxStdoutBytes - stdout.count)
                stdout.append(contentsOf: buffer[0..<kept])
                flushLine(final: false, delivering, deliver)
                if kept < count, refusal == nil {
                    refusal = .failed(
                        SkillbusError(
                            .outputTooLarge,
                            "the program wrote more than \(maxStdoutBytes) bytes to standard output; it was stopped",
                            details: ["limit": .number(Double(maxStdoutBytes))]))
                }
            } else {
                for byte in buffer[0..<count] {
                    if byte == UInt8(ascii: "\n") {
                        endStderrLine()
                    } else if stderrLine.count < 500 {
                        stderrLine.append(byte)
                    }
                }
            }
        }
    }

    /// Hands on every complete line (and, at the end, the last one without its line end).
    private mutating func flushLine(
        final: Bool, _ delivering: Bool, _ deliver: (String) throws(SkillbusError) -> Void
    ) {
        var index = lineStart
        while index < stdout.count {
            if stdout[index] == UInt8(ascii: "\n") || index - lineStart >= CommandProcess.longestLine {
                let end = stdout[index] == UInt8(ascii: "\n") ? index + 1 : index
                send(stdout[lineStart..<index], delivering, deliver)
                lineStart = end
                index = end
            } else {
                index += 1
            }
        }
        if final && lineStart < stdout.count {
            send(stdout[lineStart...], delivering, deliver)
            lineStart = stdout.count
        }
    }

    private mutating func send(
        _ line: ArraySlice<UInt8>, _ delivering: Bool, _ deliver: (String) throws(SkillbusError) -> Void
    ) {
        guard delivering, refusal == nil else { return }
        do throws(SkillbusError) {
            try deliver(String(decoding: line, as: UTF8.self))
        } catch {
            refusal = .failed(error)
        }
    }

    private mutating func endStderrLine() {
        guard !stderrLine.isEmpty else { return }
        stderrTail.append(String(decoding: stderrLine, as: UTF8.self))
        if stderrTail.count > CommandProcess.stderrLines { stderrTail.removeFirst() }
        stderrLine.removeAll(keepingCapacity: true)
    }
}
