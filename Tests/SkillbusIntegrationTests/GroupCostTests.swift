import Foundation
import SkillbusCommands
import SkillbusTestSupport
import SkillbusZMQ
import Testing

@testable import Skillbus

/// What a coordinator group's leader costs (issue 31, "Costs, measured"): rounds of one echo at 64 in flight
/// (throughput) and at 1 (p50) against the leader of a group, whose journal is in PostgreSQL, with and without
/// `answerAfterCommit`, against a coordinator with the SQLite journal and one with none, in rotating order. Gated: it takes a minute and means something only on a quiet
/// machine (`SKILLBUS_HA_COST=1`).
@Suite(
    "Coordinator group: cost", .serialized, .timeLimit(.minutes(6)),
    .enabled(if: ProcessInfo.processInfo.environment["SKILLBUS_HA_COST"] == "1", "set SKILLBUS_HA_COST=1 to measure"),
    .enabled(if: ThrowawayPostgres.unavailable == nil, Comment(rawValue: ThrowawayPostgres.unavailable ?? "")))
struct GroupCostTests {
    @Test("journaled rounds: a group leader's PostgreSQL journal, with and without answerAfterCommit, and SQLite")
    func journalCost() async throws {
        let postgres = try ThrowawayPostgres()
        defer { postgres.remove() }
        let directory = NSTemporaryDirectory() + "skillbus-ha-cost-\(UUID().uuidString.prefix(8))"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        func groupConfig(_ name: String, answerAfterCommit: Bool) throws -> String {
            let path = directory + "/\(name).json"
            try Data(
                JSONValue.object([
                    "version": 1, "answerAfterCommit": .bool(answerAfterCommit),
                    "ha": [
                        "database": .string(postgres.url), "group": .string(name), "name": "a",
                        "passwordFile": .string(postgres.directory + "/password"),
                    ],
                ]).serialized()
            ).write(to: URL(fileURLWithPath: path))
            return path
        }
        let group = try await TestCluster(coordinatorArguments: [
            "--config", try groupConfig("cost", answerAfterCommit: false),
        ])
        defer { group.terminate() }
        try await group.coordinator.waitForLine("the lead", timeout: .seconds(15)) {
            $0.contains("leading group 'cost'")
        }
        let waiting = try await TestCluster(
            coordinatorArguments: ["--config", try groupConfig("cost-commit", answerAfterCommit: true)])
        defer { waiting.terminate() }
        try await waiting.coordinator.waitForLine("the lead", timeout: .seconds(15)) {
            $0.contains("leading group 'cost-commit'")
        }
        let sqlite = try await TestCluster(coordinatorArguments: ["--data-dir", directory + "/data"])
        defer { sqlite.terminate() }
        let none = try await TestCluster()
        defer { none.terminate() }
        for cluster in [group, waiting, sqlite, none] {
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
        func p50(_ cluster: TestCluster) throws -> Double {
            let report = try load.run(
                endpoint: cluster.bus, context: context, requests: 500, inFlight: 1, timeLimit: .seconds(60))
            #expect(report.failed == 0)
            return report.percentileMs(0.5)
        }
        // A warm-up each, then five passes in rotating order.
        let sides = [("postgres", group), ("answerAfterCommit", waiting), ("sqlite", sqlite), ("none", none)]
        for (_, cluster) in sides { _ = try rate(cluster) }
        var ratios: [String: [Double]] = [:]
        var latencies: [String: [Double]] = [:]
        for pass in 0..<5 {
            var rates: [String: Double] = [:]
            var medians: [String: Double] = [:]
            for offset in 0..<sides.count {
                let (name, cluster) = sides[(pass + offset) % sides.count]
                rates[name] = try rate(cluster)
                medians[name] = try p50(cluster)
            }
            print("pass \(pass): rounds/s \(rates.mapValues(Int.init)), p50 ms at 1 \(medians)")
            for (name, _) in sides where name != "none" {
                ratios[name, default: []].append(rates[name]! / rates["none"]!)
                latencies[name, default: []].append(medians[name]! / medians["none"]!)
            }
        }
        func median(_ values: [Double]) -> Double { values.sorted()[values.count / 2] }
        for (name, _) in sides where name != "none" {
            print(
                "\(name): rounds at 64 in flight \(median(ratios[name]!))x of no journal; p50 at 1 in flight "
                    + "\(median(latencies[name]!))x (medians of 5)")
        }
        // Issue 31's target, reported rather than asserted: the figure depends on the machine (here PostgreSQL
        // shares the cores with the coordinators and the workers), as skillbus-perf's journal phase reports it.
        let postgresRatio = median(ratios["postgres"]!)
        print("target: PostgreSQL journal at 64 in flight >= 0.7x of none: \(postgresRatio >= 0.7 ? "met" : "NOT met")")
    }
}
