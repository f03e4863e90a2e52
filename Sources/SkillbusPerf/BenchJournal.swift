import Foundation
import Skillbus
import SkillbusCommands
import SkillbusTestSupport
import SkillbusZMQ

/// What the coordinator's round journal costs: the same rounds of one echo (each a new round id, so each is
/// journaled as accepted before it runs, and again with its document) on a coordinator with a data directory
/// (SQLite), on the leaders of two one-member coordinator groups (PostgreSQL, when a throwaway server can be started
/// here; one of them with `answerAfterCommit`) and on the main one without, in rotating order, as ratios of the same run: throughput at 64 in flight, and the median
/// latency at 1 in flight, where the commit before the round runs shows most.
struct JournalFigures {
    /// One journal against none.
    struct Versus {
        var throughputRatios: [Double] = []
        var latencyRatios: [Double] = []
        var best: (journaled: LoadReport, memory: LoadReport)?
        var bestSerial: (journaled: LoadReport, memory: LoadReport)?

        mutating func add(
            loaded: (journaled: LoadReport, memory: LoadReport), serial: (journaled: LoadReport, memory: LoadReport)
        ) {
            throughputRatios.append(PerfCommand.ratio(loaded.journaled.tasksPerSecond, loaded.memory.tasksPerSecond))
            latencyRatios.append(PerfCommand.ratio(serial.journaled.percentileMs(0.5), serial.memory.percentileMs(0.5)))
            if (best?.journaled.tasksPerSecond ?? -1) < loaded.journaled.tasksPerSecond { best = loaded }
            if (bestSerial?.journaled.percentileMs(0.5) ?? .infinity) > serial.journaled.percentileMs(0.5) {
                bestSerial = serial
            }
        }
    }

    var sqlite = Versus()
    var postgres = Versus()
    /// The same group's journal with `answerAfterCommit`: every answer waits for its document's commit.
    var postgresAfterCommit = Versus()
    /// Why there is no PostgreSQL column (no server here, or it did not start); nil when there is one.
    var postgresMissing: String?
    var failures = 0

    /// Issue 29's targets for the SQLite journal: rounds at 64 in flight at least this share of rounds without…
    static let throughputTarget = 0.8
    /// …and their median at 1 in flight at most this multiple.
    static let latencyTarget = 1.2
    /// Issue 31's target for a group's journal in PostgreSQL, at 64 in flight.
    static let postgresThroughputTarget = 0.7

    var throughputMet: Bool { sqlite.throughputRatios.median >= Self.throughputTarget }
    var latencyMet: Bool { !sqlite.latencyRatios.isEmpty && sqlite.latencyRatios.median <= Self.latencyTarget }
    var postgresMet: Bool {
        !postgres.throughputRatios.isEmpty && postgres.throughputRatios.median >= Self.postgresThroughputTarget
    }

    var json: JSONValue {
        var object: [String: JSONValue] = [
            "journaledRounds": sqlite.best?.journaled.json ?? .null, "memoryRounds": sqlite.best?.memory.json ?? .null,
            "journaledRoundsSerial": sqlite.bestSerial?.journaled.json ?? .null,
            "memoryRoundsSerial": sqlite.bestSerial?.memory.json ?? .null,
            "throughputRatio": .number(sqlite.throughputRatios.median),
            "throughputRatios": .array(sqlite.throughputRatios.map { .number($0) }),
            "p50RatioAt1": .number(sqlite.latencyRatios.median),
            "p50RatiosAt1": .array(sqlite.latencyRatios.map { .number($0) }),
            "throughputTarget": .number(Self.throughputTarget), "throughputMet": .bool(throughputMet),
            "p50TargetAt1": .number(Self.latencyTarget), "p50MetAt1": .bool(latencyMet),
        ]
        func figures(_ versus: Versus) -> [String: JSONValue] {
            [
                "journaledRounds": versus.best?.journaled.json ?? .null,
                "journaledRoundsSerial": versus.bestSerial?.journaled.json ?? .null,
                "throughputRatio": .number(versus.throughputRatios.median),
                "throughputRatios": .array(versus.throughputRatios.map { .number($0) }),
                "p50RatioAt1": .number(versus.latencyRatios.median),
                "p50RatiosAt1": .array(versus.latencyRatios.map { .number($0) }),
            ]
        }
        if let postgresMissing {
            object["postgres"] = ["missing": .string(postgresMissing)]
        } else {
            var postgresFigures = figures(postgres)
            postgresFigures["throughputTarget"] = .number(Self.postgresThroughputTarget)
            postgresFigures["throughputMet"] = .bool(postgresMet)
            postgresFigures["answerAfterCommit"] = .object(figures(postgresAfterCommit))
            object["postgres"] = .object(postgresFigures)
        }
        return .object(object)
    }

    func printText() {
        func pairs(_ ratios: [Double]) -> String { ratios.map { String(format: "%.2f", $0) }.joined(separator: " ") }
        print(
            String(
                format: "journal: rounds with a data dir / without, at 64 in flight %.2fx throughput; at 1 in flight "
                    + "%.2fx p50 (medians of %d pairs)", sqlite.throughputRatios.median, sqlite.latencyRatios.median,
                sqlite.throughputRatios.count))
        print(
            String(
                format: "  best %.0f rounds/s journaled, %.0f in memory; p50 at 1 in flight %.3f ms journaled, %.3f ms",
                sqlite.best?.journaled.tasksPerSecond ?? 0, sqlite.best?.memory.tasksPerSecond ?? 0,
                sqlite.bestSerial?.journaled.percentileMs(0.5) ?? 0, sqlite.bestSerial?.memory.percentileMs(0.5) ?? 0))
        let throughput = String(format: "%.2fx", sqlite.throughputRatios.median)
        let latency = String(format: "%.2fx", sqlite.latencyRatios.median)
        print(
            "  targets: throughput at 64 in flight >= \(Self.throughputTarget)x: \(throughput), "
                + "\(throughputMet ? "met" : "NOT met"); p50 at 1 in flight <= \(Self.latencyTarget)x: \(latency), "
                + "\(latencyMet ? "met" : "NOT met")")
        print("  pairs at 64: \(pairs(sqlite.throughputRatios)); p50 pairs at 1: \(pairs(sqlite.latencyRatios))")
        if let postgresMissing {
            print("journal in PostgreSQL (a coordinator group): not measured: \(postgresMissing)")
            return
        }
        let ratio = String(format: "%.2fx", postgres.throughputRatios.median)
        print(
            String(
                format: "journal in PostgreSQL (a coordinator group, fsync on) / without, at 64 in flight %@ "
                    + "throughput (%.0f rounds/s at best); at 1 in flight %.2fx p50 (%.3f ms)", ratio,
                postgres.best?.journaled.tasksPerSecond ?? 0, postgres.latencyRatios.median,
                postgres.bestSerial?.journaled.percentileMs(0.5) ?? 0))
        print(
            "  target: throughput at 64 in flight >= \(Self.postgresThroughputTarget)x: \(ratio), "
                + "\(postgresMet ? "met" : "NOT met"); pairs at 64: \(pairs(postgres.throughputRatios)); "
                + "p50 pairs at 1: \(pairs(postgres.latencyRatios))")
        print(
            String(
                format:
                    "  with answerAfterCommit / without a journal: at 64 in flight %.2fx throughput; at 1 in flight "
                    + "%.2fx p50", postgresAfterCommit.throughputRatios.median, postgresAfterCommit.latencyRatios.median
            ))
    }
}

extension Bench {
    /// The leaders of two one-member groups whose journal is in a throwaway PostgreSQL with fsync on (the second with
    /// `answerAfterCommit`), or nil when there is none (noted). The caller removes the server.
    func startPostgresClusters() async -> (groups: [Cluster], postgres: ThrowawayPostgres)? {
        let postgres: ThrowawayPostgres
        do {
            postgres = try ThrowawayPostgres(durable: true)
        } catch {
            note("journal: no PostgreSQL column: \(error)")
            return nil
        }
        var groups: [Cluster] = []
        for (name, afterCommit) in [("group", false), ("group-after-commit", true)] {
            let config = supervisor.directory + "/\(name).json"
            let document: JSONValue = [
                "version": 1, "answerAfterCommit": .bool(afterCommit),
                "ha": [
                    "database": .string(postgres.url), "group": .string(name),
                    "passwordFile": .string(postgres.directory + "/password"),
                ],
            ]
            do {
                try Data(document.jsonString.utf8).write(to: URL(fileURLWithPath: config))
            } catch {
                note("journal: no PostgreSQL column: writing \(config): \(error)")
                postgres.remove()
                return nil
            }
            guard let cluster = await startCluster(name: name, coordinatorOptions: ["--config", config]) else {
                note("journal: no PostgreSQL column: the group's coordinator or its workers did not start within 30 s")
                postgres.remove()
                return nil
            }
            groups.append(cluster)
        }
        return (groups, postgres)
    }

    /// The SQLite journal against none, and the PostgreSQL one when a throwaway server starts here; the group's
    /// coordinator and its server are stopped before this returns.
    func journalCosts(memory: Cluster, journaled: Cluster) async throws -> JournalFigures {
        note("journal: starting a throwaway PostgreSQL (fsync on) and a coordinator of a group on it…")
        let started = await startPostgresClusters()
        defer { started?.postgres.remove() }
        var figures = try await journalCost(memory: memory, journaled: journaled, groups: started?.groups ?? [])
        if started == nil {
            figures.postgresMissing = ThrowawayPostgres.unavailable ?? "the server or its coordinators did not start"
        }
        for cluster in started?.groups ?? [] { await cluster.stop() }
        return figures
    }

    /// Five rounds of measurements; in each, every coordinator goes first in turn.
    func journalCost(memory: Cluster, journaled: Cluster, groups: [Cluster]) async throws -> JournalFigures {
        var figures = JournalFigures()
        let rounds = LoadGenerator.echoRounds(payloadBytes: setup.payloadBytes, priorities: false)
        let serialCount = min(2000, setup.requests)
        for cluster in [journaled] + groups {  // warm each journal
            _ = try await measure(rounds, cluster.bus, requests: serialCount, inFlight: 64)
        }
        var sides = [memory, journaled] + groups
        for pass in 1...5 {
            note("journal: measuring (pass \(pass) of 5)…")
            func each(inFlight: Int, requests: Int) async throws -> [String: LoadReport] {
                var reports: [String: LoadReport] = [:]
                for side in sides {
                    let report = try await measure(rounds, side.bus, requests: requests, inFlight: inFlight)
                    figures.failures += report.failed
                    reports[side.bus] = report
                }
                return reports
            }
            let loaded = try await each(inFlight: 64, requests: setup.requests)
            let serial = try await each(inFlight: 1, requests: serialCount)
            func versus(_ side: Cluster) -> (
                loaded: (journaled: LoadReport, memory: LoadReport), serial: (journaled: LoadReport, memory: LoadReport)
            ) {
                ((loaded[side.bus]!, loaded[memory.bus]!), (serial[side.bus]!, serial[memory.bus]!))
            }
            let sqlite = versus(journaled)
            figures.sqlite.add(loaded: sqlite.loaded, serial: sqlite.serial)
            for (index, group) in groups.enumerated() {
                let measured = versus(group)
                if index == 0 {
                    figures.postgres.add(loaded: measured.loaded, serial: measured.serial)
                } else {
                    figures.postgresAfterCommit.add(loaded: measured.loaded, serial: measured.serial)
                }
            }
            sides.append(sides.removeFirst())  // the next pass starts with the next coordinator
        }
        return figures
    }
}
