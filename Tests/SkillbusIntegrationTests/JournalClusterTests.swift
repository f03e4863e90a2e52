import Foundation
@testable import Skillbus
import SkillbusZMQ
import Synchronization
import Testing

/// The coordinator's journal and restarts with real processes: a coordinator with a data directory is killed
/// (-9) and started again on the same endpoints and directory; its workers offer `t.mark`, a command skill that
/// appends its tag to a file once per execution, so every execution is counted. The restart cases run with
/// CURVE keys on and off: what the journal promises does not depend on them.
@Suite("Journal and restarts", .serialized, .timeLimit(.minutes(4)))
struct JournalClusterTests {
    let context: ZMQContext

    init() throws { context = try ZMQContext() }

    @Test(
        "a finished round id sent again after kill -9 and a restart gets its stored document, without running",
        // t.idem is idempotent: its round starts without a row, and is written whole when it ends.
        arguments: [false, true], ["t.mark", "t.idem"])
    func finishedRoundSurvives(keyed: Bool, skill: String) async throws {
        let cluster = try await RestartableCluster(context: context, keyed: keyed)
        defer { cluster.terminate() }
        try await cluster.startWorker("w1")
        let client = try await cluster.client(context)
        defer { client.close() }
        let spec = RoundSpec.invoke(skill: skill, parameters: ["tag": "done-1", "secs": "0"])
        let first = try await client.round(spec, roundID: "journal-done-1", timeout: .seconds(10))
        #expect(first.status == .ok)
        // The document is committed in the journal's next commit after the answer (PROTOCOL §3.5.9): a kill
        // before that commit would leave the round `interrupted`, which is the documented window, not this case.
        try await waitUntil("the journal to hold journal-done-1 as done") {
            cluster.journalState("journal-done-1") == "done"
        }
        try await cluster.restart()
        // Answered from the journal: no worker is needed, and nothing runs.
        var again = try await client.round(spec, roundID: "journal-done-1", timeout: .seconds(10))
        #expect(again.stored && !first.stored)
        again.stored = false
        #expect(again == first)
        #expect(cluster.executions("done-1") == 1)
        let other = RoundSpec.invoke(skill: skill, parameters: ["tag": "other", "secs": "0"])
        let conflict = try await client.round(other, roundID: "journal-done-1", timeout: .seconds(10))
        #expect(conflict.error?.code == .roundConflict)
        #expect(cluster.executions("other") == 0)
    }

    @Test("a round running at the crash is answered interrupted; one whose skills are idempotent runs again")
    func interruptedRounds() async throws {
        let cluster = try await RestartableCluster(context: context)
        defer { cluster.terminate() }
        try await cluster.startWorker("w1")
        let client = try await cluster.client(context)
        defer { client.close() }
        // The client sends each round again while it waits: after the restart, the new coordinator answers.
        async let plain = client.round(
            .invoke(skill: "t.mark", parameters: ["tag": "crash-1", "secs": "3"]), roundID: "journal-crash-1",
            timeout: .seconds(25))
        async let idempotent = client.round(
            .invoke(skill: "t.idem", parameters: ["tag": "crash-2", "secs": "1"]), roundID: "journal-crash-2",
            timeout: .seconds(25))
        try await waitUntil("both rounds to run") {
            cluster.executions("crash-1") == 1 && cluster.executions("crash-2") == 1
        }
        try await cluster.restart()
        let (interrupted, rerun) = try await (plain, idempotent)
        #expect(interrupted.error?.code == .interrupted, "\(String(describing: interrupted.error))")
        #expect(cluster.executions("crash-1") == 1)
        #expect(rerun.status == .ok, "\(String(describing: rerun.error))")
        #expect(cluster.executions("crash-2") == 2)
    }

    @Test("skillbus send started while the coordinator is down gets one answer, from one execution")
    func sendAcrossRestart() async throws {
        let cluster = try await RestartableCluster(context: context)
        defer { cluster.terminate() }
        try await cluster.startWorker("w1")
        try await cluster.kill()
        let send = try SkillbusProcess(
            ["send", "t.mark", "tag=send-1", "secs=0", "--round-id", "journal-send-1", "--timeout", "20", "--json",
             "--coordinator", cluster.bus], name: "send")
        defer { send.signal(SIGTERM) }
        try await cluster.startCoordinator()
        let code = try await send.waitForExit(timeout: .seconds(30))
        await send.waitForOutputEnd()
        let document = try JSONValue(parsing: send.output.first { $0.hasPrefix("{") } ?? "null")
        #expect(code == 0, "\(send.output)")
        #expect(document["status"]?.stringValue == "ok")
        #expect(cluster.executions("send-1") == 1)
    }

    @Test("in the startup grace a request for a skill whose worker has not registered yet waits and succeeds")
    func graceWindow() async throws {
        let cluster = try await RestartableCluster.restartedWithoutWorkers(context: context)
        defer { cluster.terminate() }
        // Nobody offers t.mark now: without the grace this is unknown_skill at once.
        let client = try await cluster.client(context)
        defer { client.close() }
        async let outcome = client.invoke(
            "t.mark", parameters: ["tag": "grace-1", "secs": "0"], timeout: .seconds(15))
        try await cluster.startWorker("w1")
        let answer = try await outcome
        #expect(answer.status == .ok, "\(String(describing: answer.error))")
        #expect(cluster.executions("grace-1") == 1)
    }

    @Test("a round waiting in the startup grace, cancelled by its round id, never runs and leaves the journal")
    func cancelInGrace() async throws {
        let cluster = try await RestartableCluster.restartedWithoutWorkers(context: context)
        defer { cluster.terminate() }
        // Sent once, from a raw DEALER: the reference client sends a ROUND again every second, and a copy that
        // crossed the cancel would be a new round. Nobody offers t.mark, so it waits in the grace.
        let peer = try RawPeer(cluster.bus, context: context)
        defer { peer.close() }
        let spec = RoundSpec.invoke(skill: "t.mark", parameters: ["tag": "cancel-1", "secs": "0"])
        let round = RoundRequest(
            requestID: "q1", roundID: "journal-cancel-1", timeoutMs: 20_000, body: spec.body(retries: nil).serialized())
        peer.socket.send(ClientMessage.round(round).encoded())
        try await waitUntil("the journal to record the round") { cluster.journalState("journal-cancel-1") == "running" }
        let (code, lines) = try await runSkillbus(
            ["cancel", "journal-cancel-1", "--json", "--coordinator", cluster.bus])
        #expect(code == 0, "\(lines)")
        let summary = try JSONValue(parsing: lines.first { $0.hasPrefix("{") } ?? "null")
        #expect(summary["rounds"] == 1 && summary["stopped"] == 0, "\(summary)")
        guard case .round(_, _, let document) = try BusToClientMessage.decode(fields: try await peer.next()) else {
            Issue.record("expected the round's document")
            return
        }
        #expect(try RoundDocument(parsing: document).error?.code == .cancelled)
        try await waitUntil("the journal to forget the round") { cluster.journalState("journal-cancel-1") == nil }
        // w1 is welcomed, and what waited in the grace for t.mark would be dispatched then: a round sent after
        // the welcome ends after it.
        try await cluster.startWorker("w1")
        let client = try await cluster.client(context)
        defer { client.close() }
        let after = try await client.round(
            .invoke(skill: "t.mark", parameters: ["tag": "cancel-2", "secs": "0"]), timeout: .seconds(10))
        #expect(after.status == .ok)
        #expect(cluster.executions("cancel-1") == 0)
    }

    @Test("a request queued behind a busy worker whose client timed out never executes")
    func timedOutNeverRuns() async throws {
        let cluster = try await RestartableCluster(context: context, journal: false)
        defer { cluster.terminate() }
        try await cluster.startWorker("w1", capacity: 1)
        let client = try await cluster.client(context)
        defer { client.close() }
        async let busy = client.invoke("t.mark", parameters: ["tag": "busy-1", "secs": "1.5"], timeout: .seconds(10))
        try await waitUntil("the slow one to run") { cluster.executions("busy-1") == 1 }
        let late = try await client.invoke(
            "t.mark", parameters: ["tag": "late-1", "secs": "0"], timeout: .milliseconds(300))
        #expect(late.error?.code == .timeout)
        #expect(try await busy.status == .ok)
        // The slot is free again: what comes next runs, and the one that timed out never did.
        let after = try await client.invoke("t.mark", parameters: ["tag": "after-1", "secs": "0"], timeout: .seconds(10))
        #expect(after.status == .ok)
        #expect(cluster.executions("after-1") == 1)
        #expect(cluster.executions("late-1") == 0)
    }

    @Test("a data directory the coordinator cannot use is refused with what to do, and left as it was")
    func badDataDirectories() async throws {
        let directory = NSTemporaryDirectory() + "skillbus-journal-bad-\(UUID().uuidString.prefix(8))"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let garbage = Array("not a database at all".utf8)
        try Data(garbage).write(to: URL(fileURLWithPath: directory + "/journal.sqlite"))
        let local = ["--bus", "tcp://127.0.0.1:*", "--feed", "tcp://127.0.0.1:*"]
        let (code, output) = try await runSkillbus(["coordinator"] + local + ["--data-dir", directory])
        #expect(code == 1)
        #expect(output.contains { $0.contains("journal.sqlite is not a SQLite database") }, "\(output)")
        #expect(FileManager.default.contents(atPath: directory + "/journal.sqlite").map { Array($0) } == garbage)

        // A directory another coordinator holds.
        let cluster = try await RestartableCluster(context: context)
        defer { cluster.terminate() }
        let (lockedCode, lockedOutput) = try await runSkillbus(
            ["coordinator"] + local + ["--data-dir", cluster.directory + "/data"])
        #expect(lockedCode == 1)
        #expect(lockedOutput.contains { $0.contains("is in use by another process") }, "\(lockedOutput)")

        let (usageCode, usage) = try await runSkillbus(["coordinator"] + local + ["--startup-grace-ms", "-5"])
        #expect(usageCode == 2)
        #expect(usage.contains { $0.contains("--startup-grace-ms") }, "\(usage)")
    }

    @Test(
        "kill -9 and restart of the coordinator five times under load: nothing lost or answered twice",
        arguments: [false, true])
    func fiveRestartsUnderLoad(keyed: Bool) async throws {
        let cluster = try await RestartableCluster(context: context, keyed: keyed)
        defer { cluster.terminate() }
        try await cluster.startWorker("w1")
        try await cluster.startWorker("w2")
        let (clientCount, perClient, restarts) = (4, 50, 5)
        let tally = Tally()
        let context = self.context
        let load = Task {
            try await withThrowingTaskGroup(of: Void.self) { group in
                for clientIndex in 0..<clientCount {
                    group.addTask {
                        let client = try await cluster.client(context)
                        defer { client.close() }
                        for index in 0..<perClient {
                            let id = "load-\(clientIndex)-\(index)"
                            do {
                                let document = try await client.round(
                                    .invoke(skill: "t.mark", parameters: ["tag": .string(id), "secs": "0.05"]),
                                    roundID: id, timeout: .seconds(30))
                                tally.answers.withLock { $0[id, default: []].append(document) }
                            } catch {
                                tally.failures.withLock { $0.append("\(id): \(error)") }
                            }
                        }
                    }
                }
                try await group.waitForAll()
            }
        }
        var backTimes: [Double] = []
        for restart in 0..<restarts {
            let target = (restart + 1) * clientCount * perClient / (restarts + 1)
            try await waitUntil("\(target) answers before restart \(restart + 1)", timeout: .seconds(60)) {
                tally.answers.withLock { $0.count } >= target
            }
            try await cluster.restart()
            let started = ContinuousClock.now
            try await cluster.waitForWorkers(["w1", "w2"], timeout: .seconds(5))
            backTimes.append(Double((ContinuousClock.now - started) / .milliseconds(1)))
        }
        try await load.value
        let all = tally.answers.withLock { $0 }
        let failures = tally.failures.withLock { $0 }
        let ok = all.filter { $0.value.first?.status == .ok }.map(\.key)
        let interrupted = all.filter { $0.value.first?.error?.code == .interrupted }.map(\.key)
        let executionsOfOk = ok.map { cluster.executions($0) }
        let twice = all.filter { $0.value.count > 1 }.count
        let others = all.values.compactMap(\.first).filter { $0.status != .ok && $0.error?.code != .interrupted }
            .map { $0.error?.code.rawValue ?? "?" }
        print(
            "five restarts under load, keys \(keyed ? "on" : "off"): \(all.count) of \(clientCount * perClient) rounds "
                + "answered (\(ok.count) ok, "
                + "\(interrupted.count) interrupted, others: \(others)), \(failures.count) lost, \(twice) answered twice; "
                + "executions of the ok rounds: \(executionsOfOk.reduce(0, +)); workers back after "
                + backTimes.map { String(format: "%.0f ms", $0) }.joined(separator: ", "))
        #expect(failures.isEmpty, "\(failures.prefix(5))")
        #expect(all.count == clientCount * perClient)
        #expect(twice == 0)
        #expect(ok.count + interrupted.count == all.count)
        #expect(executionsOfOk.allSatisfy { $0 == 1 })
        #expect(interrupted.allSatisfy { cluster.executions($0) <= 1 })
        #expect(backTimes.allSatisfy { $0 <= 5000 })
    }
}
