import Foundation
import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

/// A child process started with posix_spawn (`start`), waited for on a thread of its own.
///
/// Foundation's `Process` is not used to start programs: its `run()` (Swift 6.3.1 on Linux) copies each
/// entry's 256-byte name while it reads /proc/self/fd, which reads past glibc's buffer now and then and
/// kills the calling process with SIGSEGV (swift-corelibs-foundation #5472) — more often the more
/// descriptors the process holds.
public final class ChildProcess: Sendable {
    /// How a child ended.
    public enum Termination: Sendable, Equatable {
        case exited(Int32)
        case signalled(Int32)

        /// The exit code, or the number of the signal that ended it (as Foundation's `terminationStatus`).
        public var status: Int32 {
            switch self {
            case .exited(let code), .signalled(let code): code
            }
        }

        /// From a wait status.
        init(waitStatus raw: Int32) {
            self = raw & 0x7F == 0 ? .exited((raw >> 8) & 0xFF) : .signalled(raw & 0x7F)
        }
    }

    public let pid: pid_t
    private let state = Mutex(State())

    private struct State {
        var termination: Termination?
        var waiters: [CheckedContinuation<Termination, Never>] = []
        /// Threads blocked in `waitUntilExit`.
        var blocked: [DispatchSemaphore] = []
    }

    private init(pid: pid_t) { self.pid = pid }

    /// Starts `executable` (a path; it is not looked up) with `arguments` after it and exactly `environment`,
    /// in `directory` (nil: ours). Its standard input, output and error are the descriptors given (nil:
    /// /dev/null); the caller closes its copies of them afterwards. `onExit` runs once, on a thread of its
    /// own, when the child has ended. Throws when it cannot be started, with the system's reason.
    public static func spawn(
        _ executable: String, _ arguments: [String], environment: [String: String], directory: String? = nil,
        input: Int32? = nil, output: Int32? = nil, errors: Int32? = nil,
        onExit: @escaping @Sendable (Termination) -> Void = { _ in }
    ) throws -> ChildProcess {
        let pid: pid_t
        switch Self.start(
            executable, argv: [executable] + arguments, environment: environment.map { "\($0.key)=\($0.value)" },
            directory: directory, input: input, output: output, errors: errors)
        {
        case .success(let started): pid = started
        case .failure(let failure):
            throw SkillbusError(.internalError, "cannot start '\(executable)': \(failure)")
        }
        let child = ChildProcess(pid: pid)
        let waiter = Thread { child.awaitExit(onExit) }
        waiter.name = "skillbus-child-\(pid)"
        waiter.start()
        return child
    }

    /// Why a program could not be started.
    enum StartFailure: Error, CustomStringConvertible {
        /// The C library cannot start a program in another directory (posix_spawn_file_actions_addchdir_np).
        case noDirectoryChange
        case system(Int32)

        var description: String {
            switch self {
            case .noDirectoryChange: "this C library cannot start a program in another directory"
            case .system(let code): String(cString: strerror(code))
            }
        }

        /// As the caller reports it: `code`, "what: why", and the errno in the details when the system said no.
        func error(_ code: SkillbusError.Code, _ what: String) -> SkillbusError {
            guard case .system(let number) = self else { return SkillbusError(code, "\(what): \(self)") }
            return SkillbusError(code, "\(what): \(self)", details: ["errno": .number(Double(number))])
        }
    }

    /// posix_spawn as every program Skillbus starts is started: `program` (a path, or with `searchingPath` a
    /// name looked up in PATH as a shell would) with `argv` (argv[0] included) and exactly `environment`
    /// (`NAME=value`), in `directory` (nil: ours), in a process group of its own, with the default handling of
    /// every signal we may ignore or catch, nothing blocked, and no descriptor of ours but the three given (nil:
    /// /dev/null). The caller waits for it.
    static func start(
        _ program: String, argv: [String], environment: [String], directory: String?, input: Int32?, output: Int32?,
        errors: Int32?, searchingPath: Bool = false
    ) -> Result<pid_t, StartFailure> {
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        for (descriptor, target) in [(input, Int32(0)), (output, 1), (errors, 2)] {
            if let descriptor {
                posix_spawn_file_actions_adddup2(&actions, descriptor, target)
            } else {
                posix_spawn_file_actions_addopen(&actions, target, "/dev/null", target == 0 ? O_RDONLY : O_WRONLY, 0)
            }
        }
        if let directory {
            guard let addChdir = SpawnExtensions.addChdir else { return .failure(.noDirectoryChange) }
            _ = addChdir(&actions, directory)
        }
        if let addClosefrom = SpawnExtensions.addClosefrom { _ = addClosefrom(&actions, 3) }

        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        // Its own group: a terminal's Ctrl-C reaches the parent alone, which stops its children itself, and a
        // command skill's whole group can be signalled.
        posix_spawnattr_setflags(
            &attributes, Int16(POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK))
        posix_spawnattr_setpgroup(&attributes, 0)
        var defaults = sigset_t()
        sigemptyset(&defaults)
        for number in [SIGPIPE, SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGALRM, SIGCHLD, SIGWINCH] {
            sigaddset(&defaults, number)
        }
        posix_spawnattr_setsigdefault(&attributes, &defaults)
        var mask = sigset_t()
        sigemptyset(&mask)
        posix_spawnattr_setsigmask(&attributes, &mask)

        let argv = argv.map { strdup($0) } + [nil]
        let envp = environment.map { strdup($0) } + [nil]
        defer {
            for pointer in argv { free(pointer) }
            for pointer in envp { free(pointer) }
        }
        var pid: pid_t = 0
        let result =
            searchingPath
            ? posix_spawnp(&pid, program, &actions, &attributes, argv, envp)
            : posix_spawn(&pid, program, &actions, &attributes, argv, envp)
        return result == 0 ? .success(pid) : .failure(.system(result))
    }

    /// Runs `executable` to its end with our environment, its output discarded, and tells how it ended; nil
    /// when it could not be started. Blocks: for synchronous callers only.
    public static func run(_ executable: String, _ arguments: [String]) -> Termination? {
        let child = try? spawn(executable, arguments, environment: ProcessInfo.processInfo.environment)
        return child?.waitUntilExit()
    }

    /// `count` pipes, each [read end, write end], none inherited by programs started later: a child that held
    /// another child's write end open would keep that one's reader from ever seeing the end. When one cannot be
    /// made, none is left open.
    public static func pipes(_ count: Int) throws -> [[Int32]] {
        switch makePipes(count) {
        case .success(let made): made
        case .failure(let failure): throw failure.error(.internalError, "cannot make a pipe")
        }
    }

    /// The same, with the system's reason for callers that report it in their own terms.
    static func makePipes(_ count: Int) -> Result<[[Int32]], StartFailure> {
        var made: [[Int32]] = []
        for _ in 0..<count {
            var ends: [Int32] = [-1, -1]
            guard Glibc.pipe(&ends) == 0 else {
                let code = errno
                for end in made.joined() { close(end) }
                return .failure(.system(code))
            }
            for end in ends { _ = fcntl(end, F_SETFD, FD_CLOEXEC) }
            made.append(ends)
        }
        return .success(made)
    }

    /// Waits for the child on its own thread. The exit is seen first and the child reaped after, so that
    /// `signal` never reaches a process that took over its pid.
    private func awaitExit(_ onExit: @Sendable (Termination) -> Void) {
        var info = siginfo_t()
        while waitid(P_PID, id_t(pid), &info, WEXITED | WNOWAIT) == -1 && errno == EINTR {}
        var raw: Int32 = 0
        let termination = state.withLock { state -> Termination in
            while waitpid(pid, &raw, 0) == -1 && errno == EINTR {}
            let termination = Termination(waitStatus: raw)
            state.termination = termination
            return termination
        }
        onExit(termination)
        let (waiters, blocked) = state.withLock { state in
            defer { (state.waiters, state.blocked) = ([], []) }
            return (state.waiters, state.blocked)
        }
        for waiter in waiters { waiter.resume(returning: termination) }
        for thread in blocked { thread.signal() }
    }

    /// How it ended; nil while it runs.
    public var termination: Termination? { state.withLock { $0.termination } }

    public var isRunning: Bool { termination == nil }

    /// Sends `number` to the child, unless it has ended already.
    public func signal(_ number: Int32) {
        state.withLock { state in
            if state.termination == nil { kill(pid, number) }
        }
    }

    /// Waits until it has ended. Awaits; never blocks a thread.
    public func exited() async -> Termination {
        await withCheckedContinuation { continuation in
            let termination = state.withLock { state -> Termination? in
                if state.termination == nil { state.waiters.append(continuation) }
                return state.termination
            }
            if let termination { continuation.resume(returning: termination) }
        }
    }

    /// Blocks the calling thread until it has ended: for synchronous callers only, never on the cooperative pool.
    @discardableResult
    public func waitUntilExit() -> Termination {
        let done = DispatchSemaphore(value: 0)
        if let termination = state.withLock({ state -> Termination? in
            if state.termination == nil { state.blocked.append(done) }
            return state.termination
        }) {
            return termination
        }
        done.wait()
        return termination ?? .exited(-1)
    }
}

/// GNU additions to posix_spawn that Swift's Glibc module does not show, looked up once at run time.
enum SpawnExtensions {
    typealias AddChdir =
        @convention(c) (UnsafeMutablePointer<posix_spawn_file_actions_t>, UnsafePointer<CChar>) -> Int32
    typealias AddClosefrom = @convention(c) (UnsafeMutablePointer<posix_spawn_file_actions_t>, Int32) -> Int32

    static let addChdir: AddChdir? = symbol("posix_spawn_file_actions_addchdir_np")
    static let addClosefrom: AddClosefrom? = symbol("posix_spawn_file_actions_addclosefrom_np")

    private static func symbol<Function>(_ name: String) -> Function? {
        guard let pointer = dlsym(dlopen(nil, RTLD_NOW), name) else { return nil }
        return unsafeBitCast(pointer, to: Function.self)
    }
}
