import Foundation
import Synchronization

/// A cheap logger value: a label plus a minimum level. Lines go to its sink whole, one at a time: by
/// default standard error; a test or a program can hand in its own (`Logger.Sink`).
public struct Logger: Sendable {
    /// Where whole log lines go (each ends with a newline); called under the logger's lock, so keep it short.
    public typealias Sink = @Sendable (String) -> Void

    public static let standardError: Sink = { line in FileHandle.standardError.write(Data(line.utf8)) }

    public enum Level: Int, Sendable, Comparable {
        case debug, info, warning, error
        public static func < (lhs: Level, rhs: Level) -> Bool { lhs.rawValue < rhs.rawValue }
        var name: String {
            switch self {
            case .debug: "debug"
            case .info: "info"
            case .warning: "warning"
            case .error: "error"
            }
        }
    }

    public var label: String
    public var level: Level
    public var sink: Sink

    public init(label: String, level: Level = .info, sink: @escaping Sink = Logger.standardError) {
        self.label = label
        self.level = level
        self.sink = sink
    }

    /// One line at a time, whichever logger writes it.
    private static let lock = Mutex(())

    public func log(_ level: Level, _ message: @autoclosure () -> String) {
        guard level >= self.level else { return }
        let line = "\(FeedEvent.timestamp(Date())) \(level.name) \(label): \(message())\n"
        Logger.lock.withLock { _ in sink(line) }
    }

    public func debug(_ message: @autoclosure () -> String) { log(.debug, message()) }
    public func info(_ message: @autoclosure () -> String) { log(.info, message()) }
    public func warning(_ message: @autoclosure () -> String) { log(.warning, message()) }
    public func error(_ message: @autoclosure () -> String) { log(.error, message()) }
}
