import Foundation
import Testing

/// The commands run their parts as services until the first stop signal (see `runUntilStopped`).
@Suite("Commands stop on their signals, as services", .serialized, .timeLimit(.minutes(2)))
struct ServiceCommandTests {
    @Test("the coordinator stops on SIGINT and exits 0")
    func coordinatorStopsOnInterrupt() async throws {
        let cluster = try await TestCluster()
        defer { cluster.terminate() }
        cluster.coordinator.signal(SIGINT)
        #expect(try await cluster.coordinator.waitForExit() == 0)
        #expect(cluster.coordinator.output.contains { $0.contains("signal 2: stopping") })
    }

    @Test("a worker under `up` ignores SIGINT (Ctrl-C reaches the whole group) and stops on SIGTERM, saying goodbye")
    func supervisedWorker() async throws {
        let cluster = try await TestCluster()
        defer { cluster.terminate() }
        let worker = try SkillbusProcess(
            ["worker", "--name", "child", "--coordinator", cluster.bus, "--skills", "echo"], name: "child",
            environment: ["SKILLBUS_SUPERVISOR_PID": String(getpid())])
        defer { worker.signal(SIGKILL) }
        try await cluster.coordinator.waitForLine("child to join") { $0.contains("agent 'child' joined") }
        worker.signal(SIGINT)
        worker.signal(SIGTERM)
        #expect(try await worker.waitForExit() == 0)
        await worker.waitForOutputEnd()
        #expect(worker.output.contains { $0.contains("signal 15: stopping") })
        #expect(!worker.output.contains { $0.contains("signal 2") })
        // The goodbye: the coordinator hears it leave at once, not after missed heartbeats.
        try await cluster.coordinator.waitForLine("child to leave") { $0.contains("agent 'child' left") }
    }

    @Test("feed stops on SIGTERM and exits 0")
    func feedStops() async throws {
        let cluster = try await TestCluster()
        defer { cluster.terminate() }
        let feed = try SkillbusProcess(["feed", "--feed", cluster.feed], name: "feed")
        defer { feed.signal(SIGKILL) }
        try await feed.waitForLine("the watching banner") { $0.hasPrefix("watching ") }
        feed.signal(SIGTERM)
        #expect(try await feed.waitForExit() == 0)
    }
}
