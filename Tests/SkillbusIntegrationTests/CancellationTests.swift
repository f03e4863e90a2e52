import Foundation
import Skillbus
import SkillbusZMQ
import Synchronization
import Testing

/// Cancellation from the client with real processes: Ctrl-C on `skillbus send`, `skillbus cancel`, a cancelled
/// library call, and an agent whose skill ignores CANCEL.
@Suite("Cancellation from the client", .serialized, .timeLimit(.minutes(3)))
struct CancellationTests {
    func cluster() async throws -> TestCluster {
        let cluster = try await TestCluster()
        try await cluster.startWorker("napper", ["--skills", "sleep,echo", "--capacity", "2"])
        return cluster
    }

    @Test("Ctrl-C on skillbus send cancels the sleep on its worker: measured from SIGINT to the worker's failed(cancelled)")
    func ctrlCOnSend() async throws {
        let cluster = try await cluster()
        defer { cluster.terminate() }
        let feed = try await FeedRecorder.start(cluster, topics: ["agent.state", "invocation.", "round."])
        defer { feed.close() }
        var cursor = 0
        var delays: [Double] = []
        for run in 1...5 {
            let send = try SkillbusProcess(["send", "sleep", "ms:=20000", "--coordinator", cluster.bus], name: "send")
            defer { send.signal(SIGKILL) }
            _ = try await feed.first(after: &cursor, within: .seconds(20)) {
                $0.topic == "agent.state" && $0["state"] == "executingSkill" && $0["skill"] == "sleep"
            }
            let interrupted = ContinuousClock.now
            send.signal(SIGINT)
            // Each looked for from here: the worker's state and the round's end come in either order.
            var (bus, worker, round) = (cursor, cursor, cursor)
            let stopped = try await feed.first(after: &bus, within: .seconds(10)) { $0.topic == "invocation.cancelled" }
            #expect(stopped["reason"] == "client", "run \(run)")
            let failed = try await feed.first(after: &worker, within: .seconds(10)) {
                $0.topic == "agent.state" && $0["state"] == "failed"
            }
            #expect(failed["reason"] == "cancelled")
            delays.append(Double((failed.at - interrupted) / .microseconds(1)) / 1000)
            let done = try await feed.first(after: &round, within: .seconds(10)) { $0.topic == "round.done" }
            #expect(done["status"] == "error")
            cursor = max(bus, worker, round)
            #expect(try await send.waitForExit() == 130, "128 + SIGINT, as shells expect")
            await send.waitForOutputEnd()
            #expect(send.output.contains { $0.contains("cancelled") }, "\(send.output)")
        }
        try await waitUntil("napper's slots to be free", timeout: .seconds(10)) {
            try await cluster.inFlight(agent: "napper") == 0
        }
        let sorted = delays.sorted()
        print(
            "Ctrl-C on send to the skill's cancellation on the worker, 5 runs: "
                + sorted.map { String(format: "%.1f ms", $0) }.joined(separator: ", ")
                + String(format: "; median %.1f ms (target < 100 ms)", sorted[2]))
        #expect(sorted[2] < 500, "median \(sorted[2]) ms")
    }

    @Test("skillbus cancel ROUND-ID stops a round another client sent, and says so; a round with nothing running is 1")
    func cancelCommand() async throws {
        let cluster = try await cluster()
        defer { cluster.terminate() }
        let feed = try await FeedRecorder.start(cluster, topics: ["invocation.dispatched"])
        defer { feed.close() }
        var cursor = 0
        let round = UUID().uuidString.lowercased()
        let send = try SkillbusProcess(
            ["send", "sleep", "ms:=20000", "--round-id", round, "--json", "--coordinator", cluster.bus], name: "send")
        defer { send.signal(SIGKILL) }
        _ = try await feed.first(after: &cursor, within: .seconds(20)) { $0["round"]?.stringValue == round }
        let (code, output) = try await runSkillbus(["cancel", round, "--coordinator", cluster.bus])
        #expect(code == 0, "\(output)")
        #expect(output.contains { $0.contains("cancelled round \(round): 1 round") && $0.contains("1 execution(s) stopped") })
        #expect(try await send.waitForExit() == 1)
        await send.waitForOutputEnd()
        let document = try JSONValue(parsing: send.output.first { $0.hasPrefix("{") } ?? "{}")
        #expect(document["error"]?["code"] == "cancelled")
        #expect(document["invocations"]?.arrayValue?.first?["status"] == "cancelled")
        try await waitUntil("napper's slot to be free", timeout: .seconds(10)) {
            try await cluster.inFlight(agent: "napper") == 0
        }
        let (again, said) = try await runSkillbus(["cancel", round, "--coordinator", cluster.bus])
        #expect(again == 1 && said.contains { $0.contains("nothing of round") })
        // A cancelled round is not kept: the same round id runs again.
        let (rerun, _) = try await cluster.sendJSON(["echo", "text=again", "--round-id", round])
        #expect(rerun == 0)
    }

    @Test("a cancelled library call: the bus answers it cancelled and the worker's skill stops")
    func libraryCall() async throws {
        let cluster = try await cluster()
        defer { cluster.terminate() }
        let client = try await SkillbusClient.connect(endpoint: cluster.bus, context: try ZMQContext())
        defer { client.close() }
        let call = Task { try await client.invoke("sleep", parameters: ["ms": 20_000], timeout: .seconds(30)) }
        try await waitUntil("the sleep to run") { try await cluster.inFlight(agent: "napper") == 1 }
        call.cancel()
        let outcome = try await call.value
        #expect(outcome.error?.code == .cancelled && outcome.error?.details?["reason"] == "client")
        try await waitUntil("napper's slot to be free", timeout: .seconds(10)) {
            try await cluster.inFlight(agent: "napper") == 0
        }
    }

    @Test("an agent that does not answer CANCEL is reported on the feed after the grace period (2 s)")
    func ignoredCancel() async throws {
        let cluster = try await TestCluster()
        defer { cluster.terminate() }
        let feed = try await FeedRecorder.start(cluster, topics: ["invocation.cancelIgnored", "request.cancelled"])
        defer { feed.close() }
        var cursor = 0
        // A worker of the test's own: it takes INVOKEs and never answers, not even CANCEL.
        let stubborn = try RawPeer(cluster.bus, context: try ZMQContext())
        defer { stubborn.close() }
        let ready: JSONValue = ["name": "stubborn", "capacity": 1, "heartbeatMs": 60_000, "skills": [["identifier": "stuck"]]]
        _ = try await stubborn.exchange(toBus([Array("SKB2W".utf8), Array("READY".utf8), ready.serialized()]))
        let client = try await SkillbusClient.connect(endpoint: cluster.bus, context: try ZMQContext())
        defer { client.close() }
        let call = Task { try await client.invoke("stuck", timeout: .seconds(30)) }
        var invoke: Multipart = []
        while invoke.count < 3 || String(decoding: invoke[1], as: UTF8.self) != "INVOKE" {
            invoke = try await stubborn.next(timeout: .seconds(10))  // bus heartbeats come too
        }
        let cancelled = ContinuousClock.now
        call.cancel()
        #expect(try await call.value.error?.code == .cancelled)
        let stopped = try await feed.first(after: &cursor, within: .seconds(10)) { $0.topic == "request.cancelled" }
        #expect(stopped["reason"] == "client" && stopped["agent"] == "stubborn")
        let ignored = try await feed.first(after: &cursor, within: .seconds(10)) { $0.topic == "invocation.cancelIgnored" }
        #expect(ignored["agent"] == "stubborn" && ignored["skill"] == "stuck")
        #expect(ignored["invocation"]?.stringValue == String(decoding: invoke[2], as: UTF8.self))
        #expect(ignored.at - cancelled >= .milliseconds(1900))
    }
}
