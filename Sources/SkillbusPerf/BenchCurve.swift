import Foundation
import Skillbus
import SkillbusCommands
import SkillbusZMQ

/// What CURVE costs: echo on the plain cluster and on one with keys on bus and feed, same run, in
/// alternation (three pairs per level, each side going first in turn).
struct CurveFigures {
    struct Level {
        var plain: [LoadReport] = []
        var curve: [LoadReport] = []

        var throughputRatios: [Double] {
            zip(curve, plain).map { PerfCommand.ratio($0.tasksPerSecond, $1.tasksPerSecond) }
        }
        var p50Ratios: [Double] { zip(curve, plain).map { PerfCommand.ratio($0.percentileMs(0.5), $1.percentileMs(0.5)) } }
        static func best(_ runs: [LoadReport]) -> LoadReport? { runs.max { $0.tasksPerSecond < $1.tasksPerSecond } }
    }

    var levels: [Int: Level] = [:]

    var failures: Int {
        levels.values.reduce(0) { total, level in total + (level.plain + level.curve).reduce(0) { $0 + $1.failed } }
    }

    var json: JSONValue {
        .object(
            Dictionary(
                uniqueKeysWithValues: levels.map { level, figures in
                    (
                        "inFlight\(level)",
                        [
                            "plain": Level.best(figures.plain)?.json ?? .null,
                            "curve": Level.best(figures.curve)?.json ?? .null,
                            "throughputRatio": .number(figures.throughputRatios.median),
                            "p50LatencyRatio": .number(figures.p50Ratios.median),
                            "throughputRatios": .array(figures.throughputRatios.map { .number($0) }),
                        ] as JSONValue
                    )
                }))
    }

    func printText() {
        print("CURVE (keys on bus and feed) against the same echo without keys, this run (median of 3 pairs):")
        for (level, figures) in levels.sorted(by: { $0.key < $1.key }) {
            guard let plain = Level.best(figures.plain), let curve = Level.best(figures.curve) else { continue }
            print(
                String(
                    format: "  %2d in flight: plain %.0f tasks/s p50 %.3f ms, curve %.0f tasks/s p50 %.3f ms; "
                        + "throughput %.2fx, p50 %.2fx", level, plain.tasksPerSecond, plain.percentileMs(0.5),
                    curve.tasksPerSecond, curve.percentileMs(0.5), figures.throughputRatios.median,
                    figures.p50Ratios.median))
        }
    }
}

extension Bench {
    /// Starts a cluster with keys beside `plain` and measures echo on both.
    func curve(plain: Cluster) async throws -> CurveFigures {
        note("curve: starting a coordinator with keys and \(setup.workers) keyed worker(s)…")
        let keys = try BenchKeys(directory: supervisor.directory, workers: setup.workers)
        guard let keyed = await startCluster(name: "curve", keys: keys) else {
            throw SkillbusError(.timeout, "the coordinator with keys or its workers did not start within 30 s")
        }
        _ = try await measure(echoLoad, keyed.bus, requests: min(2000, setup.requests), inFlight: 64, credentials: keys.client)
        var figures = CurveFigures()
        for level in Self.levels {
            let count = level == 1 ? min(setup.requests, 5000) : setup.requests
            var runs = CurveFigures.Level()
            for pair in 0..<3 {
                note("curve: \(count) requests at \(level) in flight with and without keys (pair \(pair + 1) of 3)…")
                let plainFirst = pair % 2 == 0
                if plainFirst { runs.plain.append(try await measure(echoLoad, plain.bus, requests: count, inFlight: level)) }
                runs.curve.append(
                    try await measure(echoLoad, keyed.bus, requests: count, inFlight: level, credentials: keys.client))
                if !plainFirst { runs.plain.append(try await measure(echoLoad, plain.bus, requests: count, inFlight: level)) }
            }
            figures.levels[level] = runs
        }
        return figures
    }
}
