import Foundation
import Skillbus
import SkillbusZMQ

/// `skillbus bench`: what Skillbus costs on this machine, against a plain ZeroMQ proxy, as `redis-benchmark`
/// or `nats bench` measure theirs. The team's full figures are `skillbus-perf`'s (`make bench`).
public enum BenchCommand: SkillbusCommand {
    public static let spec = CommandSpec(
        name: "bench",
        abstract: "Measure throughput and latency on this machine against a plain ZeroMQ proxy.",
        discussion: """
            Starts a coordinator with N echo workers and, beside it, the baseline: the same client and worker
            sockets through a plain ZeroMQ ROUTER→DEALER proxy, with no Skillbus logic. All are child processes
            on 127.0.0.1, stopped when the run ends; they inherit its environment (GLIBC_TUNABLES, say, as
            deploy/skillbus-coordinator.service sets it).
            It sends echo requests to both at 1 and at 64 in flight, in five pairs whose order alternates (a
            machine that gets busier or quieter weighs on both), then whole rounds at 16 in flight: rounds of one
            invocation, and fan-out rounds that invoke echo on every worker.
            The ratios (skillbus / baseline, the medians of the pairs) are the figures to compare between
            machines; the absolute figures depend on this one. Exit status 1 when any request failed.

            EXAMPLE: skillbus bench
                     skillbus bench --workers 2 --requests 5000 --json
            """,
        options: [
            OptionSpec("--workers", value: "N", help: "Worker processes on each side (default 4)."),
            OptionSpec(
                "--requests", value: "N",
                help: "Echo requests per side of each pair at 64 in flight (at 1 in flight at most 1000; "
                    + "rounds at most 5000) (default 20000)."),
            OptionSpec("--payload-bytes", value: "N", help: "Echo text size (default 100)."),
            OptionSpec(
                "--capacity", value: "N",
                help: "Capacity of each Skillbus worker (default 32: requests wait for the bus, not for a worker)."),
            OptionSpec("--json", help: "Print one JSON object with every figure."),
        ])

    public static func run(_ arguments: ParsedArguments) async throws -> Int32 {
        let setup = BenchRun.Setup(
            workers: try arguments.int("--workers", minimum: 1, maximum: 64, in: spec) ?? 4,
            requests: try arguments.int("--requests", minimum: 10, maximum: 10_000_000, in: spec) ?? 20_000,
            payloadBytes: try arguments.int("--payload-bytes", minimum: 1, maximum: 1 << 20, in: spec) ?? 100,
            capacity: try arguments.int("--capacity", minimum: 1, maximum: 100_000, in: spec) ?? 32)
        let json = arguments.flag("--json")
        let supervisor = try Supervisor()
        defer { supervisor.cleanUp() }
        let bench = BenchRun(setup: setup, context: try ZMQContext(), quiet: json)
        bench.note("starting a coordinator with \(setup.workers) echo worker(s), and the baseline proxy with as many…")
        let capacity = String(setup.capacity)
        guard
            let cluster = await BenchCluster.start(
                supervisor, name: "bench", workers: setup.workers,
                workerArguments: { _ in ["--skills", "echo", "--capacity", capacity] }, context: bench.context)
        else {
            printError("error: the coordinator or its workers did not start within 30 s")
            await supervisor.stopAll()
            return 1
        }
        guard let baseline = await BenchBaseline.start(supervisor, workers: setup.workers) else {
            printError("error: the baseline proxy did not start within 20 s")
            await supervisor.stopAll()
            return 1
        }
        let echo = try await bench.echo(bus: cluster.bus, baseline: baseline.frontend)
        let rounds = try await bench.rounds(bus: cluster.bus)
        await supervisor.stopAll()

        let results = BenchResults(setup: setup, echo: echo, rounds: rounds)
        if json { print(results.json.jsonString) } else { results.printText() }
        return results.failures == 0 ? 0 : 1
    }
}

/// The measurements of one `skillbus bench` run.
struct BenchRun {
    struct Setup {
        var workers: Int
        var requests: Int
        var payloadBytes: Int
        var capacity: Int
    }

    let setup: Setup
    let context: ZMQContext
    /// With `--json`, progress notes stay off standard error.
    let quiet: Bool

    static let levels = [1, 64]
    static let pairs = 5
    static let roundsInFlight = 16

    func note(_ text: String) { if !quiet { printError(text) } }

    func measure(_ load: LoadGenerator, _ endpoint: String, requests: Int, inFlight: Int) async throws -> LoadReport {
        try await load.measure(endpoint: endpoint, context: context, requests: requests, inFlight: inFlight)
    }

    /// Echo on the bus and on the baseline at each level, in pairs whose order alternates (the bus first, then
    /// the baseline first, ...). Each side's figures merge its runs; each ratio is the median of the pairs'.
    func echo(bus: String, baseline: String) async throws -> [Int: BenchResults.EchoLevel] {
        let ours = LoadGenerator.skillbusEcho(payloadBytes: setup.payloadBytes)
        let theirs = LoadGenerator.rawEcho(payloadBytes: setup.payloadBytes)
        // Warm both paths (and let every raw worker connect) before measuring anything.
        _ = try await measure(ours, bus, requests: min(2000, setup.requests), inFlight: 64)
        _ = try await measure(theirs, baseline, requests: min(2000, setup.requests), inFlight: 64)
        var levels: [Int: BenchResults.EchoLevel] = [:]
        for level in Self.levels {
            // At 1 in flight each request waits for a whole round trip: 1,000 are plenty.
            let count = level == 1 ? min(setup.requests, 1000) : setup.requests
            note("echo: \(Self.pairs) pairs of \(count) requests at \(level) in flight…")
            var pairs: [(skillbus: LoadReport, baseline: LoadReport)] = []
            for pair in 0..<Self.pairs {
                if pair % 2 == 0 {
                    let first = try await measure(ours, bus, requests: count, inFlight: level)
                    pairs.append((first, try await measure(theirs, baseline, requests: count, inFlight: level)))
                } else {
                    let first = try await measure(theirs, baseline, requests: count, inFlight: level)
                    pairs.append((try await measure(ours, bus, requests: count, inFlight: level), first))
                }
            }
            levels[level] = BenchResults.EchoLevel(pairs: pairs)
        }
        return levels
    }

    /// Rounds of one echo invocation, and fan-out rounds that invoke echo on every worker.
    func rounds(bus: String) async throws -> BenchResults.Rounds {
        let count = min(setup.requests, 5000)
        note("rounds: \(count) of one invocation, then \(count) fan-outs to \(setup.workers) worker(s)…")
        let single = try await measure(
            .rounds(.invoke(skill: "echo", parameters: ["text": "x"])), bus, requests: count,
            inFlight: Self.roundsInFlight)
        let fanout = try await measure(
            .rounds(.fanout(skill: "echo", parameters: ["text": "x"], agents: nil, aggregate: .all)), bus,
            requests: count, inFlight: Self.roundsInFlight)
        return BenchResults.Rounds(single: single, fanout: fanout, agents: setup.workers)
    }
}
