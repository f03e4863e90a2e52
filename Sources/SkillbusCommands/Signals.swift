import Dispatch
import Foundation

/// SIGINT and SIGTERM (and optionally others) as an async sequence, through DispatchSource.
// The dispatch sources are only kept alive here, never touched after init.
public final class SignalWatcher: @unchecked Sendable {
    public let signals: AsyncStream<Int32>
    private let sources: [any DispatchSourceSignal]

    public init(_ numbers: [Int32] = [SIGINT, SIGTERM]) {
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
