import Foundation
import SkillbusZMQ
import Synchronization
import Testing

@testable import Skillbus

/// A standby that refuses everything with `not_leader` (Tests/interop/fake_standby.py), naming a real coordinator
/// or none, so that clients and workers that follow the leader are tested against real processes (issue 31).
struct FakeStandby: Sendable {
    static let script = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("interop/fake_standby.py").path

    let process: SkillbusProcess
    let bus: String

    /// Started naming `leader` (bus and feed) or, with nil, no leader.
    init(leader: (bus: String, feed: String)?) async throws {
        var arguments = ["-u", Self.script]
        if let leader {
            arguments += ["--leader-bus", leader.bus, "--leader-feed", leader.feed]
        } else {
            arguments += ["--no-leader"]
        }
        process = try SkillbusProcess(arguments, name: "fake standby", executable: "/usr/bin/env", prefix: ["python3"])
        let ready = try await process.waitForLine("fake standby ready") { $0.hasPrefix("fake standby ready:") }
        bus = String(ready.dropFirst("fake standby ready: bus=".count))
    }

    /// How many messages it refused (lines `refused …`).
    var refusals: Int { process.output.filter { $0.hasPrefix("refused ") }.count }

    func stop() { process.signal(SIGKILL) }
}

@Suite("Clients and workers follow the leader of a coordinator group", .serialized, .timeLimit(.minutes(3)))
struct FollowLeaderTests {
    let context: ZMQContext

    init() throws { context = try ZMQContext() }

    @Test("skillbus send with a standby first, naming the leader or not, gets its answer from the leader")
    func sendFollowsRefusal() async throws {
        let cluster = try await TestCluster()
        defer { cluster.terminate() }
        try await cluster.startWorker("w1", ["--skills", "echo"])
        let naming = try await FakeStandby(leader: (cluster.bus, cluster.feed))
        defer { naming.stop() }
        let silent = try await FakeStandby(leader: nil)
        defer { silent.stop() }

        for list in ["\(naming.bus),\(cluster.bus)", naming.bus, "\(silent.bus),\(cluster.bus)"] {
            let (code, output) = try await runSkillbus([
                "send", "echo", "text=hi", "--json", "--timeout", "10", "--coordinator", list,
            ])
            #expect(code == 0, "\(list): \(output)")
            let document = try JSONValue(parsing: output.first { $0.hasPrefix("{") } ?? "null")
            #expect(document["status"] == "ok" && document["agent"] == "w1", "\(list): \(output)")
        }
        #expect(naming.refusals >= 2)
        #expect(silent.refusals >= 1)
        // Reads too: AGENTS refused by the standby goes to the leader it names.
        let (code, output) = try await runSkillbus(["agents", "--json", "--coordinator", naming.bus])
        #expect(code == 0, "\(output)")
        #expect(output.contains { $0.contains("\"w1\"") }, "\(output)")
    }

    @Test("a long round and a long REQUEST on a live leader: probes answered, no move, one execution each")
    func longCallsStay() async throws {
        let cluster = try await TestCluster()
        defer { cluster.terminate() }
        try await cluster.startWorker("w1", ["--skills", "sleep"])
        let standby = try await FakeStandby(leader: (cluster.bus, cluster.feed))
        defer { standby.stop() }
        let client = try await SkillbusClient.connect(endpoints: [cluster.bus, standby.bus], context: context)
        defer { client.close() }
        let moves = Mutex<[String]>([])
        client.onMove { from, to, reason in moves.withLock { $0.append("\(from) -> \(to): \(reason)") } }
        async let round = client.round(.invoke(skill: "sleep", parameters: ["ms": 3500]), timeout: .seconds(10))
        async let request = client.invoke("sleep", parameters: ["ms": 3500], timeout: .seconds(10))
        let (document, outcome) = try await (round, request)
        #expect(document.status == .ok, "\(String(describing: document.error))")
        #expect(outcome.status == .ok, "\(String(describing: outcome.error))")
        #expect(moves.withLock { $0 }.isEmpty, "\(moves.withLock { $0 })")
        #expect(standby.refusals == 0)
        #expect(client.currentEndpoint == cluster.bus)
    }

    @Test("a dead first endpoint falls over to the second; with none alive the error names every endpoint")
    func deadFirstEndpoint() async throws {
        let cluster = try await TestCluster()
        defer { cluster.terminate() }
        try await cluster.startWorker("w1", ["--skills", "echo"])
        let dead = try freeEndpoints(2)
        let started = ContinuousClock.now
        let (code, output) = try await runSkillbus([
            "send", "echo", "text=hi", "--json", "--timeout", "10", "--coordinator", "\(dead[0]),\(cluster.bus)",
        ])
        let took = ContinuousClock.now - started
        #expect(code == 0, "\(output)")
        #expect(output.contains { $0.contains("\"ok\"") }, "\(output)")
        #expect(took < .seconds(6), "fell over in \(took)")
        print("fell over from a dead endpoint in \(took)")

        // Two dead ones first: 1 s of silence each, and the back-off, within the default connect timeout.
        let (third, said) = try await runSkillbus([
            "send", "echo", "text=hi", "--timeout", "10", "--coordinator", "\(dead[0]),\(dead[1]),\(cluster.bus)",
        ])
        #expect(third == 0, "\(said)")

        let (failed, words) = try await runSkillbus([
            "send", "echo", "text=hi", "--timeout", "2", "--coordinator", "\(dead[0]),\(dead[1])",
        ])
        #expect(failed == 3, "\(words)")
        #expect(words.contains { $0.contains(dead[0]) && $0.contains(dead[1]) }, "\(words)")
    }

    @Test("rounds resent across a kill -9 and restart of the leader, the client holding both endpoints")
    func resendAcrossRestart() async throws {
        let cluster = try await RestartableCluster(context: context)
        defer { cluster.terminate() }
        try await cluster.startWorker("w1")
        let standby = try await FakeStandby(leader: (cluster.bus, cluster.feed))
        defer { standby.stop() }
        let client = try await SkillbusClient.connect(endpoints: [cluster.bus, standby.bus], context: context)
        defer { client.close() }
        let moves = Mutex<[String]>([])
        client.onMove { from, to, reason in moves.withLock { $0.append("\(from) -> \(to): \(reason)") } }

        let done = RoundSpec.invoke(skill: "t.mark", parameters: ["tag": "follow-done", "secs": "0"])
        let first = try await client.round(done, roundID: "follow-done", timeout: .seconds(10))
        #expect(first.status == .ok)
        try await waitUntil("the journal to hold follow-done") { cluster.journalState("follow-done") == "done" }

        // A round of an idempotent skill runs when the leader dies: sent again, it runs again (§3.5.9).
        async let rerun = client.round(
            .invoke(skill: "t.idem", parameters: ["tag": "follow-idem", "secs": "2"]), roundID: "follow-idem",
            timeout: .seconds(30))
        try await waitUntil("follow-idem to run") { cluster.executions("follow-idem") == 1 }
        try await cluster.kill()
        // The finished round asked again while the leader is down: the client tries the standby, is sent back, and
        // keeps trying with back-off until the leader is back.
        async let again = client.round(done, roundID: "follow-done", timeout: .seconds(30))
        try await waitUntil("the standby to refuse a ROUND", timeout: .seconds(10)) {
            standby.process.output.contains { $0.hasPrefix("refused SKB2C ROUND") }
        }
        try await cluster.startCoordinator()
        try await cluster.startWorker("w2")
        var stored = try await again
        #expect(stored.stored, "\(stored)")
        stored.stored = false
        #expect(stored == first)
        #expect(cluster.executions("follow-done") == 1)
        let idem = try await rerun
        #expect(idem.status == .ok, "\(String(describing: idem.error))")
        #expect(cluster.executions("follow-idem") == 2)
        print("moves: \(moves.withLock { $0 })")
        #expect(moves.withLock { $0 }.contains { $0.hasPrefix(standby.bus + " -> " + cluster.bus) })
    }

    @Test("48 rounds at 16 in flight across a kill -9 and restart: every one answered, none run twice")
    func roundsUnderLoadAcrossRestart() async throws {
        let cluster = try await RestartableCluster(context: context)
        defer { cluster.terminate() }
        try await cluster.startWorker("w1", capacity: 16)
        let standby = try await FakeStandby(leader: (cluster.bus, cluster.feed))
        defer { standby.stop() }
        let client = try await SkillbusClient.connect(endpoints: [cluster.bus, standby.bus], context: context)
        defer { client.close() }
        let tally = Tally()
        let total = 48
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask {
                try await waitUntil("10 rounds answered", timeout: .seconds(30)) {
                    tally.answers.withLock { $0.count } >= 10
                }
                try await cluster.kill()
                try await waitUntil("the standby to refuse a ROUND", timeout: .seconds(10)) {
                    standby.process.output.contains { $0.hasPrefix("refused SKB2C ROUND") }
                }
                try await cluster.startCoordinator()
                try await cluster.startWorker("w2", capacity: 16)
            }
            group.addTask {
                await withTaskGroup(of: Void.self) { rounds in
                    for index in 0..<total {
                        if index >= 16 { await rounds.next() }
                        rounds.addTask {
                            let tag = "load-\(index)"
                            do {
                                let document = try await client.round(
                                    .invoke(skill: "t.mark", parameters: ["tag": .string(tag), "secs": "0.2"]),
                                    roundID: tag, timeout: .seconds(40))
                                tally.answers.withLock { $0[tag, default: []].append(document) }
                            } catch {
                                tally.failures.withLock { $0.append("\(tag): \(error)") }
                            }
                        }
                    }
                }
            }
            try await group.waitForAll()
        }
        #expect(tally.failures.withLock { $0 }.isEmpty, "\(tally.failures.withLock { $0 })")
        let documents = tally.answers.withLock { $0 }.compactMapValues(\.first)
        #expect(documents.count == total)
        #expect(tally.answers.withLock { $0 }.values.allSatisfy { $0.count == 1 })
        var interrupted = 0
        for index in 0..<total {
            let tag = "load-\(index)"
            let runs = cluster.executions(tag)
            #expect(runs <= 1, "\(tag) ran \(runs) times")
            guard let document = documents[tag] else { continue }
            if document.status == .ok {
                #expect(runs == 1, "\(tag) answered ok but ran \(runs) times")
            } else {
                #expect(document.error?.code == .interrupted, "\(tag): \(String(describing: document.error))")
                interrupted += 1
            }
        }
        print("\(total) rounds: \(total - interrupted) ok, \(interrupted) interrupted by the kill")
    }

    @Test("a worker pointed at a standby registers with the leader it names, and logs the move once")
    func workerFollowsRefusal() async throws {
        let cluster = try await TestCluster()
        defer { cluster.terminate() }
        let standby = try await FakeStandby(leader: (cluster.bus, cluster.feed))
        defer { standby.stop() }
        let worker = try SkillbusProcess(
            ["worker", "--name", "wf", "--skills", "echo", "--coordinator", standby.bus, "--heartbeat-ms", "200"],
            name: "wf")
        defer { worker.signal(SIGTERM) }
        try await cluster.coordinator.waitForLine("wf to join") { $0.contains("agent 'wf' joined") }
        let listing = try await cluster.agents()
        #expect(listing["agents"]?.arrayValue?.contains { $0["agent"] == "wf" } == true, "\(listing)")
        // It follows the registry on the leader's feed, and serves.
        try await worker.waitForLine("the replica") { $0.contains("following the registry on \(cluster.feed)") }
        let (code, output) = try await cluster.send(["echo", "text=moved", "--timeout", "10"])
        #expect(code == 0, "\(output)")
        let moves = worker.output.filter { $0.contains("moving from coordinator") && !$0.contains("client connection") }
        #expect(moves.count == 1, "\(worker.output)")
        #expect(
            moves.first?.contains(
                "moving from coordinator \(standby.bus) to \(cluster.bus): \(standby.bus) it is a standby") == true,
            "\(moves)")

        // A worker config naming both as a JSON array: the same, the standby first.
        let config = NSTemporaryDirectory() + "skillbus-follow-\(UUID().uuidString.prefix(8)).json"
        try Data(
            JSONValue.object([
                "version": 1, "name": "wc", "skills": ["echo"],
                "coordinator": [.string(standby.bus), .string(cluster.bus)],
            ]).serialized()
        ).write(to: URL(fileURLWithPath: config))
        defer { try? FileManager.default.removeItem(atPath: config) }
        let configured = try SkillbusProcess(["worker", "--config", config, "--heartbeat-ms", "200"], name: "wc")
        defer { configured.signal(SIGTERM) }
        try await cluster.coordinator.waitForLine("wc to join") { $0.contains("agent 'wc' joined") }

        // A standby that knows no leader: the worker goes on to the next of its list.
        let silent = try await FakeStandby(leader: nil)
        defer { silent.stop() }
        let next = try SkillbusProcess(
            ["worker", "--name", "wn", "--skills", "echo", "--coordinator", "\(silent.bus),\(cluster.bus)"], name: "wn")
        defer { next.signal(SIGTERM) }
        try await cluster.coordinator.waitForLine("wn to join") { $0.contains("agent 'wn' joined") }
        _ = try await next.waitForLine("the move", timeout: .seconds(5)) {
            $0.contains("moving from coordinator \(silent.bus) to \(cluster.bus)")
        }
        #expect(next.output.contains { $0.contains("knows no leader") }, "\(next.output)")
    }

    @Test(
        "a worker moves to the next of its list when its coordinator dies (kill -9) or stops answering (SIGSTOP)",
        arguments: [SIGKILL, SIGSTOP])
    func workerMovesOnLoss(signal: Int32) async throws {
        // Bus heartbeats of 200 ms: a worker gives a silent coordinator up after 3 of them, 0.6 s.
        let first = try await TestCluster(coordinatorArguments: ["--heartbeat-ms", "200"])
        defer {
            first.coordinator.signal(SIGKILL)  // a stopped process ignores SIGTERM
            first.terminate()
        }
        let second = try await TestCluster(coordinatorArguments: ["--heartbeat-ms", "200"])
        defer { second.terminate() }
        let worker = try SkillbusProcess(
            [
                "worker", "--name", "ws", "--skills", "echo", "--coordinator", "\(first.bus),\(second.bus)",
                "--heartbeat-ms", "200",
            ], name: "ws")
        defer { worker.signal(SIGTERM) }
        try await first.coordinator.waitForLine("ws to join") { $0.contains("agent 'ws' joined") }
        try await worker.waitForLine("ws registered") { $0.contains("registered as 'ws'") }
        first.coordinator.signal(signal)
        let lost = ContinuousClock.now
        try await second.coordinator.waitForLine("ws to join the second", timeout: .seconds(15)) {
            $0.contains("agent 'ws' joined")
        }
        let took = ContinuousClock.now - lost
        let moves = worker.output.filter { $0.contains("moving from coordinator") && !$0.contains("client connection") }
        print("signal \(signal): registered with the next coordinator \(took) later; \(moves)")
        #expect(moves.count == 1, "\(worker.output)")
        // kill -9: the kernel closes the connection, and the worker moves at once; SIGSTOP: 3 silent heartbeats.
        let why = signal == SIGKILL ? "its connection closed" : "nothing came from it for"
        #expect(moves.first?.contains("\(first.bus) to \(second.bus): \(first.bus) \(why)") == true, "\(moves)")
        let (code, output) = try await second.send(["echo", "text=there", "--timeout", "10"])
        #expect(code == 0, "\(output)")
    }

    @Test("a worker whose first coordinator is not there moves to the next at its first failed attempt")
    func workerSkipsDeadEndpoint() async throws {
        let cluster = try await TestCluster()
        defer { cluster.terminate() }
        let dead = try freeEndpoints(1)[0]
        let started = ContinuousClock.now
        let worker = try SkillbusProcess(
            ["worker", "--name", "wd", "--skills", "echo", "--coordinator", "\(dead),\(cluster.bus)"], name: "wd")
        defer { worker.signal(SIGTERM) }
        try await cluster.coordinator.waitForLine("wd to join") { $0.contains("agent 'wd' joined") }
        let took = ContinuousClock.now - started
        let moves = worker.output.filter { $0.contains("moving from coordinator") && !$0.contains("client connection") }
        print("registered past a dead first endpoint \(took) after start; \(moves)")
        #expect(moves.count == 1, "\(worker.output)")
        #expect(moves.first?.contains("\(dead) to \(cluster.bus): \(dead) no connection could be made") == true)
        #expect(took < .seconds(3), "took \(took): the silence rule (3 s), not the failed attempt")
    }

    @Test("skillbus feed and skills given a group's feeds show the events of whichever coordinator publishes")
    func feedFollows() async throws {
        let first = try await TestCluster()
        defer { first.terminate() }
        let second = try await TestCluster()
        defer { second.terminate() }
        let feeds = "\(first.feed),\(second.feed)"
        let watcher = try SkillbusProcess(["feed", "--feed", feeds, "--topic", "agent.joined"], name: "feed")
        defer { watcher.signal(SIGTERM) }
        try await watcher.waitForLine("watching") { $0.hasPrefix("watching") }
        // The subscription reaches each feed in its own time: workers join until the watcher sees one (at most 20).
        try await joinUntilSeen(first, prefix: "a", by: watcher)
        // The first coordinator dies; events of the other one come on the same watcher.
        first.coordinator.signal(SIGKILL)
        try await joinUntilSeen(second, prefix: "b", by: watcher)
        // A registry replica given the same feeds (and the group's buses) holds the live coordinator's registry.
        let (code, output) = try await runSkillbus([
            "skills", "--json", "--coordinator", "\(first.bus),\(second.bus)", "--feed", feeds,
        ])
        #expect(code == 0, "\(output)")
        #expect(output.contains { $0.contains("\"b1\"") }, "\(output)")
    }

    /// Starts workers PREFIX1, PREFIX2, … on `cluster` until `watcher` prints the `agent.joined` of one.
    func joinUntilSeen(_ cluster: TestCluster, prefix: String, by watcher: SkillbusProcess) async throws {
        for index in 1...20 {
            try await cluster.startWorker("\(prefix)\(index)", ["--skills", "echo"])
            let seen = try? await watcher.waitForLine("\(prefix)\(index) on the feed", timeout: .seconds(1)) {
                $0.contains("agent.joined") && $0.contains(" \(prefix)")
            }
            if seen != nil { return }
        }
        throw TimedOut(what: "an agent.joined of \(prefix)… on \(watcher.output)")
    }

    @Test("a bad entry of an endpoint list is named; a single endpoint keeps its words")
    func badLists() async throws {
        let (code, output) = try await runSkillbus([
            "send", "echo", "--coordinator", "tcp://127.0.0.1:5555,tcp://127.0.0.1",
        ])
        #expect(code == 2)
        #expect(output.contains { $0.contains("entry 2 of") && $0.contains("has no port") }, "\(output)")
        let (empty, words) = try await runSkillbus(["agents", "--coordinator", "tcp://127.0.0.1:5555,"])
        #expect(empty == 2)
        #expect(words.contains { $0.contains("entry 2 of") && $0.contains("is empty") }, "\(words)")
        let (environment, said) = try await runSkillbus(
            ["agents"], environment: ["SKILLBUS_COORDINATOR": "tcp://a:1,tcp://a:1"])
        #expect(environment == 2)
        #expect(said.contains { $0.contains("SKILLBUS_COORDINATOR") && $0.contains("twice") }, "\(said)")
    }
}
