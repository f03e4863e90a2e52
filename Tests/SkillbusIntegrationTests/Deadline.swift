import Synchronization

/// Awaits `body` for at most `limit` and returns its value, or nil when time ran out first. The body runs
/// in a task of its own that is cancelled and left behind when late, so a body that hangs (the bug a test
/// looks for) fails the test instead of hanging it.
func withDeadline<T: Sendable>(_ limit: Duration, _ body: @escaping @Sendable () async -> T) async -> T? {
    let first = FirstValue<T?>()
    let work = Task { first.offer(await body()) }
    let timer = Task {
        try? await Task.sleep(for: limit)
        first.offer(nil)
    }
    let value = await first.value()
    timer.cancel()
    if value == nil { work.cancel() }
    return value
}

/// Holds the first value offered; later offers are ignored. One task awaits it.
final class FirstValue<T: Sendable>: Sendable {
    private enum State {
        case empty
        case waiting(CheckedContinuation<T, Never>)
        case done(T)
    }

    private let state = Mutex(State.empty)

    func offer(_ value: T) {
        let waiter = state.withLock { state -> CheckedContinuation<T, Never>? in
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

    func value() async -> T {
        await withCheckedContinuation { continuation in
            let ready = state.withLock { state -> T? in
                if case .done(let value) = state { return value }
                state = .waiting(continuation)
                return nil
            }
            if let ready { continuation.resume(returning: ready) }
        }
    }
}
