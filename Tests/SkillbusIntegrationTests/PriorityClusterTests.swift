import Foundation
import Skillbus
import SkillbusZMQ
import Synchronization
import Testing

/// Priorities and each client's share of the wait queue, with real processes: an agent of capacity 1
/// serves what waits by priority, and one client cannot fill the whole queue.
@Suite("Priorities, the client's share and rate limits", .serialized, .timeLimit(.minutes(2)))
struct PriorityClusterTests {
    func sleep(_ ms: Int, tag: String) throws -> RoundSpec {
        // The tag only names the round in a failure; the bus keeps rounds apart by their ids.
        _ = tag
        return try RoundSpec(json: ["invoke": ["skill": "sleep", "params": ["ms": .number(Double(ms))]]], stepLimit: 10)
    }

    @Test("low, normal and high wait behind a running sleep: served high, normal, low; send --priority works")
    func order() async throws {
        let cluster = try await TestCluster()
        defer { cluster.terminate() }
        try await cluster.startWorker("single", ["--skills", "sleep,echo", "--capacity", "1"])
        let context = try ZMQContext()
        let client = try await SkillbusClient.connect(endpoint: cluster.bus, context: context)
        defer { client.close() }

        // The blocker holds the only slot until all three wait; then it is cancelled and frees it.
        let blockerSpec = try sleep(60_000, tag: "blocker")
        let blocker = Task { try await client.round(blockerSpec, roundID: "blocker", timeout: .seconds(90)) }
        try await waitUntil("the blocker to run", timeout: .seconds(60)) {
            try await client.agents()["agents"]?.arrayValue?.first?["inFlight"]?.intValue == 1
        }
        var tasks: [Task<(String, ContinuousClock.Instant), any Error>] = []
        for (tag, priority) in [("low", InvocationPriority.low), ("normal", .normal), ("high", .high)] {
            let spec = try sleep(50, tag: tag)
            tasks.append(
                Task {
                    let document = try await client.round(spec, timeout: .seconds(60), priority: priority)
                    #expect(document.json["status"] == "ok")
                    return (tag, ContinuousClock.now)
                })
            // Each waits before the next is sent, so that age alone would give the opposite order.
            let expected = tasks.count
            try await waitUntil("\(tag) to wait", timeout: .seconds(60)) {
                try await client.agents()["waiting"]?.intValue == expected
            }
        }
        _ = try await client.cancelRound("blocker")
        #expect(try await blocker.value.json["status"] != "ok")  // cancelled
        var finished: [(String, ContinuousClock.Instant)] = []
        for task in tasks { finished.append(try await task.value) }
        #expect(finished.sorted { $0.1 < $1.1 }.map(\.0) == ["high", "normal", "low"])

        let (code, document) = try await cluster.sendJSON(["echo", "text=hi", "--priority", "high"])
        #expect(code == 0 && document["status"] == "ok")
        let (badCode, _) = try await cluster.send(["echo", "text=hi", "--priority", "urgent"])
        #expect(badCode == 2)
    }

    @Test("a flooding client gets busy past its share while another client still gets a place")
    func share() async throws {
        let config = try writeConfig(["queueLimit": 4, "clientQueueShare": 0.5])
        let cluster = try await TestCluster(coordinatorArguments: ["--config", config])
        defer { cluster.terminate() }
        try await cluster.startWorker("single", ["--skills", "sleep", "--capacity", "1"])
        let context = try ZMQContext()
        let flooder = try await SkillbusClient.connect(endpoint: cluster.bus, context: context)
        defer { flooder.close() }
        let other = try await SkillbusClient.connect(endpoint: cluster.bus, context: context)
        defer { other.close() }

        // One runs and two wait: the flooder's share of a queue of 4 is 2. Each sleep is long enough for the
        // next to be sent while it holds the slot.
        var floods: [Task<InvocationOutcome, any Error>] = []
        for index in 0..<3 {
            floods.append(Task { try await flooder.invoke("sleep", parameters: ["ms": 2000], timeout: .seconds(30)) })
            try await waitUntil("flood \(index) to be placed") {
                let listing = try await other.agents()
                return listing["waiting"]?.intValue == index
                    && listing["agents"]?.arrayValue?.first?["inFlight"]?.intValue == 1
            }
        }
        let refused = try await flooder.invoke("sleep", parameters: ["ms": 2000])
        #expect(refused.status == .error)
        #expect(refused.error?.code == .busy && refused.error?.message.contains("share") == true, "\(refused)")
        // The other client gets a place, and is served in its turn.
        let served = try await other.invoke("sleep", parameters: ["ms": 10], timeout: .seconds(30))
        #expect(served.status == .ok)
        for flood in floods { #expect(try await flood.value.status == .ok) }
    }

    @Test("echo limited to 20/s with a burst of 1: ten at once are all served, at the rate, none busy")
    func rateLimit() async throws {
        let config = try writeConfig(["rateLimits": ["skills": ["echo": ["perSecond": 20, "burst": 1]]]])
        let cluster = try await TestCluster(coordinatorArguments: ["--config", config])
        defer { cluster.terminate() }
        try await cluster.startWorker("fast", ["--skills", "echo", "--capacity", "16"])
        let context = try ZMQContext()
        let client = try await SkillbusClient.connect(endpoint: cluster.bus, context: context)
        defer { client.close() }
        let started = ContinuousClock.now
        let calls = (0..<10).map { index in
            Task { try await client.invoke("echo", parameters: ["text": .string("n\(index)")], timeout: .seconds(10)) }
        }
        for call in calls { #expect(try await call.value.status == .ok) }
        let elapsed = ContinuousClock.now - started
        // One at once, then one per 50 ms: the tenth goes out 450 ms after the first.
        #expect(elapsed >= .milliseconds(440) && elapsed < .seconds(5), "ten at 20/s took \(elapsed)")
        print("rate limit 20/s, burst 1: ten echoes took \(elapsed)")
    }
}
