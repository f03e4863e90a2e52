import Foundation
import Skillbus
import SkillbusCommands
import SkillbusTestSupport
import SkillbusZMQ

/// What the coordinator's round journal costs: the same rounds of one echo (each a new round id, so each is
/// journaled as accepted before it runs, and again with its document) on a coordinator with a data directory
/// and on the main one without, in alternation, as ratios of the same run: throughput at 64 in flight, and
/// the median latency at 1 in flight, where the commit before the round runs shows most.
struct JournalFigures {
    var throughputRatios: [Double] = []
    var latencyRatios: [Double] = []
    var best: (journaled: LoadReport, memory: LoadReport)?
    var bestSerial: (journaled: LoadReport, memory: LoadReport)?
    var failures = 0

    /// Issue 29's targets: journaled rounds at 64 in flight at least this share of rounds without the journal…
    static let throughputTarget = 0.8
    /// …and their median at 1 in flight at most this multiple.
    static let latencyTarget = 1.2

    var throughputMet: Bool { throughputRatios.median >= Self.throughputTarget }
    var latencyMet: Bool { !latencyRatios.isEmpty && latencyRatios.median <= Self.latencyTarget }

    var json: JSONValue {
        [
            "journaledRounds": best?.journaled.json ?? .null, "memoryRounds": best?.memory.json ?? .null,
            "journaledRoundsSerial": bestSerial?.journaled.json ?? .null,
            "memoryRoundsSerial": bestSerial?.memory.json ?? .null,
            "throughputRatio": .number(throughputRatios.median),
            "throughputRatios": .array(throughputRatios.map { .number($0) }),
            "p50RatioAt1": .number(latencyRatios.median),
            "p50RatiosAt1": .array(latencyRatios.map { .number($0) }),
            "throughputTarget": .number(Self.throughputTarget), "throughputMet": .bool(throughputMet),
            "p50TargetAt1": .number(Self.latencyTarget), "p50MetAt1": .bool(latencyMet),
        ]
    }

    func printText() {
        print(
            String(
                format: "journal: rounds with a data dir / without, at 64 in flight %.2fx throughput; at 1 in flight "
                    + "%.2fx p50 (medians of %d pairs)", throughputRatios.median, latencyRatios.median,
                throughputRatios.count))
        print(
            String(
                format: "  best %.0f rounds/s journaled, %.0f in memory; p50 at 1 in flight %.3f ms journaled, %.3f ms",
                best?.journaled.tasksPerSecond ?? 0, best?.memory.tasksPerSecond ?? 0,
                bestSerial?.journaled.percentileMs(0.5) ?? 0, bestSerial?.memory.percentileMs(0.5) ?? 0))
        let throughput = String(format: "%.2fx", throughputRatios.median)
        let latency = String(format: "%.2fx", latencyRatios.median)
        print(
            "  targets: throughput at 64 in flight >= \(Self.throughputTarget)x: \(throughput), "
                + "\(throughputMet ? "met" : "NOT met"); p50 at 1 in flight <= \(Self.latencyTarget)x: \(latency), "
                + "\(latencyMet ? "met" : "NOT met")")
        print("  pairs at 64: \(throughputRatios.map { String(format: "%.2f", $0) }.joined(separator: " ")); "
            + "p50 pairs at 1: \(latencyRatios.map { String(format: "%.2f", $0) }.joined(separator: " "))")
    }
}

extension Bench {
    /// Five pairs, each side going first in turn.
    func journalCost(memory: Cluster, journaled: Cluster) async throws -> JournalFigures {
        var figures = JournalFigures()
        let rounds = LoadGenerator.echoRounds(payloadBytes: setup.payloadBytes, priorities: false)
        let serialCount = min(2000, setup.requests)
        _ = try await measure(rounds, journaled.bus, requests: serialCount, inFlight: 64)  // warm it
        for pair in 1...5 {
            note("journal: measuring (pair \(pair) of 5)…")
            let journalFirst = pair % 2 == 1
            func both(inFlight: Int, requests: Int) async throws -> (journaled: LoadReport, memory: LoadReport) {
                if journalFirst {
                    let first = try await measure(rounds, journaled.bus, requests: requests, inFlight: inFlight)
                    return (first, try await measure(rounds, memory.bus, requests: requests, inFlight: inFlight))
                }
                let first = try await measure(rounds, memory.bus, requests: requests, inFlight: inFlight)
                return (try await measure(rounds, journaled.bus, requests: requests, inFlight: inFlight), first)
            }
            let loaded = try await both(inFlight: 64, requests: setup.requests)
            let serial = try await both(inFlight: 1, requests: serialCount)
            figures.failures += loaded.journaled.failed + loaded.memory.failed + serial.journaled.failed
                + serial.memory.failed
            figures.throughputRatios.append(
                PerfCommand.ratio(loaded.journaled.tasksPerSecond, loaded.memory.tasksPerSecond))
            figures.latencyRatios.append(
                PerfCommand.ratio(serial.journaled.percentileMs(0.5), serial.memory.percentileMs(0.5)))
            if (figures.best?.journaled.tasksPerSecond ?? -1) < loaded.journaled.tasksPerSecond {
                figures.best = loaded
            }
            if (figures.bestSerial?.journaled.percentileMs(0.5) ?? .infinity) > serial.journaled.percentileMs(0.5) {
                figures.bestSerial = serial
            }
        }
        return figures
    }
}
