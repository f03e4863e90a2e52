import Foundation
import SkillbusZMQ
import Testing

@testable import Skillbus

/// The coordinator's edges without sockets: which worker a closed connection was, and which feed
/// subscriptions take effect. And the receive limits on a real inproc socket pair.
@Suite("Connection and subscription edges")
struct EdgeLimitsTests {
    let alpha: PeerID = [1, 2, 3]
    let beta: PeerID = [4, 5, 6]

    @Test("a closed descriptor makes its last worker a suspect; lost only when unreachable")
    func closedDescriptor() {
        var tracker = DisconnectTracker()
        tracker.heard(worker: alpha, on: 7)
        tracker.heard(worker: beta, on: 9)
        tracker.closed(8, now: 0)
        #expect(!tracker.hasSuspects)  // nobody was heard on 8
        tracker.closed(7, now: 10)
        #expect(tracker.hasSuspects)
        // Its pipe is still open a moment after the event: stays a suspect.
        #expect(tracker.confirm(now: 20) { _ in true } == [])
        #expect(tracker.hasSuspects)
        #expect(tracker.confirm(now: 30) { $0 != alpha } == [alpha])
        #expect(!tracker.hasSuspects)
        // Descriptor 7 is forgotten with it: a second close names nobody.
        tracker.closed(7, now: 40)
        #expect(!tracker.hasSuspects)
    }

    @Test("a suspect the bus still reaches after a second is forgiven (its descriptor went to a live worker)")
    func reusedDescriptor() {
        var tracker = DisconnectTracker()
        tracker.heard(worker: beta, on: 7)  // beta got descriptor 7 before alpha's close was read
        tracker.closed(7, now: 0)
        #expect(tracker.confirm(now: DisconnectTracker.suspicionNanos / 2) { _ in true } == [])
        #expect(tracker.hasSuspects)
        #expect(tracker.confirm(now: DisconnectTracker.suspicionNanos + 1) { _ in true } == [])
        #expect(!tracker.hasSuspects)
        tracker.heard(worker: alpha, on: -1)  // no descriptor (not TCP): nothing to track
        tracker.closed(-1, now: 0)
        #expect(!tracker.hasSuspects)
    }

    @Test("feed subscriptions: short ones applied and counted by holder, long ones refused, strays ignored")
    func subscriptions() {
        var feed = FeedSubscriptions()
        let agent = Array("agent.".utf8)
        #expect(feed.receive([1] + agent) == .subscribe([agent]))
        #expect(feed.receive([1] + agent) == .subscribe([agent]))
        #expect(feed.wants(Array("agent.left".utf8)))
        #expect(!feed.wants(Array("round.done".utf8)))
        #expect(!feed.wantsRequestEvents && !feed.wantsRoundEvents)
        let invocation = Array("invocation.done".utf8)
        #expect(feed.receive([1] + invocation) == .subscribe([invocation]))
        #expect(feed.wantsRoundEvents && !feed.wantsRequestEvents)
        #expect(feed.receive([0] + invocation) == .unsubscribe([invocation]))
        #expect(!feed.wantsRoundEvents)
        let long = [UInt8](repeating: UInt8(ascii: "x"), count: Wire.maxSubscriptionBytes + 1)
        #expect(feed.receive([1] + long) == .refused(bytes: Wire.maxSubscriptionBytes + 1))
        #expect(feed.receive([0] + long) == .ignored)
        let exact = [UInt8](repeating: UInt8(ascii: "x"), count: Wire.maxSubscriptionBytes)
        #expect(feed.receive([1] + exact) == .subscribe([exact]))
        #expect(feed.receive([0] + agent) == .unsubscribe([agent]))
        #expect(feed.wants(Array("agent.left".utf8)))  // the second holder still has it
        #expect(feed.receive([0] + agent) == .unsubscribe([agent]))
        #expect(!feed.wants(Array("agent.left".utf8)))
        #expect(feed.receive([0] + agent) == .ignored)  // nobody holds it any more
        #expect(feed.receive([7, 1]) == .ignored)
        #expect(feed.receive([]) == .ignored)
        // Everything: every topic's root, never the batches' "+".
        #expect(feed.receive([1]) == .subscribe(FeedSubscriptions.topicRoots))
        #expect(feed.wantsRequestEvents && feed.wantsRoundEvents)
        #expect(feed.batches(taking: Array("round.done".utf8)).isEmpty)
        #expect(feed.receive([0]) == .unsubscribe(FeedSubscriptions.topicRoots))
    }

    @Test("\"\" and a root held together: giving up either leaves what the other applies")
    func everythingBesideARoot() {
        var feed = FeedSubscriptions()
        let agent = Array("agent.".utf8)
        #expect(feed.receive([1]) == .subscribe(FeedSubscriptions.topicRoots))
        #expect(feed.receive([1] + agent) == .subscribe([agent]))
        // "" goes: every root but the one still held.
        #expect(feed.receive([0]) == .unsubscribe(FeedSubscriptions.topicRoots.filter { $0 != agent }))
        #expect(feed.wants(Array("agent.state".utf8)) && !feed.wants(Array("round.done".utf8)))
        // The other order: the root goes while "" holds it, so it stays; then "" takes everything.
        #expect(feed.receive([1]) == .subscribe(FeedSubscriptions.topicRoots))
        #expect(feed.receive([0] + agent) == .ignored)
        #expect(feed.wants(Array("agent.state".utf8)))
        #expect(feed.receive([0]) == .unsubscribe(FeedSubscriptions.topicRoots))
        #expect(feed.isEmpty)
    }

    @Test("batch subscriptions: + PREFIX NUL applied as they are, each batch named by its subscription")
    func batchSubscriptions() {
        var feed = FeedSubscriptions()
        let all: [UInt8] = [UInt8(ascii: "+"), 0]
        let rounds = Array("+round.".utf8) + [0]
        #expect(feed.receive([1] + all) == .subscribe([all]))
        #expect(feed.receive([1] + rounds) == .subscribe([rounds]))
        #expect(!feed.isEmpty && !feed.wants(Array("round.done".utf8)))
        #expect(feed.wantsRoundEvents && feed.wantsRequestEvents)
        #expect(Set(feed.batches(taking: Array("round.done".utf8))) == [all, rounds])
        #expect(feed.batches(taking: Array("agent.state".utf8)) == [all])
        #expect(feed.receive([0] + all) == .unsubscribe([all]))
        #expect(feed.batches(taking: Array("agent.state".utf8)).isEmpty && !feed.wantsRequestEvents)
        #expect(feed.receive([0] + all) == .ignored)
        // A "+" without its NUL would take every batch and no event: never applied.
        #expect(feed.receive([1, UInt8(ascii: "+")]) == .ignored)
        #expect(feed.receive([1] + Array("+agent.".utf8)) == .ignored)
        #expect(feed.receive([0] + rounds) == .unsubscribe([rounds]))
        #expect(feed.isEmpty)
    }

    @Test("every topic of PROTOCOL §7 starts with a root the empty subscription takes")
    func topicRoots() throws {
        let protocolText = try String(
            contentsOf: URL(fileURLWithPath: #filePath).deletingLastPathComponent()
                .appendingPathComponent("../../docs/PROTOCOL.md"), encoding: .utf8)
        let section = try #require(protocolText.components(separatedBy: "\n## 7 Feed").last?
            .components(separatedBy: "\n## 8 ").first)
        let topics = section.split(separator: "\n").filter { $0.hasPrefix("| `") }.compactMap {
            $0.dropFirst(3).split(separator: "`").first.map(String.init)
        }
        #expect(topics.count > 30)
        for topic in topics {
            #expect(FeedSubscriptions.topicRoots.contains { Array(topic.utf8).starts(with: $0) }, "\(topic)")
        }
    }

    @Test("receive limits: frames past them are read and dropped, and the counts say how big it was")
    func receiveLimits() throws {
        let context = try ZMQContext()
        let server = try ZMQSocket(context: context, type: .pair)
        try server.bind("inproc://edge-limits")
        let peer = try ZMQSocket(context: context, type: .pair)
        try peer.connect("inproc://edge-limits")
        let limits = ReceiveLimits(frames: 4, bytes: 100)
        try peer.send((0..<10).map { [UInt8](repeating: $0, count: 30) })
        try peer.send([[1], [2]])
        let big = try #require(try server.receive(limits: limits, readUserID: false))
        #expect(big.overLimit && big.frameCount == 10 && big.byteCount == 300)
        #expect(big.frames.count == 3)  // the fourth frame passed 100 bytes
        let small = try #require(try server.receive(limits: limits, readUserID: false))
        #expect(!small.overLimit && small.frames == [[1], [2]] && small.frameCount == 2)
        let many = (0..<6).map { _ in [UInt8]() }
        try peer.send(many)
        let counted = try #require(try server.receive(limits: limits, readUserID: false))
        #expect(counted.overLimit && counted.frames.count == 4 && counted.frameCount == 6)
        server.close()
        peer.close()
    }
}
