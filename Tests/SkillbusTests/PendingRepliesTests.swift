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
}
