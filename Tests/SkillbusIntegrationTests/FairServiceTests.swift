import Foundation
import Skillbus
import SkillbusZMQ
import Testing

/// Work that keeps an agent's threads busy must not cost it its life or its other clients: a pattern
/// that backtracks for ever stops at its deadline, and heartbeats do not wait for the skills' threads.
@Suite("Fair service under CPU-bound skills", .serialized, .timeLimit(.minutes(2)))
struct FairServiceTests {
    @Test("catastrophic patterns on every thread of the pool: they stop at their deadline, and the agent stays alive")
    func catastrophicPatterns() async throws {
        let cluster = try await TestCluster()
        defer { cluster.terminate() }
        // Heartbeats every 200 ms (the harness's setting): dead after 600 ms of silence.
        try await cluster.startWorker("alpha", ["--skills", "text.grep,echo", "--capacity", "8"])
        let context = try ZMQContext()
        let feed = try await FeedSubscriber.connect(
            endpoint: cluster.feed, topics: ["agent.left", "registry.heartbeat"], context: context)
        defer { feed.close() }
        var events = feed.events.makeAsyncIterator()
        _ = try await events.next()  // the subscription is in place
        let client = try await SkillbusClient.connect(endpoint: cluster.bus, context: context)
        defer { client.close() }

        // More searches than the machine has cores, each one able to run for years: 1.5 s of deadline each.
        let started = ContinuousClock.now
        let outcomes = try await withThrowingTaskGroup(of: InvocationOutcome.self) { group in
            for _ in 0..<4 {
                group.addTask {
                    try await client.invoke(
                        "text.grep", parameters: ["pattern": "(a+)+$", "text": .string(String(repeating: "a", count: 40) + "b")],
                        timeout: .milliseconds(1500))
                }
            }
            return try await group.reduce(into: []) { $0.append($1) }
        }
        let elapsed = ContinuousClock.now - started
        print("4 catastrophic searches with a 1.5 s deadline ended after \(elapsed)")
        #expect(outcomes.allSatisfy { $0.status == .error && $0.error?.code == .timeout }, "\(outcomes.map { $0.error?.message ?? "ok" })")
        // Each stopped at its deadline (two at a time on two cores, at worst), not when ICU gave up.
        #expect(elapsed < .seconds(10))

        // The agent was never declared dead, and it serves at once.
        let echo = try await client.invoke("echo", parameters: ["text": "still here"], timeout: .seconds(5))
        #expect(echo.status == .ok && echo.agent == "alpha")
        while let event = try await events.next(), event.topic != "registry.heartbeat" {
            Issue.record("the bus dropped the busy agent: \(event.event)")
        }
    }
}
