import Foundation
import Skillbus
import SkillbusZMQ
import Synchronization
import Testing

/// A skill's `concurrency` with real processes: the bus never runs more of it at once on an agent, and the
/// worker refuses one beyond it from a bus that sends it anyway.
@Suite("Per-skill concurrency", .serialized, .timeLimit(.minutes(2)))
struct ConcurrencyTests {
    @Test("sleep limited to 1 on an agent of capacity 4: three run one after another, echo is not held up")
    func busKeepsTheLimit() async throws {
        let cluster = try await TestCluster()
        defer { cluster.terminate() }
        try await cluster.startWorker(
            "single", ["--skills", "sleep,echo", "--capacity", "4", "--policy", #"sleep={"concurrency":1}"#])
        let context = try ZMQContext()
        let feed = try await FeedSubscriber.connect(
            endpoint: cluster.feed, topics: ["request.", "registry.heartbeat"], context: context)
        defer { feed.close() }
        var events = feed.events.makeAsyncIterator()
        _ = try await events.next()  // the subscription is in place
        let client = try await SkillbusClient.connect(endpoint: cluster.bus, context: context)
        defer { client.close() }

        // The catalog carries the limit.
        let catalog = try await client.skills()
        #expect(catalog.skills.first { $0.descriptor.identifier == "sleep" }?.descriptor.concurrency == 1)

        let started = ContinuousClock.now
        let sleeps = (0..<3).map { _ in
            Task { try await client.invoke("sleep", parameters: ["ms": 300], timeout: .seconds(10)) }
        }
        // Sent once a sleep runs and the others wait for it: echo takes one of the agent's free slots at once.
        try await waitUntil("a sleep to run") {
            let agents = try await client.agents()["agents"]?.arrayValue ?? []
            return agents.first?["inFlight"]?.intValue == 1
        }
        let echo = try await client.invoke("echo", parameters: ["text": "quick"])
        #expect(echo.status == .ok && echo.durationMicros < 250_000, "echo took \(echo.durationMicros) µs")
        for sleep in sleeps { #expect(try await sleep.value.status == .ok) }
        let elapsed = ContinuousClock.now - started
        #expect(elapsed >= .milliseconds(900), "three 300 ms sleeps one at a time took \(elapsed)")

        // On the feed: never two sleeps dispatched and not yet done.
        var running = 0
        var most = 0
        var done = 0
        while done < 3, let (topic, event) = try await events.next() {
            guard event["skill"] == "sleep" else { continue }
            if topic == "request.dispatched" { running += 1 }
            if topic == "request.done" {
                running -= 1
                done += 1
            }
            most = max(most, running)
        }
        #expect(most == 1 && done == 3)
        print("concurrency 1: three 300 ms sleeps took \(elapsed); echo meanwhile \(Double(echo.durationMicros) / 1000) ms")
    }

    @Test("the worker keeps the limit against a bus that does not: busy, then free again once the first ends")
    func workerKeepsTheLimit() async throws {
        let bus = try RawPeer(bindingRouter: "tcp://127.0.0.1:*", context: try ZMQContext())
        defer { bus.close() }
        let worker = try SkillbusProcess(
            [
                "worker", "--name", "limited", "--coordinator", bus.socket.endpoint, "--skills", "sleep", "--capacity",
                "4", "--policy", #"sleep={"concurrency":1}"#,
            ], name: "limited")
        defer { worker.signal(SIGKILL) }
        var ready: Multipart = []
        while ready.count < 4 || String(decoding: ready[2], as: UTF8.self) != "READY" { ready = try await bus.next(timeout: .seconds(20)) }
        let registration = try JSONValue(parsing: ready[3])
        #expect(registration["skills"]?.arrayValue?.first?["concurrency"] == 1)
        let peer = ready[0]
        func send(_ fields: [String]) { bus.socket.send([peer] + fromBus(fields)) }
        func result(_ id: String) async throws -> (status: String, payload: JSONValue) {
            let deadline = ContinuousClock.now + .seconds(20)
            while ContinuousClock.now < deadline {
                let message = try await bus.next(timeout: deadline - ContinuousClock.now)
                guard message.count == 6, String(decoding: message[2], as: UTF8.self) == "RESULT",
                    String(decoding: message[3], as: UTF8.self) == id
                else { continue }
                return (String(decoding: message[4], as: UTF8.self), try JSONValue(parsing: message[5]))
            }
            throw TimedOut(what: "RESULT \(id)")
        }
        send(["SKB2W", "WELCOME", #"{"accepted":["sleep"],"epoch":"0000000000000000","feed":"","heartbeatMs":60000,"refused":[]}"#])
        send(["SKB2W", "INVOKE", "i1", "r1", "", "sleep", "60000", #"{"ms":60000}"#])
        send(["SKB2W", "INVOKE", "i2", "r2", "", "sleep", "60000", #"{"ms":1}"#])
        let refused = try await result("i2")
        #expect(refused.status == "error")
        #expect(
            refused.payload
                == ["code": "busy", "message": "agent 'limited' is at the concurrency limit of 'sleep' (1)"])
        send(["SKB2W", "CANCEL", "i1"])
        #expect(try await result("i1").payload["code"] == "cancelled")
        send(["SKB2W", "INVOKE", "i3", "r3", "", "sleep", "60000", #"{"ms":1}"#])
        #expect(try await result("i3").status == "ok")
    }
}
