import Foundation
import Skillbus
import SkillbusZMQ
import Testing

/// The result cache with real processes: a worker makes echo pure with a lifetime; the second round of the
/// same invocation is answered by the bus without running it, and --no-cache runs it.
@Suite("Result cache across rounds", .serialized, .timeLimit(.minutes(2)))
struct CacheClusterTests {
    @Test("two rounds of a pure echo: the worker runs it once, the feed and the document say cached; --no-cache runs it")
    func acrossRounds() async throws {
        let cluster = try await TestCluster()
        defer { cluster.terminate() }
        try await cluster.startWorker("pure", ["--skills", "echo", "--policy", #"echo={"pure":true,"cacheMs":60000}"#])
        let context = try ZMQContext()
        let feed = try await FeedSubscriber.connect(
            endpoint: cluster.feed, topics: ["invocation.", "registry.heartbeat"], context: context)
        defer { feed.close() }
        var events = feed.events.makeAsyncIterator()
        _ = try await events.next()  // the subscription is in place

        let (firstCode, first) = try await cluster.sendJSON(["echo", "text=hello"])
        #expect(firstCode == 0 && first["invocations"]?.arrayValue?.first?["cached"] == nil)
        let (secondCode, second) = try await cluster.sendJSON(["echo", "text=hello"])
        let cached = second["invocations"]?.arrayValue?.first
        #expect(secondCode == 0 && second["status"] == "ok" && cached?["cached"] == true)
        #expect(cached?["agent"] == "pure" && second["result"] == first["result"])
        let (thirdCode, third) = try await cluster.sendJSON(["echo", "text=hello", "--no-cache"])
        #expect(thirdCode == 0 && third["invocations"]?.arrayValue?.first?["cached"] == nil)

        // On the feed: dispatched for the first and the third, cached for the second, in that order.
        var seen: [String] = []
        while seen.count < 3, let (topic, _) = try await events.next() {
            if topic == "invocation.dispatched" || topic == "invocation.cached" { seen.append(topic) }
        }
        #expect(seen == ["invocation.dispatched", "invocation.cached", "invocation.dispatched"])
        let listing = try await cluster.agents()
        #expect(listing["cache"]?["entries"] == 1 && listing["cache"]?["hits"] == 1)
        #expect((listing["cache"]?["bytes"]?.intValue ?? 0) > 0)
    }
}
