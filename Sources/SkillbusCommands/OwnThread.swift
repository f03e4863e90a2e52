import Foundation

/// Blocking work (a load loop, `zmq_proxy`, blocking receives) on a thread of its own, never on the
/// cooperative pool, whose few threads it would hold.
public enum OwnThread {
    public static func run<T: Sendable>(_ work: @escaping @Sendable () throws -> T) async throws -> T {
        try await withCheckedThrowingContinuation { continuation in
            Thread { continuation.resume(with: Result { try work() }) }.start()
        }
    }
}
