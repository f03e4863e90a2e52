import Foundation
import Skillbus
import SkillbusCommands
import SkillbusTestSupport
import SkillbusZMQ

/// What priorities and the result cache cost on the hot path, as ratios to the plain path of the same run:
/// rounds with priorities (high and low mixed) against rounds without, on one coordinator; and echo with
/// the cache armed — pure with a lifetime, every request a miss (unique text), so each one is looked up
/// and stored — against the same echo on a coordinator whose workers declare no cache.
struct PriorityCacheFigures {
    var priorityRatios: [Double] = []
    var cacheRatios: [Double] = []
    /// The coordinators' CPU microseconds per request, cache armed (all misses) and plain.
    var cpuArmed: [Double] = []
    var cpuPlain: [Double] = []
    var best: (prioritized: LoadReport, plainRounds: LoadReport, cached: LoadReport, plainEcho: LoadReport)?
    /// The armed coordinator's cache after the run (AGENTS).
    var cacheEntries = 0
    var cacheBytes = 0
    var failures = 0

    var json: JSONValue {
        [
            "prioritizedRounds": best?.prioritized.json ?? .null, "plainRounds": best?.plainRounds.json ?? .null,
            "priorityThroughputRatio": .number(priorityRatios.median),
            "priorityThroughputRatios": .array(priorityRatios.map { .number($0) }),
            "cacheArmedMiss": best?.cached.json ?? .null, "plainEcho": best?.plainEcho.json ?? .null,
            "cacheThroughputRatio": .number(cacheRatios.median),
            "cacheThroughputRatios": .array(cacheRatios.map { .number($0) }),
            "coordinatorCpuMicrosPerRequest": ["cacheArmed": .number(cpuArmed.median), "plain": .number(cpuPlain.median)],
            "cacheEntries": .number(Double(cacheEntries)), "cacheBytes": .number(Double(cacheBytes)),
        ]
    }

    func printText() {
        print(
            String(
                format: "priorities at 64 in flight: rounds high/low mixed / plain rounds %.2fx (median of %d; target >= 0.9)",
                priorityRatios.median, priorityRatios.count))
        print(
            String(
                format: "cache armed, every request a miss, at 64 in flight: / plain echo %.2fx (median of %d; target >= 0.9)",
                cacheRatios.median, cacheRatios.count))
        print(
            String(
                format: "  best %.0f rounds/s prioritized, %.0f plain; %.0f tasks/s cache armed, %.0f plain",
                best?.prioritized.tasksPerSecond ?? 0, best?.plainRounds.tasksPerSecond ?? 0,
                best?.cached.tasksPerSecond ?? 0, best?.plainEcho.tasksPerSecond ?? 0))
        print(
            String(
                format: "  coordinator CPU %.1f us/request cache armed, %.1f plain (%.2fx)", cpuArmed.median,
                cpuPlain.median, PerfCommand.ratio(cpuArmed.median, cpuPlain.median)))
        print(
            String(
                format: "  cache after the run: %d entries, %.1f MB", cacheEntries, Double(cacheBytes) / 1_048_576))
    }
}

extension Bench {
    /// The echo workers of the cache-armed coordinator: as the main ones, and pure with a ten-minute lifetime.
    static let cachedEcho = [
        "--policy", #"echo={"idempotent":true,"retry":{"attemptTimeoutMs":15000},"pure":true,"cacheMs":600000}"#,
    ]

    /// Five pairs of each, in alternation, each side going first in turn.
    func priorityCacheCost(main: Cluster, cached: Cluster) async throws -> PriorityCacheFigures {
        var figures = PriorityCacheFigures()
        let prioritized = LoadGenerator.echoRounds(payloadBytes: setup.payloadBytes, priorities: true)
        let plainRounds = LoadGenerator.echoRounds(payloadBytes: setup.payloadBytes, priorities: false)
        let unique = LoadGenerator.skillbusUniqueEcho(payloadBytes: setup.payloadBytes)
        _ = try await measure(unique, cached.bus, requests: min(2000, setup.requests), inFlight: 64)  // warm it
        for pair in 1...5 {
            note("priorities and cache: measuring (pair \(pair) of 5)…")
            let onFirst = pair % 2 == 1
            func pairOf<T>(_ on: () async throws -> T, _ off: () async throws -> T) async throws -> (T, T) {
                if onFirst {
                    let first = try await on()
                    return (first, try await off())
                }
                let first = try await off()
                return (try await on(), first)
            }
            let (withPriorities, withoutPriorities) = try await pairOf(
                { try await measure(prioritized, main.bus, requests: setup.requests, inFlight: 64) },
                { try await measure(plainRounds, main.bus, requests: setup.requests, inFlight: 64) })
            let ((armed, cpuArmed), (plain, cpuPlain)) = try await pairOf(
                { try await measureWithCPU(unique, on: cached) }, { try await measureWithCPU(unique, on: main) })
            figures.cpuArmed.append(cpuArmed)
            figures.cpuPlain.append(cpuPlain)
            figures.failures += withPriorities.failed + withoutPriorities.failed + armed.failed + plain.failed
            figures.priorityRatios.append(
                PerfCommand.ratio(withPriorities.tasksPerSecond, withoutPriorities.tasksPerSecond))
            figures.cacheRatios.append(PerfCommand.ratio(armed.tasksPerSecond, plain.tasksPerSecond))
            func better(_ old: LoadReport?, _ new: LoadReport) -> LoadReport {
                guard let old, old.tasksPerSecond >= new.tasksPerSecond else { return new }
                return old
            }
            figures.best = (
                better(figures.best?.prioritized, withPriorities), better(figures.best?.plainRounds, withoutPriorities),
                better(figures.best?.cached, armed), better(figures.best?.plainEcho, plain)
            )
        }
        let client = try await SkillbusClient.connect(endpoint: cached.bus, context: context)
        defer { client.close() }
        let cache = try await client.agents()["cache"]
        figures.cacheEntries = cache?["entries"]?.intValue ?? 0
        figures.cacheBytes = cache?["bytes"]?.intValue ?? 0
        return figures
    }
}
