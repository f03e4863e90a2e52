import Dispatch
import Foundation
import Synchronization
import Skillbus

/// SIGINT and SIGTERM (and optionally others) as an async sequence.
///
/// Each signal gets a handler of our own at once (`sigaction`), which writes its number to a pipe that one
/// thread reads. (A DispatchSource set the signal to SIG_IGN first and blocked it only on the thread that
/// registered it, later: a SIGTERM that came in between was dropped, and the process never stopped.)
public final class SignalWatcher: Sendable {
    public let signals: AsyncStream<Int32>

    /// The signals that stop a command. A child of `skillbus up` stops on SIGTERM only: Ctrl-C reaches the
    /// whole process group, and `up` must stop its children itself, workers first.
    public static var stopSignals: [Int32] {
        if ProcessInfo.processInfo.environment["SKILLBUS_SUPERVISOR_PID"] != nil {
            signal(SIGINT, SIG_IGN)
            return [SIGTERM]
        }
        return [SIGINT, SIGTERM]
    }

    public init(_ numbers: [Int32] = SignalWatcher.stopSignals) {
        let (stream, continuation) = AsyncStream.makeStream(of: Int32.self)
        signals = stream
        SignalPipe.shared.watch(numbers, continuation)
    }
}

/// Where the handler writes: the pipe's write end, set once before any handler is installed.
private let signalWriteEnd = Atomic<Int32>(-1)

/// The process's one signal pipe: the handler writes a byte per signal (write is async-signal-safe), and a
/// thread of its own, blocked on the read end for the process's life, hands each to its watchers.
private final class SignalPipe: Sendable {
    static let shared = SignalPipe()
    private let watchers = Mutex<[Int32: [AsyncStream<Int32>.Continuation]]>([:])

    private init() {
        var ends: [Int32] = [-1, -1]
        guard pipe(&ends) == 0 else { fatalError("pipe for signals: errno \(errno)") }
        for end in ends { _ = fcntl(end, F_SETFD, FD_CLOEXEC) }
        signalWriteEnd.store(ends[1], ordering: .releasing)
        let readEnd = ends[0]
        let thread = Thread { [self] in
            var byte: UInt8 = 0
            while true {
                let count = read(readEnd, &byte, 1)
                if count < 0 && errno == EINTR { continue }
                guard count == 1 else { return }
                let number = Int32(byte)
                for continuation in self.watchers.withLock({ $0[number] ?? [] }) { continuation.yield(number) }
            }
        }
        thread.name = "skillbus-signals"
        thread.start()
    }

    func watch(_ numbers: [Int32], _ continuation: AsyncStream<Int32>.Continuation) {
        watchers.withLock { table in
            for number in numbers { table[number, default: []].append(continuation) }
        }
        for number in numbers {
            var action = sigaction()
            action.__sigaction_handler.sa_handler = { number in
                let saved = errno
                var byte = UInt8(truncatingIfNeeded: number)
                _ = write(signalWriteEnd.load(ordering: .acquiring), &byte, 1)
                errno = saved
            }
            action.sa_flags = SA_RESTART
            sigemptyset(&action.sa_mask)
            sigaction(number, &action, nil)
        }
    }
}

/// A service made of a closure: a command's own loop (printing the feed, reloading on SIGHUP).
struct FunctionService: Service {
    let body: @Sendable () async throws -> Void

    init(_ body: @escaping @Sendable () async throws -> Void) { self.body = body }

    func run() async throws { try await body() }
}

/// How every command runs its long-lived parts: `services` run until the first signal `signals` watches
/// (SIGINT and SIGTERM; SIGTERM only in a child of `skillbus up`, see `SignalWatcher.stopSignals`) or
/// until one of them stops by itself. Then they are cancelled, the last started first, and awaited for
/// at most `grace` in all. `onSignal` hears the stop signal as it arrives, before the shutdown.
@discardableResult
func runUntilStopped(
    _ services: [any Service], signals: SignalWatcher, grace: Duration = .seconds(4), logger: Logger? = nil,
    onSignal: @escaping @Sendable (Int32) -> Void = { _ in }
) async throws -> ServiceGroup.Outcome {
    let announced = signals.signals.map { number -> Int32 in
        onSignal(number)
        return number
    }
    return try await ServiceGroup(services: services, gracePeriod: grace, logger: logger).run(until: announced)
}

/// Runs `work` until it ends; a stop signal (SIGINT, SIGTERM) cancels it on the way. Returns its value, and
/// the exit code the signal asks for (128 + its number: 130 for Ctrl-C, as shells expect) when one came.
func cancellingOnSignal<Value: Sendable>(
    _ work: @escaping @Sendable () async -> Value
) async -> (value: Value, signalExit: Int32?) {
    let signals = SignalWatcher()
    let task = Task { await work() }
    let watcher = Task { () -> Int32? in
        for await number in signals.signals {
            task.cancel()
            return 128 + number
        }
        return nil
    }
    let value = await task.value
    if task.isCancelled { return (value, await watcher.value) }
    watcher.cancel()
    return (value, nil)
}
