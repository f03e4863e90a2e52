import Foundation
@testable import Skillbus
import SkillbusCommands
import SkillbusTestSupport
import SkillbusZMQ
import Testing

/// What a coordinator group's leader costs (issue 31, "Costs, measured"): rounds of one echo at 64 in flight
/// against the leader of a group, whose journal is in PostgreSQL, against a coordinator with the SQLite journal
/// and one with none, in alternating triples. Gated: it takes a minute and means something only on a quiet
/// machine (`SKILLBUS_HA_COST=1`).
@Suite(
    "Coordinator group: cost", .serialized, .timeLimit(.minutes(6)),
    .enabled(if: ProcessInfo.processInfo.environment["SKILLBUS_HA_COST"] == "1", "set SKILLBUS_HA_COST=1 to measure"),
    .enabled(if: ThrowawayPostgres.unavailable == nil, Comment(rawValue: ThrowawayPostgres.unavailable ?? "")))
struct GroupCostTests {
    @Test("journaled rounds at 64 in flight: PostgreSQL group leader and SQLite against no journal")
    func journalCost() async throws {
        let postgres = try ThrowawayPostgres()
        defer { postgres.remove() }
        let directory = NSTemporaryDirectory() + "skillbus-ha-cost-\(UUID().uuidString.prefix(8))"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        try Data(
            JSONValue.object([
                "version": 1,
                "ha": [
                    "database": .string(postgres.url), "group": "cost", "name": "a",
                    "passwordFile": .string(postgres.directory + "/password"),
                ],
            ]).serialized()
        ).write(to: URL(fileURLWithPath: directory + "/ha.json"))
        let group = try await TestCluster(coordinatorArguments: ["--config", directory + "/ha.json"])
        defer { group.terminate() }
        try await group.coordinator.waitForLine("the lead", timeout: .seconds(15)) { $0.contains("leading group 'cost'") }
        let sqlite = try await TestCluster(coordinatorArguments: ["--data-dir", directory + "/data"])
        defer { sqlite.terminate() }
        let none = try await TestCluster()
        defer { none.terminate() }
        for cluster in [group, sqlite, none] {
            for index in 0..<4 { try await cluster.startWorker("e\(index)", ["--skills", "echo", "--capacity", "32"]) }
        }
        let context = try ZMQContext()
        let load = LoadGenerator.echoRounds(payloadBytes: 100, priorities: false)
        func rate(_ cluster: TestCluster) throws -> Double {
            let report = try load.run(
                endpoint: cluster.bus, context: context, requests: 5000, inFlight: 64, timeLimit: .seconds(60))
            #expect(report.failed == 0)
            return report.tasksPerSecond
        }
        // A warm-up each, then five triples in rotating order.
        for cluster in [group, sqlite, none] { _ = try rate(cluster) }
        var ratios: (postgres: [Double], sqlite: [Double]) = ([], [])
        for pass in 0..<5 {
            var rates: [String: Double] = [:]
            let order = [("postgres", group), ("sqlite", sqlite), ("none", none)]
            for offset in 0..<3 {
                let (name, cluster) = order[(pass + offset) % 3]
                rates[name] = try rate(cluster)
            }
            print(
                "pass \(pass): rounds/s postgres \(Int(rates["postgres"]!)), sqlite \(Int(rates["sqlite"]!)), "
                    + "none \(Int(rates["none"]!))")
            ratios.postgres.append(rates["postgres"]! / rates["none"]!)
            ratios.sqlite.append(rates["sqlite"]! / rates["none"]!)
        }
        func median(_ values: [Double]) -> Double { values.sorted()[values.count / 2] }
        print(
            "journaled rounds at 64 in flight, median of 5: PostgreSQL group leader \(median(ratios.postgres))x, "
                + "SQLite \(median(ratios.sqlite))x of no journal")
        #expect(median(ratios.postgres) >= 0.7)
    }
}
