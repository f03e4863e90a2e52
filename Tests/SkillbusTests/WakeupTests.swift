import Testing

@testable import Skillbus

@Suite("Wakeup: every wait has a way out, and no timer outlives its wait")
struct WakeupTests {
    /// Waits (yielding, with a deadline) until the wait has started its timer.
    func timerStarted(_ wakeup: Wakeup) async -> Bool {
        await withDeadline(.seconds(10)) {
            while wakeup.liveTimers == 0 { await Task.yield() }
            return true
        } == true
    }

    @Test("a signal ends a wait with a long timeout, and its timer with it")
    func signalCancelsTimer() async {
        let wakeup = Wakeup()
        let waiting = Task { await wakeup.wait(timeout: .seconds(3600)) }
        #expect(await timerStarted(wakeup))
        wakeup.signal()
        #expect(await withDeadline(.seconds(10)) { await waiting.value } != nil)
        #expect(wakeup.liveTimers == 0)
    }

    @Test("cancelling the waiting task ends the wait at once, with or without a timeout")
    func cancellationEndsWait() async {
        let wakeup = Wakeup()
        let timed = Task { await wakeup.wait(timeout: .seconds(3600)) }
        #expect(await timerStarted(wakeup))
        timed.cancel()
        #expect(await withDeadline(.seconds(10)) { await timed.value } != nil)
        #expect(wakeup.liveTimers == 0)

        let untimed = Task { await wakeup.wait(timeout: nil) }
        untimed.cancel()
        #expect(await withDeadline(.seconds(10)) { await untimed.value } != nil)
    }

    @Test("a signal with nobody waiting is kept for the next wait; the timeout still ends a wait")
    func pendingAndTimeout() async {
        let wakeup = Wakeup()
        wakeup.signal()
        #expect(await withDeadline(.seconds(10)) { await wakeup.wait(timeout: nil) } != nil)
        #expect(await withDeadline(.seconds(10)) { await wakeup.wait(timeout: .milliseconds(1)) } != nil)
        #expect(wakeup.liveTimers == 0)
    }
}
