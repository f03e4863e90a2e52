import Foundation
@testable import Skillbus
import SkillbusTestSupport
import SkillbusZMQ
import Testing

/// Coordinators whose journal is in PostgreSQL (`ha`), with real processes and a throwaway cluster of the test's
/// own (issue 31).
@Suite(
    "Coordinator group: the journal in PostgreSQL", .serialized, .timeLimit(.minutes(4)),
    .enabled(if: ThrowawayPostgres.unavailable == nil, Comment(rawValue: ThrowawayPostgres.unavailable ?? "")))
struct CoordinatorGroupTests {
    let context: ZMQContext

    init() throws { context = try ZMQContext() }

    @Test("a finished round id sent again after kill -9 and a restart is answered from PostgreSQL, without running")
    func finishedRoundSurvives() async throws {
        let postgres = try ThrowawayPostgres()
        defer { postgres.remove() }
        let cluster = try await RestartableCluster(context: context, postgres: postgres)
        defer { cluster.terminate() }
        try await cluster.startWorker("w1")
        let client = try await cluster.client(context)
        defer { client.close() }
        let spec = RoundSpec.invoke(skill: "t.mark", parameters: ["tag": "pg-done-1", "secs": "0"])
        let first = try await client.round(spec, roundID: "pg-done-1", timeout: .seconds(10))
        #expect(first.status == .ok)
        try await waitUntil("PostgreSQL to hold pg-done-1 as done") { cluster.journalState("pg-done-1") == "done" }
        try await cluster.restart()
        var again = try await client.round(spec, roundID: "pg-done-1", timeout: .seconds(10))
        #expect(again.stored && !first.stored)
        again.stored = false
        #expect(again == first)
        #expect(cluster.executions("pg-done-1") == 1)
    }

    @Test("a round running at the crash is answered interrupted; one whose skills are idempotent runs again")
    func interruptedRounds() async throws {
        let postgres = try ThrowawayPostgres()
        defer { postgres.remove() }
        let cluster = try await RestartableCluster(context: context, postgres: postgres)
        defer { cluster.terminate() }
        try await cluster.startWorker("w1")
        let client = try await cluster.client(context)
        defer { client.close() }
        async let plain = client.round(
            .invoke(skill: "t.mark", parameters: ["tag": "pg-crash-1", "secs": "3"]), roundID: "pg-crash-1",
            timeout: .seconds(25))
        async let idempotent = client.round(
            .invoke(skill: "t.idem", parameters: ["tag": "pg-crash-2", "secs": "1"]), roundID: "pg-crash-2",
            timeout: .seconds(25))
        try await waitUntil("both rounds to run") {
            cluster.executions("pg-crash-1") == 1 && cluster.executions("pg-crash-2") == 1
        }
        try await cluster.restart()
        let (interrupted, rerun) = try await (plain, idempotent)
        #expect(interrupted.error?.code == .interrupted, "\(String(describing: interrupted.error))")
        #expect(cluster.executions("pg-crash-1") == 1)
        #expect(rerun.status == .ok, "\(String(describing: rerun.error))")
        #expect(cluster.executions("pg-crash-2") == 2)
    }

    @Test("a broken ha section, or a database nobody answers at start, stops the coordinator with what is wrong")
    func badStarts() async throws {
        let directory = NSTemporaryDirectory() + "skillbus-ha-bad-\(UUID().uuidString.prefix(8))"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let local = ["coordinator", "--bus", "tcp://127.0.0.1:*", "--feed", "tcp://127.0.0.1:*"]
        let broken = directory + "/broken.json"
        try Data(#"{"version": 1, "ha": {"database": "postgresql://u:pw@127.0.0.1/x", "group": ""}}"#.utf8)
            .write(to: URL(fileURLWithPath: broken))
        let (code, output) = try await runSkillbus(local + ["--config", broken])
        #expect(code != 0)
        #expect(output.contains { $0.contains("ha.database: holds a password") }, "\(output)")
        #expect(output.contains { $0.contains("ha.group:") }, "\(output)")

        let port = try unusedLoopbackPort()
        let unreachable = directory + "/unreachable.json"
        try Data(
            #"{"version": 1, "ha": {"database": "postgresql://skillbus@127.0.0.1:\#(port)/x", "group": "g"}}"#.utf8
        ).write(to: URL(fileURLWithPath: unreachable))
        let (downCode, downOutput) = try await runSkillbus(local + ["--config", unreachable])
        #expect(downCode == 1)
        #expect(
            downOutput.contains { $0.contains("cannot connect to PostgreSQL at postgresql://skillbus@127.0.0.1:\(port)/x") },
            "\(downOutput)")
    }
}
