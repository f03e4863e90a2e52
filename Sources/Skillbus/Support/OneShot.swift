import Synchronization

/// Awaits `body` until `deadline` and returns its value, or nil when the deadline came first. The body
/// runs in a task of its own, cancelled and left behind when late, so a body that hangs cannot hang its
/// caller; the wait goes on even when the caller is cancelled (a shutdown runs in a cancelled task).
func withDeadline<T: Sendable>(
    _ deadline: ContinuousClock.Instant, _ body: @escaping @Sendable () async -> T
) async -> T? {
    let first = OneShot<T?>()
    let work = Task { first.offer(await body()) }
    let timer = Task {
        try? await Task.sleep(until: deadline)
        first.offer(nil)
    }
    let value = await first.value()
    timer.cancel()
    if value == nil { work.cancel() }
    return value
}

/// `withDeadline` with a time limit from now.
func withDeadline<T: Sendable>(_ limit: Duration, _ body: @escaping @Sendable () async -> T) async -> T? {
    await withDeadline(.now + limit, body)
}

/// Holds the first value offered; later offers are ignored. One task awaits it.
final class OneShot<Value: Sendable>: Sendable {
    private enum State {
        case empty
        case waiting(CheckedContinuation<Value, Never>)
        case done(Value)
    }

    private let state = Mutex(State.empty)

    func offer(_ value: Value) {
        let waiter = state.withLock { state -> CheckedContinuation<Value, Never>? in
            switch state {
            case .done: return nil
            case .empty:
                state = .done(value)
                return nil
            case .waiting(let waiter):
                state = .done(value)
                return waiter
            }
        }
        waiter?.resume(returning: value)
    }

    /// The first value offered, as soon as there is one. Not ended by cancellation: whoever needs that
    /// offers a value from a cancellation handler.
    func value() async -> Value {
        await withCheckedContinuation { continuation in
            let ready = state.withLock { state -> Value? in
                if case .done(let value) = state { return value }
                state = .waiting(continuation)
                return nil
            }
            if let ready { continuation.resume(returning: ready) }
        }
    }
}
