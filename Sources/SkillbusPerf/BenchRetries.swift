import Foundation
import Skillbus
import SkillbusCommands
import SkillbusZMQ

/// What arming retries costs on the hot path: echo at 64 in flight with a full retry policy (idempotent, an
/// attempt timeout, so every dispatch gives its attempt a deadline) against echo with none, on two
/// coordinators of the same run, in alternation.
struct RetryFigures {
    var ratios: [Double] = []
    var best: (armed: LoadReport, plain: LoadReport)?
    var cpuArmed: [Double] = []
    var cpuPlain: [Double] = []
    /// Failed requests over every measurement.
    var failures = 0

    var json: JSONValue {
        [
            "armed": best?.armed.json ?? .null, "plain": best?.plain.json ?? .null,
            "throughputRatio": .number(ratios.median), "throughputRatios": .array(ratios.map { .number($0) }),
            "coordinatorCpuMicrosPerRequest": ["armed": .number(cpuArmed.median), "plain": .number(cpuPlain.median)],
        ]
    }

    func printText() {
        print(
            String(
                format:
                    "retries armed at 64 in flight: throughput armed / plain %.2fx (median of %d; target >= 0.9)",
                ratios.median, ratios.count))
        print(
            String(
                format: "  best %.0f tasks/s armed, %.0f plain; coordinator CPU %.1f us/request armed, %.1f plain",
                best?.armed.tasksPerSecond ?? 0, best?.plain.tasksPerSecond ?? 0, cpuArmed.median, cpuPlain.median))
    }
}

extension Bench {
    /// The policy the measured echo workers give echo: retries armed, with an attempt timeout as long as the
    /// requests' own (so it never fires, but every dispatch computes the attempt's deadline).
    static let armedEcho = ["--policy", #"echo={"idempotent":true,"retry":{"attemptTimeoutMs":15000}}"#]
    /// Echo with no retry policy at all.
    static let plainEcho = ["--policy", #"echo={"idempotent":false,"retry":null}"#]

    /// Pairs in alternation, each side going first in turn; the ratio is the median of five pairs.
    func retryCost(armed: Cluster, plain: Cluster) async throws -> RetryFigures {
        var figures = RetryFigures()
        func timed(_ cluster: Cluster) async throws -> (LoadReport, Double) {
            try await measureWithCPU(echoLoad, on: cluster)
        }
        _ = try await measure(echoLoad, plain.bus, requests: min(2000, setup.requests), inFlight: 64)  // warm it
        for pair in 1...5 {
            note("retries: measuring armed and plain (pair \(pair) of 5)…")
            let armedFirst = pair % 2 == 1
            let first = try await timed(armedFirst ? armed : plain)
            let second = try await timed(armedFirst ? plain : armed)
            let ((on, cpuOn), (off, cpuOff)) = armedFirst ? (first, second) : (second, first)
            figures.failures += on.failed + off.failed
            figures.cpuArmed.append(cpuOn)
            figures.cpuPlain.append(cpuOff)
            figures.ratios.append(PerfCommand.ratio(on.tasksPerSecond, off.tasksPerSecond))
            let best = figures.best
            figures.best = (
                best.map { $0.armed.tasksPerSecond >= on.tasksPerSecond ? $0.armed : on } ?? on,
                best.map { $0.plain.tasksPerSecond >= off.tasksPerSecond ? $0.plain : off } ?? off
            )
        }
        return figures
    }
}
