import Foundation
import Skillbus
import SkillbusZMQ

/// A figure and its baseline measured in pairs of alternating order (echo at one level in flight, a turn
/// row): each side's runs merged, and the ratios of each pair.
public struct PairedFigures: Sendable {
    public var subject: LoadReport
    public var baseline: LoadReport
    public var throughputRatios: [Double]
    public var p50Ratios: [Double]
    public var p99Ratios: [Double]

    public init(pairs: [(subject: LoadReport, baseline: LoadReport)]) {
        subject = .merged(pairs.map(\.subject))
        baseline = .merged(pairs.map(\.baseline))
        throughputRatios = pairs.map { BenchResults.ratio($0.subject.tasksPerSecond, $0.baseline.tasksPerSecond) }
        p50Ratios = pairs.map { BenchResults.ratio($0.subject.percentileMs(0.5), $0.baseline.percentileMs(0.5)) }
        p99Ratios = pairs.map { BenchResults.ratio($0.subject.percentileMs(0.99), $0.baseline.percentileMs(0.99)) }
    }

    /// `subject` and `baseline` measured in `pairs` pairs whose order alternates (the subject first, then the
    /// baseline first, ...): a machine that gets busier or quieter weighs on both.
    public static func measure(
        pairs count: Int, _ subject: () async throws -> LoadReport, baseline: () async throws -> LoadReport
    ) async throws -> PairedFigures {
        var pairs: [(subject: LoadReport, baseline: LoadReport)] = []
        for pair in 0..<count {
            if pair % 2 == 0 {
                let first = try await subject()
                pairs.append((first, try await baseline()))
            } else {
                let first = try await baseline()
                pairs.append((try await subject(), first))
            }
        }
        return PairedFigures(pairs: pairs)
    }

    public var p50Ratio: Double { BenchResults.median(p50Ratios) }
    public var throughputRatio: Double { BenchResults.median(throughputRatios) }
    public var failed: Int { subject.failed + baseline.failed }
}

/// What one `skillbus bench` run measured, printed as tables for people or as one JSON object (`--json`).
struct BenchResults {
    struct Rounds {
        var single: LoadReport
        var fanout: LoadReport
        /// Workers each fan-out invokes echo on.
        var agents: Int
        /// One-invocation ROUNDs (subject) against REQUESTs (baseline) at 64 in flight, with the
        /// coordinator's CPU per round and per request.
        var versusRequests: PairedFigures
        /// At 64 in flight, with the coordinator's CPU per invocation of a fan-out and per step of a plan.
        var fanoutPerInvocation: LoadReport
        var planPerStep: LoadReport

        /// The coordinator's CPU per invocation of each shape against its CPU per REQUEST (merged runs).
        var cpuRatios: (single: Double, fanout: Double, plan: Double) {
            let request = versusRequests.baseline.serverMicrosPerRequest
            return (
                BenchResults.ratio(versusRequests.subject.serverMicrosPerRequest, request),
                BenchResults.ratio(fanoutPerInvocation.serverMicrosPerRequest, request),
                BenchResults.ratio(planPerStep.serverMicrosPerRequest, request)
            )
        }

        /// Invocations a second in fan-out rounds against rounds a second of one invocation.
        var fanoutInvocationsVsSingle: Double {
            BenchResults.ratio(fanout.tasksPerSecond * Double(agents), single.tasksPerSecond)
        }

        var failed: Int {
            single.failed + fanout.failed + versusRequests.failed + fanoutPerInvocation.failed + planPerStep.failed
        }
    }

    var setup: BenchRun.Setup
    /// Each part is empty or nil when `--only` left it out.
    var echo: [Int: PairedFigures] = [:]
    var rounds: Rounds?
    var turns: TurnRows?
    var deployed: DeployedRows?
    /// A tools/call through `skillbus mcp` (stdio) against the same echo sent as a ROUND, one at a time.
    var mcp: PairedFigures?

    var levels: [Int] { echo.keys.sorted() }

    var failures: Int {
        echo.values.reduce(0) { $0 + $1.failed } + (rounds.map(\.failed) ?? 0)
            + (turns?.failed ?? 0) + (deployed?.failed ?? 0) + (mcp?.failed ?? 0)
    }

    /// `numerator / denominator` to three decimals; 0 when there is nothing to divide by.
    static func ratio(_ numerator: Double, _ denominator: Double) -> Double {
        denominator > 0 ? (numerator / denominator * 1000).rounded() / 1000 : 0
    }

    static func median(_ values: [Double]) -> Double { values.isEmpty ? 0 : values.sorted()[values.count / 2] }

    var json: JSONValue {
        func key(_ level: Int) -> String { "inFlight\(level)" }
        func numbers(_ values: [Double]) -> JSONValue { .array(values.map { .number($0) }) }
        var skillbus: [String: JSONValue] = [:]
        var baseline: [String: JSONValue] = [:]
        var ratios: [String: JSONValue] = [:]
        for (level, figures) in echo {
            skillbus[key(level)] = figures.subject.json
            baseline[key(level)] = figures.baseline.json
            ratios[key(level)] = [
                "throughputRatio": .number(Self.median(figures.throughputRatios)),
                "p50LatencyRatio": .number(Self.median(figures.p50Ratios)),
                "p99LatencyRatio": .number(Self.median(figures.p99Ratios)),
                "throughputRatios": numbers(figures.throughputRatios), "p50LatencyRatios": numbers(figures.p50Ratios),
            ]
        }
        var document: [String: JSONValue] = [
            "workers": .number(Double(setup.workers)), "payloadBytes": .number(Double(setup.payloadBytes)),
            "requests": .number(Double(setup.requests)), "workerCapacity": .number(Double(setup.capacity)),
            "libzmq": .string(ZMQContext.libraryVersion),
        ]
        if !echo.isEmpty {
            document["skillbus"] = .object(skillbus)
            document["baseline"] = .object(baseline)
            document["ratios"] = .object(ratios)
        }
        if let rounds {
            document["rounds"] = [
                "inFlight": .number(Double(BenchRun.roundsInFlight)),
                "singleInvocation": rounds.single.json, "fanout": rounds.fanout.json,
                "fanoutAgents": .number(Double(rounds.agents)),
                "fanoutInvocationsVsSingleRatio": .number(rounds.fanoutInvocationsVsSingle),
                "versusRequests": [
                    "inFlight": 64, "round": rounds.versusRequests.subject.json,
                    "request": rounds.versusRequests.baseline.json,
                    "throughputRatio": .number(rounds.versusRequests.throughputRatio),
                    "throughputRatios": .array(rounds.versusRequests.throughputRatios.map { .number($0) }),
                    "coordinatorCpuRatio": .number(rounds.cpuRatios.single),
                    "fanoutPerInvocation": rounds.fanoutPerInvocation.json,
                    "fanoutCpuRatio": .number(rounds.cpuRatios.fanout),
                    "planPerStep": rounds.planPerStep.json, "planCpuRatio": .number(rounds.cpuRatios.plan),
                ],
            ]
        }
        if let turns { document["turns"] = turns.json }
        if let deployed { document["deployed"] = deployed.json }
        if let mcp {
            document["mcp"] = [
                "inFlight": 1, "mcpCall": mcp.subject.json, "plainSend": mcp.baseline.json,
                "p50Ratio": .number(mcp.p50Ratio), "p50Ratios": .array(mcp.p50Ratios.map { .number($0) }),
            ]
        }
        return .object(document)
    }

    /// One table row: a name, then the figures in columns.
    static func row(_ name: String, _ columns: [String], nameWidth: Int = 24) -> String {
        "  " + name.padded(to: nameWidth)
            + columns.map { String(repeating: " ", count: max(1, 10 - $0.count)) + $0 }.joined()
    }

    private static func figures(_ report: LoadReport) -> [String] {
        [
            String(format: "%.0f", report.tasksPerSecond), String(format: "%.3f", report.percentileMs(0.5)),
            String(format: "%.3f", report.percentileMs(0.99)), String(format: "%.3f", report.maxMs),
            String(report.failed),
        ]
    }

    func printText() {
        print(
            "skillbus bench: \(setup.workers) worker(s) of capacity \(setup.capacity), \(setup.payloadBytes)-byte "
                + "echo text, libzmq \(ZMQContext.libraryVersion), on 127.0.0.1")
        if !echo.isEmpty {
            print("baseline: the same client and workers through a plain ZeroMQ ROUTER→DEALER proxy")
            print("")
            print(Self.row("echo", ["in flight", "tasks/s", "p50 ms", "p99 ms", "max ms", "failed"]))
            for level in levels {
                guard let figures = echo[level] else { continue }
                let inFlight = String(level)
                print(Self.row("skillbus", [inFlight] + Self.figures(figures.subject)))
                print(Self.row("baseline", [inFlight] + Self.figures(figures.baseline)))
                let ratios = [figures.throughputRatios, figures.p50Ratios, figures.p99Ratios].map {
                    String(format: "%.2fx", Self.median($0))
                }
                print(Self.row("skillbus / baseline", [inFlight] + ratios))
            }
            print("  (each ratio is the median of \(BenchRun.pairs) pairs run in alternating order; each side's row merges its runs)")
        }
        if let rounds {
            print("")
            print(Self.row("rounds", ["in flight", "rounds/s", "p50 ms", "p99 ms", "max ms", "failed"]))
            let inFlight = String(BenchRun.roundsInFlight)
            print(Self.row("one invocation", [inFlight] + Self.figures(rounds.single)))
            print(Self.row("fan-out to \(rounds.agents) worker(s)", [inFlight] + Self.figures(rounds.fanout)))
            print(
                String(
                    format: "  fan-out rounds run %.2fx the invocations/s of one-invocation rounds",
                    rounds.fanoutInvocationsVsSingle))
            print("")
            let versus = rounds.versusRequests
            print(
                Self.row("rounds against requests", ["in flight", "per s", "bus us", "client us", "ratio"], nameWidth: 30))
            func line(_ name: String, _ report: LoadReport, _ ratio: Double?) {
                let figures = [
                    "64", String(format: "%.0f", report.tasksPerSecond),
                    String(format: "%.1f", report.serverMicrosPerRequest),
                    String(format: "%.1f", report.clientMicrosPerRequest), ratio.map { String(format: "%.2fx", $0) } ?? "",
                ]
                print(Self.row(name, figures, nameWidth: 30))
            }
            let cpu = rounds.cpuRatios
            line("REQUEST", versus.baseline, nil)
            line("one-invocation ROUND: rate", versus.subject, versus.throughputRatio)
            line("  its coordinator CPU", versus.subject, cpu.single)
            line("fan-out: CPU per invocation", rounds.fanoutPerInvocation, cpu.fanout)
            line("plan: CPU per step", rounds.planPerStep, cpu.plan)
            print(
                "  (bus us: the coordinator's CPU per round, invocation or step; the rate ratio is the median of "
                    + "\(BenchRun.pairs) pairs in alternating order; CPU ratios: each shape's \(BenchRun.pairs) runs "
                    + "merged, against the REQUESTs')")
        }
        if let turns {
            print("")
            turns.printText()
        }
        if let deployed {
            print("")
            deployed.printText()
        }
        if let mcp {
            print("")
            print(Self.row("MCP, one at a time", ["p50 ms", "p99 ms", "ratio", "failed"], nameWidth: 34))
            let figures = [mcp.subject, mcp.baseline].map {
                [String(format: "%.3f", $0.percentileMs(0.5)), String(format: "%.3f", $0.percentileMs(0.99))]
            }
            print(
                Self.row(
                    "tools/call via skillbus mcp",
                    figures[0] + [String(format: "%.2fx", mcp.p50Ratio), String(mcp.failed)],
                    nameWidth: 34))
            print(Self.row("the same echo sent as a ROUND", figures[1], nameWidth: 34))
            print("  (the ratio is the median of the p50 ratios of \(BenchRun.pairs) pairs run in alternating order)")
        }
        if failures > 0 { print("\n\(failures) request(s) failed") }
    }
}
