import Foundation
import Skillbus
import SkillbusCommands
import SkillbusTestSupport

/// The figures issue 14 sets speed targets for, each against a baseline measured in the same run: echo and
/// the coordinator's CPU against the raw proxy, a fan-out's CPU per invocation against a plain request's on
/// the same coordinator, and a coordinator's resident memory idle and remembering many rounds.
struct SpeedFigures {
    /// CPU microseconds per request at 64 in flight, from the echo phase: the coordinator's and the raw
    /// proxy's (both child processes, all their threads).
    struct EchoCPU {
        var coordinator = 0.0
        var proxy = 0.0
    }

    /// The main coordinator's CPU microseconds per plain echo request and per invocation of a fan-out round,
    /// the same text at the same level in flight, from the rounds phase (the pair with the median ratio).
    struct FanoutCPU {
        var perRequest = 0.0
        var perInvocation = 0.0
        var inFlight = 16
        var requestsFailed = 0
        /// Every pair's ratio, in the order measured.
        var pairRatios: [Double] = []

        var ratio: Double { PerfCommand.ratio(perInvocation, perRequest) }
    }

    /// A coordinator of its own whose limits keep every round it answers: resident memory right after its
    /// workers registered, and after `rounds` rounds of one echo; then another after as many rounds whose
    /// texts all differ (a value repeated across rounds is kept once per arena chunk, a distinct one is not).
    struct Memory {
        var idleMB = 0.0
        var rememberedMB = 0.0
        var distinctTextsMB = 0.0
        var rounds = 0
        var failed = 0
    }

    var echoCPU = EchoCPU()
    var fanout = FanoutCPU()
    var memory = Memory()

    static let defaultRememberedRounds = 100_000

    var failures: Int { fanout.requestsFailed + memory.failed }
}

/// One row of the speed block: a figure (or two, for memory), its target, and whether it is met.
struct SpeedRow {
    enum Bound { case atLeast, atMost }

    enum Unit {
        case ratio, micros, megabytes

        var suffix: String {
            switch self {
            case .ratio: "x"
            case .micros: " us"
            case .megabytes: " MB"
            }
        }

        /// Measured figures: two decimals for a ratio, one otherwise.
        func format(_ value: Double) -> String { String(format: self == .ratio ? "%.2f" : "%.1f", value) }
    }

    struct Figure {
        /// The key of this figure in `--json` when a row has more than one.
        var name: String
        var value: Double
        var target: Double
    }

    var key: String
    var label: String
    var unit: Unit
    var bound: Bound
    var figures: [Figure]
    var detail: String
    var extra: [String: JSONValue] = [:]

    func met(_ figure: Figure) -> Bool {
        bound == .atLeast ? figure.value >= figure.target : figure.value <= figure.target
    }

    var json: JSONValue {
        func fields(_ figure: Figure) -> [String: JSONValue] {
            ["value": .number(figure.value), "target": .number(figure.target), "met": .bool(met(figure))]
        }
        var object: [String: JSONValue] = extra
        if figures.count == 1, let figure = figures.first {
            object.merge(fields(figure)) { _, new in new }
        } else {
            for figure in figures { object[figure.name] = .object(fields(figure)) }
            object["met"] = .bool(figures.allSatisfy(met))
        }
        object["bound"] = .string(bound == .atLeast ? "atLeast" : "atMost")
        return .object(object)
    }

    var text: String {
        let sign = bound == .atLeast ? ">= " : "<= "
        let measured = figures.map { unit.format($0.value) }.joined(separator: " / ") + unit.suffix
        let targets = figures.map { sign + String(format: "%g", $0.target) }.joined(separator: " / ") + unit.suffix
        let met = figures.map { self.met($0) ? "yes" : "no" }.joined(separator: " / ")
        return "  " + label.padding(toLength: 56, withPad: " ", startingAt: 0)
            + measured.padding(toLength: 16, withPad: " ", startingAt: 0)
            + targets.padding(toLength: 18, withPad: " ", startingAt: 0)
            + met.padding(toLength: 10, withPad: " ", startingAt: 0) + detail
    }
}

extension BenchReport {
    /// The rows of issue 14, in its order.
    var speedRows: [SpeedRow] {
        let loaded = (skillbus[64], baseline[64])
        let serial = (skillbus[1], baseline[1])
        let cpu = speed.echoCPU
        let fanout = speed.fanout
        let memory = speed.memory
        let cpuVsProxy = PerfCommand.ratio(cpu.coordinator, cpu.proxy)
        return [
            SpeedRow(
                key: "echo64ThroughputRatio", label: "echo at 64 in flight, skillbus / raw proxy throughput",
                unit: .ratio, bound: .atLeast,
                figures: [.init(name: "ratio", value: ratios(at: 64)?.throughput ?? 0, target: 0.6)],
                detail: String(
                    format: "%.0f / %.0f tasks/s; client thread %.1f / %.1f us a request",
                    loaded.0?.tasksPerSecond ?? 0, loaded.1?.tasksPerSecond ?? 0,
                    loaded.0?.clientMicrosPerRequest ?? 0, loaded.1?.clientMicrosPerRequest ?? 0)),
            SpeedRow(
                key: "coordinatorCpuMicrosPerRequest64", label: "coordinator CPU per request at 64 in flight",
                unit: .micros, bound: .atMost,
                figures: [.init(name: "micros", value: (cpu.coordinator * 10).rounded() / 10, target: 12)],
                detail: String(format: "%.2fx the proxy's %.1f us", cpuVsProxy, cpu.proxy),
                extra: [
                    "proxyCpuMicrosPerRequest": .number((cpu.proxy * 10).rounded() / 10),
                    "vsProxyRatio": .number(cpuVsProxy),
                ]),
            SpeedRow(
                key: "fanoutCpuPerInvocationVsRequestRatio",
                label: "fan-out to \(rounds.fanoutAgents) agents: CPU per invocation / per request",
                unit: .ratio, bound: .atMost,
                figures: [.init(name: "ratio", value: fanout.ratio, target: 1.2)],
                detail: String(
                    format: "%.1f / %.1f us, %d in flight, median of %d pairs", fanout.perInvocation,
                    fanout.perRequest, fanout.inFlight, fanout.pairRatios.count),
                extra: [
                    "fanoutCpuMicrosPerInvocation": .number((fanout.perInvocation * 10).rounded() / 10),
                    "requestCpuMicros": .number((fanout.perRequest * 10).rounded() / 10),
                    "inFlight": .number(Double(fanout.inFlight)), "agents": .number(Double(rounds.fanoutAgents)),
                    "pairRatios": .array(fanout.pairRatios.map { .number($0) }),
                ]),
            SpeedRow(
                key: "p50At1Ratio", label: "p50 at 1 in flight, skillbus / raw proxy", unit: .ratio, bound: .atMost,
                figures: [.init(name: "ratio", value: ratios(at: 1)?.p50 ?? 0, target: 1.15)],
                detail: String(
                    format: "%.3f / %.3f ms", serial.0?.percentileMs(0.5) ?? 0, serial.1?.percentileMs(0.5) ?? 0)),
            SpeedRow(
                key: "coordinatorResidentMB",
                label: "coordinator resident, idle / \(memory.rounds) rounds remembered", unit: .megabytes,
                bound: .atMost,
                figures: [
                    .init(name: "idle", value: (memory.idleMB * 10).rounded() / 10, target: 20),
                    .init(name: "remembered", value: (memory.rememberedMB * 10).rounded() / 10, target: 40),
                ],
                detail: String(
                    format: "echo REQUESTs, each in a round of its own; %.1f MB when every text differs",
                    memory.distinctTextsMB),
                extra: [
                    "rememberedRounds": .number(Double(memory.rounds)),
                    "distinctTextsMB": .number((memory.distinctTextsMB * 10).rounded() / 10),
                ]),
        ]
    }

    var speedJSON: JSONValue { .object(Dictionary(uniqueKeysWithValues: speedRows.map { ($0.key, $0.json) })) }

    func printSpeed() {
        print(
            "speed (issue 14 targets)".padding(toLength: 58, withPad: " ", startingAt: 0)
                + "measured        target            met")
        for row in speedRows { print(row.text) }
    }
}

extension Bench {
    /// A coordinator of its own, started with limits that keep `rounds` rounds (its `retainedRoundsLimit` and
    /// `retainedOutcomesLimit`; by default it would forget all but the latest 10,000 round documents): its
    /// resident memory right after its workers registered, then after `rounds` echo REQUESTs at 64 in flight,
    /// each in a new round (the load the figure of today was measured with: every round keeps its
    /// single-flight outcome). Then the same on a fresh coordinator with a text of its own in every round, the
    /// same length. At most 30 s of load each; the clusters are stopped afterwards.
    func rememberedRoundsMemory(rounds: Int) async throws -> SpeedFigures.Memory {
        note("memory: a coordinator keeping \(rounds) rounds, before and after answering them…")
        var configuration = CoordinatorConfiguration()
        configuration.retainedRoundsLimit = max(rounds, configuration.retainedRoundsLimit)
        configuration.retainedOutcomesLimit = max(rounds, configuration.retainedOutcomesLimit)
        let file = try supervisor.write(configuration.json, name: "memory-coordinator.json")
        var figures = SpeedFigures.Memory()
        for (index, load) in [echoLoad, .skillbusDistinctEcho(payloadBytes: setup.payloadBytes)].enumerated() {
            guard let cluster = await startCluster(name: "memory\(index)", coordinatorOptions: ["--config", file]) else {
                throw SkillbusError(.timeout, "the memory coordinator or its workers did not start within 30 s")
            }
            let idle = PerfCommand.residentMB(cluster.coordinator.pid)
            let report = try await PerfCommand.measure(
                load, cluster.bus, context, requests: rounds, inFlight: 64, timeLimit: .seconds(30))
            let remembered = PerfCommand.residentMB(cluster.coordinator.pid)
            if index == 0 {
                (figures.idleMB, figures.rememberedMB) = (idle, remembered)
                figures.rounds = report.completed - report.failed
            } else {
                figures.distinctTextsMB = remembered
            }
            // Rounds left unanswered when the time ran out are not failures: the row says how many were kept.
            figures.failed += report.failed
            await cluster.stop()
        }
        return figures
    }
}
