import Foundation
import Skillbus
import SkillbusCommands
import SkillbusZMQ

/// The phases of one `skillbus-perf` run, each measuring one part of `BenchReport`.
struct Bench {
    /// A coordinator with its echo workers, ready.
    typealias Cluster = BenchCluster

    let setup: BenchReport.Setup
    let supervisor: Supervisor
    let context: ZMQContext
    /// With `--json`, progress notes stay off standard error.
    let quiet: Bool

    static let levels = [1, 64]

    /// glibc's malloc on transparent huge pages, as deploy/skillbus-coordinator.service runs a coordinator: the
    /// figures are a deployed coordinator's. A GLIBC_TUNABLES that names the huge-page tunable is kept as given.
    static var hugePages: [String: String] {
        let given = ProcessInfo.processInfo.environment["GLIBC_TUNABLES"]
        if given?.contains("glibc.malloc.hugetlb") == true { return [:] }
        return ["GLIBC_TUNABLES": (given.map { $0 + ":" } ?? "") + "glibc.malloc.hugetlb=1:glibc.malloc.arena_max=1"]
    }

    func note(_ text: String) { if !quiet { printError(text) } }

    var echoLoad: LoadGenerator { .skillbusEcho(payloadBytes: setup.payloadBytes) }

    func measure(
        _ load: LoadGenerator, _ endpoint: String, requests: Int, inFlight: Int, credentials: CurveCredentials? = nil
    ) async throws -> LoadReport {
        try await load.measure(
            endpoint: endpoint, context: context, requests: requests, inFlight: inFlight, credentials: credentials)
    }

    /// One measurement at 64 in flight and the coordinator's CPU microseconds per request during it (its
    /// threads' exact run time, steadier on a shared machine than throughput).
    func measureWithCPU(_ load: LoadGenerator, on cluster: Cluster) async throws -> (LoadReport, Double) {
        try await measureWithCPU(load, cluster.bus, of: cluster.coordinator, requests: setup.requests, inFlight: 64)
    }

    /// One measurement against `endpoint` and the CPU microseconds per completed request that `process` (the
    /// coordinator or the baseline's proxy behind it) spent during it.
    func measureWithCPU(
        _ load: LoadGenerator, _ endpoint: String, of process: Child, requests: Int, inFlight: Int
    ) async throws -> (LoadReport, Double) {
        let before = PerfCommand.cpuSeconds(process.pid)
        let report = try await measure(load, endpoint, requests: requests, inFlight: inFlight)
        let cpu = PerfCommand.cpuSeconds(process.pid) - before
        return (report, cpu / Double(max(report.completed, 1)) * 1e6)
    }

    /// A coordinator and the echo workers; nil unless every worker registered within 30 s.
    /// With `keys`, the coordinator's config gives it keys and each worker connects with its own.
    func startCluster(
        name: String, coordinatorOptions: [String] = [], workerOptions: [String] = Bench.armedEcho,
        keys: BenchKeys? = nil
    ) async -> Cluster? {
        let capacity = setup.capacity
        return await BenchCluster.start(
            supervisor, name: name, workers: setup.workers,
            coordinatorArguments: coordinatorOptions + (keys.map { ["--config", $0.coordinatorConfig] } ?? []),
            coordinatorEnvironment: Self.hugePages,
            workerArguments: { index in
                ["--skills", "echo,memory.set,memory.get,text.lines", "--capacity", String(capacity)] + workerOptions
                    + (keys?.workerArguments(index) ?? [])
            }, context: context, credentials: keys?.client)
    }

    /// The raw ROUTER→DEALER proxy (a child process, like the coordinators) and its echo workers.
    func startBaseline() async -> BenchBaseline? { await BenchBaseline.start(supervisor, workers: setup.workers) }

    /// Echo on Skillbus and on the baseline at each level in flight, in `echoPairs` pairs whose order
    /// alternates (Skillbus first, then the baseline first, ...), so that a machine that gets busier or
    /// quieter weighs on both sides. Each side's report merges its pairs; each ratio is the median of the
    /// pairs' ratios, and so is the CPU per request at 64 in flight (the coordinator's and the proxy's).
    func echo(main: Cluster, baseline raw: BenchBaseline) async throws -> EchoFigures {
        let (bus, frontend) = (main.bus, raw.frontend)
        let baselineLoad = LoadGenerator.rawEcho(payloadBytes: setup.payloadBytes)
        var figures = EchoFigures()
        var coordinatorCPU: [Double] = []
        var proxyCPU: [Double] = []
        // Warm both paths (and let every raw worker connect) before measuring anything.
        _ = try await measure(echoLoad, bus, requests: min(2000, setup.requests), inFlight: 64)
        _ = try await measure(baselineLoad, frontend, requests: min(2000, setup.requests), inFlight: 64)
        for level in Self.levels {
            let count = Self.echoRequests(level: level, requests: setup.requests)
            note("measuring \(Self.echoPairs) pairs of \(count) requests at \(level) in flight…")
            var pairs: [(LoadReport, LoadReport)] = []
            for pair in 0..<Self.echoPairs {
                func ours() async throws -> (LoadReport, Double) {
                    try await measureWithCPU(echoLoad, bus, of: main.coordinator, requests: count, inFlight: level)
                }
                func theirs() async throws -> (LoadReport, Double) {
                    try await measureWithCPU(baselineLoad, frontend, of: raw.proxy, requests: count, inFlight: level)
                }
                let skillbus: (LoadReport, Double)
                let baseline: (LoadReport, Double)
                if pair % 2 == 0 {
                    skillbus = try await ours()
                    baseline = try await theirs()
                } else {
                    baseline = try await theirs()
                    skillbus = try await ours()
                }
                pairs.append((skillbus.0, baseline.0))
                if level == 64 {
                    coordinatorCPU.append(skillbus.1)
                    proxyCPU.append(baseline.1)
                }
            }
            figures.skillbus[level] = .merged(pairs.map(\.0))
            figures.baseline[level] = .merged(pairs.map(\.1))
            figures.pairRatios[level] = pairs.map { ours, theirs in
                BenchReport.LevelRatios(
                    throughput: PerfCommand.ratio(ours.tasksPerSecond, theirs.tasksPerSecond),
                    p50: PerfCommand.ratio(ours.percentileMs(0.5), theirs.percentileMs(0.5)),
                    p99: PerfCommand.ratio(ours.percentileMs(0.99), theirs.percentileMs(0.99)))
            }
        }
        figures.cpu = SpeedFigures.EchoCPU(coordinator: coordinatorCPU.median, proxy: proxyCPU.median)
        return figures
    }

    /// What the echo phase measured: each side's merged report and the pairs' ratios, by level in flight.
    struct EchoFigures {
        var skillbus: [Int: LoadReport] = [:]
        var baseline: [Int: LoadReport] = [:]
        var pairRatios: [Int: [BenchReport.LevelRatios]] = [:]
        var cpu = SpeedFigures.EchoCPU()
    }

    static let echoPairs = 5

    /// Requests per side in each echo pair: `--requests` at 64 in flight; at 1 in flight, where each takes a
    /// whole round trip, at most 1,000.
    static func echoRequests(level: Int, requests: Int) -> Int { level == 1 ? min(requests, 1000) : requests }

    /// The same load on a coordinator with and without single-flight, in alternation, each going first in
    /// turn. The ratio is the median of seven pairs; the coordinators' CPU time per request says the same
    /// more steadily.
    func deduplicationCost(with main: Cluster, without plain: Cluster) async throws -> BenchReport.Deduplication {
        var figures = BenchReport.Deduplication()
        func timed(_ cluster: Cluster) async throws -> (LoadReport, Double) {
            try await measureWithCPU(echoLoad, on: cluster)
        }
        for pair in 1...7 {
            note("deduplication: measuring with and without (pair \(pair) of 7)…")
            let onFirst = pair % 2 == 1
            let first = try await timed(onFirst ? main : plain)
            let second = try await timed(onFirst ? plain : main)
            let ((on, cpuOn), (off, cpuOff)) = onFirst ? (first, second) : (second, first)
            figures.cpuWith.append(cpuOn)
            figures.cpuWithout.append(cpuOff)
            figures.ratios.append(PerfCommand.ratio(on.tasksPerSecond, off.tasksPerSecond))
            let best = figures.best
            figures.best = (
                best.map { $0.with.tasksPerSecond >= on.tasksPerSecond ? $0.with : on } ?? on,
                best.map { $0.without.tasksPerSecond >= off.tasksPerSecond ? $0.without : off } ?? off
            )
        }
        // What remembering rounds costs in memory, after all those requests (up to the retention limit).
        figures.residentMB = (
            PerfCommand.residentMB(main.coordinator.pid), PerfCommand.residentMB(plain.coordinator.pid)
        )
        return figures
    }

    /// Whole rounds: one invocation, a fan-out to every echo worker, and a plan of 20 steps of which 10
    /// repeat another. The fan-out and plain echo requests of the same text, at the same level in flight,
    /// are measured with the coordinator's CPU time (per invocation of a fan-out, per request), in five
    /// pairs of alternating order; the figures are those of the pair with the median ratio.
    func rounds(main: Cluster) async throws -> (BenchReport.Rounds, SpeedFigures.FanoutCPU) {
        let bus = main.bus
        note("rounds: fan-out to \(setup.workers) agents and a 20-step plan with 10 duplicates…")
        let count = min(setup.requests, 5000)
        let single = try await measure(
            .rounds(.invoke(skill: "echo", parameters: ["text": "x"])), bus, requests: count, inFlight: 16)
        func requests() async throws -> (LoadReport, Double) {
            try await measureWithCPU(
                .skillbusEcho(payloadBytes: 1), bus, of: main.coordinator, requests: count, inFlight: 16)
        }
        func fanouts() async throws -> (LoadReport, Double) {
            let (report, cpu) = try await measureWithCPU(
                .rounds(.fanout(skill: "echo", parameters: ["text": "x"], agents: nil, aggregate: .all)), bus,
                of: main.coordinator, requests: count, inFlight: 16)
            return (report, cpu / Double(setup.workers))
        }
        var pairs: [SpeedFigures.FanoutCPU] = []
        var fanoutRuns: [LoadReport] = []
        for pair in 0..<5 {
            let fanoutFirst = pair % 2 == 1
            let first = try await fanoutFirst ? fanouts() : requests()
            let second = try await fanoutFirst ? requests() : fanouts()
            let ((request, requestCPU), (fanout, invocationCPU)) = fanoutFirst ? (second, first) : (first, second)
            fanoutRuns.append(fanout)
            pairs.append(
                SpeedFigures.FanoutCPU(
                    perRequest: requestCPU, perInvocation: invocationCPU, inFlight: 16, requestsFailed: request.failed))
        }
        let steps = (0..<20).map { PlanStep(id: "s\($0)", skill: "echo", parameters: ["text": .string("t\($0 % 10)")]) }
        let plan = try await measure(
            .rounds(.plan(steps: steps, continueOnFailure: false)), bus, requests: min(setup.requests, 2000),
            inFlight: 4)
        var cpu = pairs.sorted { $0.ratio < $1.ratio }[pairs.count / 2]
        cpu.requestsFailed = pairs.reduce(0) { $0 + $1.requestsFailed }
        cpu.pairRatios = pairs.map(\.ratio)
        let rounds = BenchReport.Rounds(
            single: single, fanout: .merged(fanoutRuns), plan: plan, fanoutAgents: setup.workers)
        return (rounds, cpu)
    }

    /// Routing with a small and a large registry (in alternation, best of two each: the machine's noise
    /// hits both alike), a new replica's sync time, and kill -9 of a worker to the update in a replica.
    func registry(
        _ cluster: Cluster, agents: Int, skillsPerAgent: Int, snapshotRuns: Int, killRuns: Int
    ) async throws -> BenchReport.RegistryFigures {
        let (bus, feed) = (cluster.bus, cluster.feed)
        var best: (small: LoadReport?, large: LoadReport?) = (nil, nil)
        var large: RegisteredOnlyAgents?
        for round in 1...2 {
            note("registry: routing with 10 skills registered (round \(round) of 2)…")
            let small = try await RegisteredOnlyAgents.start(bus: bus, context: context, agents: 1, skillsPerAgent: 9, prefix: "small")
            await PerfCommand.waitForReplicasInSync(bus: bus, context: context)
            let smallReport = try await measure(echoLoad, bus, requests: setup.requests, inFlight: 64)
            await small.close()
            note("registry: routing with \(agents * skillsPerAgent) skills over \(agents) agents (round \(round) of 2)…")
            large = try await RegisteredOnlyAgents.start(
                bus: bus, context: context, agents: agents, skillsPerAgent: skillsPerAgent, prefix: "large")
            // Steady state: the workers' replicas have taken in the new registry before routing is timed.
            await PerfCommand.waitForReplicasInSync(bus: bus, context: context)
            let largeReport = try await measure(echoLoad, bus, requests: setup.requests, inFlight: 64)
            if (best.small?.tasksPerSecond ?? -1) < smallReport.tasksPerSecond { best.small = smallReport }
            if (best.large?.tasksPerSecond ?? -1) < largeReport.tasksPerSecond { best.large = largeReport }
            if round < 2 { await large?.close() }  // the last round keeps them for the snapshot timings
        }
        guard let routingSmall = best.small, let routingLarge = best.large else {
            preconditionFailure("both routing rounds ran, so both have a best report")
        }
        note("registry: timing \(snapshotRuns) new replica(s)…")
        let snapshots = try await RegistryBench.snapshotTimes(
            bus: bus, feed: feed, context: context, agents: agents, runs: snapshotRuns)
        await large?.close()
        note("registry: timing \(killRuns) kill -9 run(s) (about 3 s each)…")
        let kills = try await RegistryBench.killTimes(
            supervisor: supervisor, bus: bus, feed: feed, context: context, runs: killRuns)
        return BenchReport.RegistryFigures(
            agents: agents, skills: agents * skillsPerAgent, routingSmall: routingSmall, routingLarge: routingLarge,
            newReplicaMs: snapshots.replica, rawSnapshotMs: snapshots.raw, killToReplicaMs: kills)
    }
}
