import Synchronization
import Testing

@testable import Skillbus

/// A caller that gives up while its request goes out: its CANCEL must never reach the bus before the request,
/// or the bus finds nothing to cancel and then runs the request for nobody.
@Suite("Pending replies: giving up")
struct PendingRepliesTests {
    /// Registers `requestID`, runs `steps` while it waits, then ends its wait and returns the answer.
    private func waiting(
        _ pending: PendingReplies, _ requestID: String, _ steps: @escaping @Sendable () -> Void
    ) async -> PendingReplies.Answer {
        await withCheckedContinuation { continuation in
            #expect(pending.add(requestID, until: .now + .seconds(5), continuation))
            steps()
            pending.finish(requestID, with: .cancelled)
        }
    }

    @Test("given up before its message is out, the CANCEL goes right after it; after, at once")
    func cancelFollowsItsRequest() async {
        let pending = PendingReplies()
        _ = await waiting(pending, "early") {
            #expect(pending.giveUp("early", within: .seconds(1)) == .cancelAfterSend)
            #expect(pending.sent("early"))  // the sender sends the CANCEL now
        }
        _ = await waiting(pending, "late") {
            #expect(!pending.sent("late"))
            #expect(pending.giveUp("late", within: .seconds(1)) == .cancelNow)
        }
        #expect(pending.giveUp("unknown", within: .seconds(1)) == .notWaiting)
        #expect(!pending.sent("unknown"))
        #expect(pending.count == 0)
    }

    @Test("an exchange cancelled as it waits sends the CANCEL after its message; one cancelled before sends nothing")
    func exchangeCancelled() async throws {
        let pending = PendingReplies()
        let sent = SentLog()
        let waiting = Task {
            await pending.exchange(
                "r1", until: .now + .seconds(30), send: { sent.lines.withLock { $0.append("r1") } },
                cancel: { sent.lines.withLock { $0.append("cancel r1") } }, grace: nil)
        }
        let deadline = ContinuousClock.now + .seconds(10)
        while sent.lines.withLock({ $0.isEmpty }) {
            try #require(ContinuousClock.now < deadline, "the message was never sent")
            await Task.yield()
        }
        waiting.cancel()
        let answer = await waiting.value
        guard case .cancelled = answer else {
            Issue.record("ended \(answer), not cancelled")
            return
        }
        #expect(sent.lines.withLock { $0 } == ["r1", "cancel r1"])

        let early = Task {
            withUnsafeCurrentTask { $0?.cancel() }
            return await pending.exchange(
                "r2", until: .now + .seconds(30), send: { sent.lines.withLock { $0.append("r2") } },
                cancel: { sent.lines.withLock { $0.append("cancel r2") } }, grace: nil)
        }
        let earlyAnswer = await early.value
        guard case .cancelled = earlyAnswer else {
            Issue.record("ended \(earlyAnswer), not cancelled")
            return
        }
        #expect(sent.lines.withLock { $0 } == ["r1", "cancel r1"])  // nothing of r2 went to the bus
        #expect(pending.count == 0)
    }
}

/// What went to the bus, in order.
private final class SentLog: Sendable {
    let lines = Mutex<[String]>([])
}
