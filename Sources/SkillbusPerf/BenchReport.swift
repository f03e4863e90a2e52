import Foundation
import Skillbus
import SkillbusCommands
import SkillbusZMQ

/// Everything one `skillbus-perf` run measured, and the two ways it is printed: one JSON object
/// (`--json`) or tables for people.
struct BenchReport {
    struct Setup {
        var workers: Int
        var payloadBytes: Int
        var requests: Int
        var capacity: Int
    }

    /// The cost of single-flight: pairs measured in alternation with a coordinator started `--no-dedup`.
    struct Deduplication {
        var ratios: [Double] = []
        var best: (with: LoadReport, without: LoadReport)?
        var cpuWith: [Double] = []
        var cpuWithout: [Double] = []
        var residentMB: (with: Double, without: Double) = (0, 0)
    }

    struct Rounds {
        var single: LoadReport
        var fanout: LoadReport
        var plan: LoadReport
        var fanoutAgents: Int

        var fanoutInvocationsVsSingle: Double {
            PerfCommand.ratio(fanout.tasksPerSecond * Double(fanoutAgents), single.tasksPerSecond)
        }
        var planVsSingleP50: Double { PerfCommand.ratio(plan.percentileMs(0.5), single.percentileMs(0.5)) }
    }

    struct RegistryFigures {
        var agents: Int
        var skills: Int
        var routingSmall: LoadReport
        var routingLarge: LoadReport
        var newReplicaMs: [Double]
        var rawSnapshotMs: [Double]
        var killToReplicaMs: [Double]
    }

    var setup: Setup
    /// Echo at each level in flight, on Skillbus and on the raw baseline.
    var skillbus: [Int: LoadReport]
    var baseline: [Int: LoadReport]
    /// The ratios of each alternating echo pair, by level (`ratios(at:)` gives their medians).
    var echoPairRatios: [Int: [LevelRatios]]
    var deduplication: Deduplication
    var rounds: Rounds
    var registry: RegistryFigures
    var context: ContextFigures
    var turns: TurnFigures
    var output: OutputFigures
    var retries: RetryFigures
    var curve: CurveFigures
    var priorityCache: PriorityCacheFigures
    var http: HTTPFigures
    var journal: JournalFigures
    /// The rows of issue 14's targets (BenchSpeed.swift).
    var speed: SpeedFigures

    var levels: [Int] { skillbus.keys.sorted() }

    /// Requests that failed anywhere: the run's exit status says whether there were any.
    var failures: Int {
        levels.reduce(0) { $0 + (skillbus[$1]?.failed ?? 0) + (baseline[$1]?.failed ?? 0) }
            + registry.routingSmall.failed + registry.routingLarge.failed + rounds.single.failed
            + rounds.fanout.failed + rounds.plan.failed + context.failures + turns.failed
            + curve.failures
            + output.failures
            + retries.failures + priorityCache.failures + http.failures + journal.failures + speed.failures
    }

    struct LevelRatios {
        var throughput: Double
        var p50: Double
        var p99: Double
    }

    /// The medians of the pairs' ratios at `level`.
    func ratios(at level: Int) -> LevelRatios? {
        guard let pairs = echoPairRatios[level], !pairs.isEmpty else { return nil }
        return LevelRatios(
            throughput: pairs.map(\.throughput).median, p50: pairs.map(\.p50).median, p99: pairs.map(\.p99).median)
    }

    /// The bus's default heartbeat is 1 s and a worker is dead after 3 missed ones.
    static let livenessBoundMs = 3000.0

    var json: JSONValue {
        func key(_ level: Int) -> String { "inFlight\(level)" }
        func series(_ runs: [Double]) -> JSONValue {
            ["median": .number(runs.median), "runs": .array(runs.map { .number($0) })]
        }
        var ratiosJSON: [String: JSONValue] = [:]
        for level in levels {
            guard let ratios = ratios(at: level) else { continue }
            let pairs = echoPairRatios[level] ?? []
            ratiosJSON[key(level)] = [
                "throughputRatio": .number(ratios.throughput), "p50LatencyRatio": .number(ratios.p50),
                "p99LatencyRatio": .number(ratios.p99),
                "throughputRatios": .array(pairs.map { .number($0.throughput) }),
                "p50LatencyRatios": .array(pairs.map { .number($0.p50) }),
            ]
        }
        let kills = registry.killToReplicaMs
        return [
            "workers": .number(Double(setup.workers)), "payloadBytes": .number(Double(setup.payloadBytes)),
            "requests": .number(Double(setup.requests)), "workerCapacity": .number(Double(setup.capacity)),
            "libzmq": .string(ZMQContext.libraryVersion),
            "skillbus": .object(Dictionary(uniqueKeysWithValues: skillbus.map { (key($0.key), $0.value.json) })),
            "baseline": .object(Dictionary(uniqueKeysWithValues: baseline.map { (key($0.key), $0.value.json) })),
            "ratios": .object(ratiosJSON),
            "registry": [
                "agents": .number(Double(registry.agents)), "skills": .number(Double(registry.skills)),
                "newReplicaMs": series(registry.newReplicaMs), "rawSnapshotMs": series(registry.rawSnapshotMs),
                "newReplicaVsRawRatio": .number(
                    PerfCommand.ratio(registry.newReplicaMs.median, registry.rawSnapshotMs.median)),
                "killToReplicaMs": [
                    "median": .number(kills.median), "max": .number(kills.max() ?? 0),
                    "runs": .array(kills.map { .number($0) }),
                ],
                "killVsLivenessBoundRatio": .number(PerfCommand.ratio(kills.max() ?? 0, Self.livenessBoundMs)),
                "routing10Skills": registry.routingSmall.json, "routingLargeRegistry": registry.routingLarge.json,
                "routingLargeVsSmallRatio": .number(
                    PerfCommand.ratio(registry.routingLarge.tasksPerSecond, registry.routingSmall.tasksPerSecond)),
            ],
            "rounds": [
                "singleInvocation": rounds.single.json, "fanout": rounds.fanout.json,
                "fanoutAgents": .number(Double(rounds.fanoutAgents)),
                "fanoutInvocationsVsSingleRatio": .number(rounds.fanoutInvocationsVsSingle),
                "plan20Steps10Duplicates": rounds.plan.json, "planVsSingleP50Ratio": .number(rounds.planVsSingleP50),
            ],
            "context": context.json,
            "turns": turns.json,
            "curve": curve.json,
            "output": output.json,
            "retries": retries.json,
            "priorityCache": priorityCache.json,
            "operatorHTTP": http.json,
            "journal": journal.json,
            "speed": speedJSON,
            "deduplication": [
                "with": deduplication.best?.with.json ?? .null, "without": deduplication.best?.without.json ?? .null,
                "throughputRatio": .number(deduplication.ratios.median),
                "throughputRatios": .array(deduplication.ratios.map { .number($0) }),
                "coordinatorCpuMicrosPerRequest": [
                    "with": .number(deduplication.cpuWith.median), "without": .number(deduplication.cpuWithout.median),
                ],
                "coordinatorResidentMB": [
                    "with": .number(deduplication.residentMB.with),
                    "without": .number(deduplication.residentMB.without),
                ],
            ],
        ]
    }

    /// The tables for people, on standard output.
    func printText() {
        print(
            "skillbus-perf: \(setup.workers) workers, \(setup.payloadBytes)-byte echo payload, "
                + "libzmq \(ZMQContext.libraryVersion)")
        print("in flight  system      tasks/s     p50 ms   p99 ms   max ms   failed")
        for level in levels {
            for (name, report) in [("skillbus", skillbus[level]), ("baseline", baseline[level])] {
                guard let report else { continue }
                print(
                    String(
                        format: "%-10d %-10@ %9.0f %9.3f %8.3f %8.3f %8d", level, name, report.tasksPerSecond,
                        report.percentileMs(0.5), report.percentileMs(0.99), report.maxMs, report.failed))
            }
            if let ratios = ratios(at: level) {
                print(
                    String(
                        format: "%-10d ratio       %8.2fx  p50 %.2fx  p99 %.2fx (skillbus / baseline, medians of %d pairs)", level,
                        ratios.throughput, ratios.p50, ratios.p99, echoPairRatios[level]?.count ?? 0))
            }
        }
        print("")
        print("rounds (16 in flight; the plan 4)   rounds/s   p50 ms   p99 ms")
        for (name, report) in [
            ("one invocation", rounds.single), ("fan-out to \(rounds.fanoutAgents) agents", rounds.fanout),
            ("plan: 20 steps, 10 repeats", rounds.plan),
        ] {
            print(
                name.padding(toLength: 34, withPad: " ", startingAt: 0)
                    + String(
                        format: "%9.0f %8.3f %8.3f", report.tasksPerSecond, report.percentileMs(0.5),
                        report.percentileMs(0.99)))
        }
        print(
            String(
                format:
                    "  fan-out runs %.2fx the invocations/s of single rounds; a plan round takes %.1fx a single one (p50)",
                rounds.fanoutInvocationsVsSingle, rounds.planVsSingleP50))
        print("")
        let dedup = deduplication
        print(
            String(
                format: "deduplication at 64 in flight: throughput with / without %.2fx (median of %d; target >= 0.9)",
                dedup.ratios.median, dedup.ratios.count))
        print(
            String(
                format: "  best %.0f tasks/s with it, %.0f without; coordinator CPU %.1f us/request with, %.1f without",
                dedup.best?.with.tasksPerSecond ?? 0, dedup.best?.without.tasksPerSecond ?? 0, dedup.cpuWith.median,
                dedup.cpuWithout.median))
        print(
            String(
                format: "  coordinator memory (resident) %.0f MB with it, %.0f MB without", dedup.residentMB.with,
                dedup.residentMB.without))
        print("")
        retries.printText()
        print("")
        priorityCache.printText()
        print("")
        http.printText()
        journal.printText()
        print("")
        context.printText()
        print("")
        turns.printText()
        print("")
        curve.printText()
        print("")
        output.printText()
        print("")
        print("registry: \(registry.skills) skills over \(registry.agents) agents")
        print(
            String(
                format: "  new replica holds it in   %8.1f ms median (target < 200); raw snapshot transfer %.1f ms (%.2fx)",
                registry.newReplicaMs.median, registry.rawSnapshotMs.median,
                PerfCommand.ratio(registry.newReplicaMs.median, registry.rawSnapshotMs.median)))
        if !registry.killToReplicaMs.isEmpty {
            print(
                String(
                    format:
                        "  kill -9 to replica update %8.1f ms median, %.1f ms max (target < 3500; bound 3 x 1 s heartbeat)",
                    registry.killToReplicaMs.median, registry.killToReplicaMs.max() ?? 0))
        }
        print(
            String(
                format: "  routing at 64 in flight   %8.0f tasks/s with 10 skills, %.0f with %d (%.2fx)",
                registry.routingSmall.tasksPerSecond, registry.routingLarge.tasksPerSecond, registry.skills + 1,
                PerfCommand.ratio(registry.routingLarge.tasksPerSecond, registry.routingSmall.tasksPerSecond)))
        print("")
        printSpeed()
    }
}
