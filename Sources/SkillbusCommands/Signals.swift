import Dispatch
import Foundation
import Skillbus

/// SIGINT and SIGTERM (and optionally others) as an async sequence, through DispatchSource.
// The dispatch sources are only kept alive here, never touched after init.
public final class SignalWatcher: @unchecked Sendable {
    public let signals: AsyncStream<Int32>
    private let sources: [any DispatchSourceSignal]

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
        sources = numbers.map { number in
            signal(number, SIG_IGN)  // let the dispatch source, not the default action, handle it
            let source = DispatchSource.makeSignalSource(signal: number, queue: .global())
            source.setEventHandler { continuation.yield(number) }
            source.resume()
            return source
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
