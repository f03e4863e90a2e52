import Dispatch
import Foundation

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

    /// Waits for the first signal.
    public func next() async -> Int32? {
        for await number in signals { return number }
        return nil
    }
}
