import Synchronization

/// One task waits; any thread wakes it. A wake with nobody waiting is kept for the next wait.
///
/// Every wait has a way out: a signal, its timeout, or cancellation of the waiting task. The timeout is
/// a child task of the wait, cancelled as soon as the wait ends another way: no timer outlives its wait.
final class Wakeup: Sendable {
    private struct State {
        var pending = false
        var waiter: (token: UInt64, continuation: CheckedContinuation<Void, Never>)?
        var nextToken: UInt64 = 0
        /// The wait whose cancellation came before it registered.
        var cancelledToken: UInt64?
    }

    private let state = Mutex(State())
    private let timers = Atomic<Int>(0)

    /// Timers running now; none once every wait has ended.
    var liveTimers: Int { timers.load(ordering: .relaxed) }

    func signal() {
        let waiter = state.withLock { state -> CheckedContinuation<Void, Never>? in
            guard let waiter = state.waiter else {
                state.pending = true
                return nil
            }
            state.waiter = nil
            return waiter.continuation
        }
        waiter?.resume()
    }

    /// Returns at the next signal (or at once if one is pending), after `timeout`, or when the calling
    /// task is cancelled.
    func wait(timeout: Duration?) async {
        guard let timeout else { return await waitForSignal() }
        await withTaskGroup(of: Void.self) { group in
            group.addTask { await self.waitForSignal() }
            group.addTask {
                self.timers.add(1, ordering: .relaxed)
                defer { self.timers.subtract(1, ordering: .relaxed) }
                try? await Task.sleep(for: timeout)
            }
            await group.next()
            group.cancelAll()
        }
    }

    private func waitForSignal() async {
        let token = state.withLock { state -> UInt64 in
            state.nextToken += 1
            return state.nextToken
        }
        await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                let now = state.withLock { state -> Bool in
                    if state.cancelledToken == token { return true }
                    if state.pending {
                        state.pending = false
                        return true
                    }
                    state.waiter = (token, continuation)
                    return false
                }
                if now { continuation.resume() }
            }
        } onCancel: {
            let waiter = state.withLock { state -> CheckedContinuation<Void, Never>? in
                guard let waiter = state.waiter, waiter.token == token else {
                    state.cancelledToken = token  // not registered yet: it returns as soon as it is
                    return nil
                }
                state.waiter = nil
                return waiter.continuation
            }
            waiter?.resume()
        }
    }
}
