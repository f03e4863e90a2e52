import CZeroMQ
import Foundation
import Skillbus
import SkillbusZMQ

/// `skillbus bench`
public enum BenchCommand: SkillbusCommand {
    public static let spec = CommandSpec(
        name: "bench",
        abstract: "Measure echo throughput and latency against a raw ZeroMQ baseline.",
        discussion: """
            Starts a coordinator with N workers (child processes on 127.0.0.1) and, beside it, a raw baseline:
            the same client and worker sockets through a plain ROUTER→DEALER proxy with no Skillbus logic.
            Measures each at 1 and at 64 requests in flight, in alternation, and prints both and their ratio.
            Absolute numbers depend on the machine; the ratio is the figure to compare.

            EXAMPLE: skillbus bench --workers 4 --json
            """,
        options: [
            OptionSpec("--workers", value: "N", help: "Worker processes on each side (default 4)."),
            OptionSpec("--requests", value: "N", help: "Measured requests per level (default 20000)."),
            OptionSpec("--payload-bytes", value: "N", help: "Echo payload size (default 100)."),
            OptionSpec("--capacity", value: "N", help: "Capacity of each Skillbus worker (default 32)."),
            OptionSpec(
                "--registry-agents", value: "N", help: "Registry-only agents for the registry figures (default 100)."),
            OptionSpec("--skills-per-agent", value: "N", help: "Skills each of them offers (default 100)."),
            OptionSpec("--snapshot-runs", value: "N", help: "New replicas timed (default 5)."),
            OptionSpec("--kill-runs", value: "N", help: "Workers killed with kill -9 and timed (default 3)."),
            OptionSpec("--json", help: "Print one JSON object with every figure."),
        ])

    static let levels = [1, 64]

    public static func run(_ arguments: ParsedArguments) async throws -> Int32 {
        let workers = try arguments.int("--workers", minimum: 1, in: spec) ?? 4
        let requests = try arguments.int("--requests", minimum: 10, in: spec) ?? 20_000
        let payloadBytes = try arguments.int("--payload-bytes", minimum: 1, in: spec) ?? 100
        let capacity = try arguments.int("--capacity", minimum: 1, in: spec) ?? 32
        let registryAgents = try arguments.int("--registry-agents", minimum: 1, maximum: 10_000, in: spec) ?? 100
        let skillsPerAgent = try arguments.int("--skills-per-agent", minimum: 1, maximum: 10_000, in: spec) ?? 100
        let snapshotRuns = try arguments.int("--snapshot-runs", minimum: 1, maximum: 1000, in: spec) ?? 5
        let killRuns = try arguments.int("--kill-runs", minimum: 0, maximum: 100, in: spec) ?? 3
        let json = arguments.flag("--json")
        func note(_ text: String) { if !json { printError(text) } }

        let supervisor = try Supervisor()
        defer { supervisor.cleanUp() }
        let context = try ZMQContext()
        let local = "tcp://127.0.0.1:*"

        note("starting a coordinator and \(workers) worker(s), and a second pair without deduplication…")
        guard
            let (bus, feed, mainCoordinator) = await startCluster(
                supervisor, name: "main", workers: workers, capacity: capacity, context: context),
            let (plainBus, _, plainCoordinator) = await startCluster(
                supervisor, name: "nodedup", workers: workers, capacity: capacity, context: context,
                coordinatorOptions: ["--no-dedup"])
        else {
            printError("error: a coordinator or its workers did not start within 30 s")
            await supervisor.stopAll()
            return 1
        }

        note("starting the baseline proxy and \(workers) raw worker(s)…")
        let proxy = supervisor.start(
            name: "proxy", arguments: [BaselineProxyCommand.spec.name, "--frontend", local, "--backend", local],
            quiet: true)
        guard let proxyReady = await proxy.readyLine(timeout: .seconds(20)), let frontend = proxyReady["frontend"],
            let backend = proxyReady["backend"]
        else {
            printError("error: the baseline proxy did not start")
            await supervisor.stopAll()
            return 1
        }
        for index in 0..<workers {
            _ = supervisor.start(
                name: "raw-\(index)", arguments: [BaselineWorkerCommand.spec.name, "--connect", backend], quiet: true)
        }

        let skillbusLoad = LoadGenerator.skillbusEcho(payloadBytes: payloadBytes)
        let baselineLoad = LoadGenerator.rawEcho(payloadBytes: payloadBytes)
        var skillbus: [Int: LoadReport] = [:]
        var baseline: [Int: LoadReport] = [:]
        // Warm both paths (and let every raw worker connect) before measuring anything.
        _ = try await measure(skillbusLoad, bus, context, requests: min(2000, requests), inFlight: 64)
        _ = try await measure(baselineLoad, frontend, context, requests: min(2000, requests), inFlight: 64)
        for level in levels {
            let count = level == 1 ? min(requests, 5000) : requests
            note("measuring \(count) requests at \(level) in flight…")
            skillbus[level] = try await measure(skillbusLoad, bus, context, requests: count, inFlight: level)
            baseline[level] = try await measure(baselineLoad, frontend, context, requests: count, inFlight: level)
        }

        // The cost of single-flight: the same load on a coordinator without it, in alternation. The ratio is
        // the median of seven pairs; the coordinators' CPU time per request says the same more steadily.
        var dedupRatios: [Double] = []
        var withDedup: LoadReport?
        var withoutDedup: LoadReport?
        var cpuWith: [Double] = []
        var cpuWithout: [Double] = []
        /// One measurement and the coordinator's CPU microseconds per request during it.
        func timed(_ endpoint: String, _ coordinator: Child) async throws -> (LoadReport, Double) {
            let before = cpuSeconds(coordinator.pid)
            let report = try await measure(skillbusLoad, endpoint, context, requests: requests, inFlight: 64)
            return (report, (cpuSeconds(coordinator.pid) - before) / Double(max(report.completed, 1)) * 1e6)
        }
        for round in 1...7 {
            note("deduplication: measuring with and without (round \(round) of 7)…")
            // Which goes first alternates too, so that neither always follows the other.
            let first = try await round % 2 == 1 ? timed(bus, mainCoordinator) : timed(plainBus, plainCoordinator)
            let second = try await round % 2 == 1 ? timed(plainBus, plainCoordinator) : timed(bus, mainCoordinator)
            let ((on, cpuOn), (off, cpuOff)) = round % 2 == 1 ? (first, second) : (second, first)
            cpuWith.append(cpuOn)
            cpuWithout.append(cpuOff)
            dedupRatios.append(ratio(on.tasksPerSecond, off.tasksPerSecond))
            if withDedup == nil || on.tasksPerSecond > withDedup!.tasksPerSecond { withDedup = on }
            if withoutDedup == nil || off.tasksPerSecond > withoutDedup!.tasksPerSecond { withoutDedup = off }
        }
        guard let withDedup, let withoutDedup else { return 1 }
        // What remembering rounds costs in memory, after all those requests (up to the retention limit).
        let (memoryWith, memoryWithout) = (residentMB(mainCoordinator.pid), residentMB(plainCoordinator.pid))

        // Rounds: a fan-out to every echo worker, and a plan of 20 steps of which 10 repeat another.
        note("rounds: fan-out to \(workers) agents and a 20-step plan with 10 duplicates…")
        let single = try await measure(
            .rounds(.invoke(skill: "echo", parameters: ["text": "x"])), bus, context, requests: min(requests, 5000),
            inFlight: 16)
        let fanout = try await measure(
            .rounds(.fanout(skill: "echo", parameters: ["text": "x"], agents: nil, aggregate: .all)), bus, context,
            requests: min(requests, 5000), inFlight: 16)
        let planSteps = (0..<20).map {
            PlanStep(id: "s\($0)", skill: "echo", parameters: ["text": .string("t\($0 % 10)")])
        }
        let plan = try await measure(
            .rounds(.plan(steps: planSteps, continueOnFailure: false)), bus, context, requests: min(requests, 2000),
            inFlight: 4)

        // Registry figures: routing with a small and a large registry, replica sync time, kill -9 to replica.
        // Small and large registries in alternation, best of two each: the machine's noise hits both alike.
        let largeSkills = registryAgents * skillsPerAgent
        var routingSmall: LoadReport?
        var routingLarge: LoadReport?
        var large: RegisteredOnlyAgents?
        for round in 1...2 {
            note("registry: routing with 10 skills registered (round \(round) of 2)…")
            let small = try RegisteredOnlyAgents(
                bus: bus, context: context, agents: 1, skillsPerAgent: 9, prefix: "small")
            await waitForReplicasInSync(bus: bus, context: context)
            let smallReport = try await measure(skillbusLoad, bus, context, requests: requests, inFlight: 64)
            small.close()
            note("registry: routing with \(largeSkills) skills over \(registryAgents) agents (round \(round) of 2)…")
            large = try RegisteredOnlyAgents(
                bus: bus, context: context, agents: registryAgents, skillsPerAgent: skillsPerAgent, prefix: "large")
            // Steady state: the workers' replicas have taken in the new registry before routing is timed.
            await waitForReplicasInSync(bus: bus, context: context)
            let largeReport = try await measure(skillbusLoad, bus, context, requests: requests, inFlight: 64)
            if routingSmall == nil || smallReport.tasksPerSecond > routingSmall!.tasksPerSecond {
                routingSmall = smallReport
            }
            if routingLarge == nil || largeReport.tasksPerSecond > routingLarge!.tasksPerSecond {
                routingLarge = largeReport
            }
            if round < 2 { large?.close() }  // the last round keeps them for the snapshot timings
        }
        guard let routingSmall, let routingLarge, let large else { return 1 }
        note("registry: timing \(snapshotRuns) new replica(s)…")
        let snapshots = try await RegistryBench.snapshotTimes(
            bus: bus, feed: feed, context: context, agents: registryAgents, runs: snapshotRuns)
        large.close()
        note("registry: timing \(killRuns) kill -9 run(s) (about 3 s each)…")
        let kills = try await RegistryBench.killTimes(
            supervisor: supervisor, bus: bus, feed: feed, context: context, runs: killRuns)
        await supervisor.stopAll()

        var document: [String: JSONValue] = [
            "workers": .number(Double(workers)), "payloadBytes": .number(Double(payloadBytes)),
            "requests": .number(Double(requests)), "workerCapacity": .number(Double(capacity)),
            "libzmq": .string(ZMQContext.libraryVersion),
        ]
        var skillbusJSON: [String: JSONValue] = [:]
        var baselineJSON: [String: JSONValue] = [:]
        var ratios: [String: JSONValue] = [:]
        for level in levels {
            let key = "inFlight\(level)"
            let ours = skillbus[level]!
            let theirs = baseline[level]!
            skillbusJSON[key] = ours.json
            baselineJSON[key] = theirs.json
            ratios[key] = [
                "throughputRatio": .number(ratio(ours.tasksPerSecond, theirs.tasksPerSecond)),
                "p50LatencyRatio": .number(ratio(ours.percentileMs(0.5), theirs.percentileMs(0.5))),
                "p99LatencyRatio": .number(ratio(ours.percentileMs(0.99), theirs.percentileMs(0.99))),
            ]
        }
        document["skillbus"] = .object(skillbusJSON)
        document["baseline"] = .object(baselineJSON)
        document["ratios"] = .object(ratios)
        // The bus's default heartbeat is 1 s and a worker is dead after 3 missed ones.
        let livenessBoundMs = 3000.0
        document["registry"] = [
            "agents": .number(Double(registryAgents)), "skills": .number(Double(largeSkills)),
            "newReplicaMs": [
                "median": .number(snapshots.replica.median), "runs": .array(snapshots.replica.map { .number($0) }),
            ],
            "rawSnapshotMs": [
                "median": .number(snapshots.raw.median), "runs": .array(snapshots.raw.map { .number($0) }),
            ],
            "newReplicaVsRawRatio": .number(ratio(snapshots.replica.median, snapshots.raw.median)),
            "killToReplicaMs": [
                "median": .number(kills.median), "max": .number(kills.max() ?? 0),
                "runs": .array(kills.map { .number($0) }),
            ],
            "killVsLivenessBoundRatio": .number(ratio(kills.max() ?? 0, livenessBoundMs)),
            "routing10Skills": routingSmall.json, "routingLargeRegistry": routingLarge.json,
            "routingLargeVsSmallRatio": .number(ratio(routingLarge.tasksPerSecond, routingSmall.tasksPerSecond)),
        ]
        document["rounds"] = [
            "singleInvocation": single.json, "fanout": fanout.json, "fanoutAgents": .number(Double(workers)),
            "fanoutInvocationsVsSingleRatio": .number(
                ratio(fanout.tasksPerSecond * Double(workers), single.tasksPerSecond)),
            "plan20Steps10Duplicates": plan.json,
            "planVsSingleP50Ratio": .number(ratio(plan.percentileMs(0.5), single.percentileMs(0.5))),
        ]
        document["deduplication"] = [
            "with": withDedup.json, "without": withoutDedup.json,
            "throughputRatio": .number(dedupRatios.median), "throughputRatios": .array(dedupRatios.map { .number($0) }),
            "coordinatorCpuMicrosPerRequest": ["with": .number(cpuWith.median), "without": .number(cpuWithout.median)],
            "coordinatorResidentMB": ["with": .number(memoryWith), "without": .number(memoryWithout)],
        ]
        if json {
            print(JSONValue.object(document).jsonString)
        } else {
            print(
                "skillbus bench: \(workers) workers, \(payloadBytes)-byte echo payload, libzmq \(ZMQContext.libraryVersion)"
            )
            print("in flight  system      tasks/s     p50 ms   p99 ms   max ms   failed")
            for level in levels {
                for (name, report) in [("skillbus", skillbus[level]!), ("baseline", baseline[level]!)] {
                    print(
                        String(
                            format: "%-10d %-10@ %9.0f %9.3f %8.3f %8.3f %8d", level, name, report.tasksPerSecond,
                            report.percentileMs(0.5), report.percentileMs(0.99), report.maxMs, report.failed))
                }
                let r = ratios["inFlight\(level)"]!
                print(
                    String(
                        format: "%-10d ratio       %8.2fx  p50 %.2fx  p99 %.2fx (skillbus / baseline)", level,
                        r["throughputRatio"]!.doubleValue!, r["p50LatencyRatio"]!.doubleValue!,
                        r["p99LatencyRatio"]!.doubleValue!))
            }
            print("")
            print("rounds (16 in flight; the plan 4)   rounds/s   p50 ms   p99 ms")
            for (name, report) in [
                ("one invocation", single), ("fan-out to \(workers) agents", fanout),
                ("plan: 20 steps, 10 repeats", plan),
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
                    ratio(fanout.tasksPerSecond * Double(workers), single.tasksPerSecond),
                    ratio(plan.percentileMs(0.5), single.percentileMs(0.5))))
            print("")
            print(
                String(
                    format:
                        "deduplication at 64 in flight: throughput with / without %.2fx (median of 7; target >= 0.9)",
                    dedupRatios.median))
            print(
                String(
                    format:
                        "  best %.0f tasks/s with it, %.0f without; coordinator CPU %.1f us/request with, %.1f without",
                    withDedup.tasksPerSecond, withoutDedup.tasksPerSecond, cpuWith.median, cpuWithout.median))
            print(
                String(
                    format: "  coordinator memory (resident) %.0f MB with it, %.0f MB without", memoryWith,
                    memoryWithout))
            print("")
            print("registry: \(largeSkills) skills over \(registryAgents) agents")
            print(
                String(
                    format:
                        "  new replica holds it in   %8.1f ms median (target < 200); raw snapshot transfer %.1f ms (%.2fx)",
                    snapshots.replica.median, snapshots.raw.median,
                    ratio(snapshots.replica.median, snapshots.raw.median)))
            if !kills.isEmpty {
                print(
                    String(
                        format:
                            "  kill -9 to replica update %8.1f ms median, %.1f ms max (target < 3500; bound 3 x 1 s heartbeat)",
                        kills.median, kills.max() ?? 0))
            }
            print(
                String(
                    format: "  routing at 64 in flight   %8.0f tasks/s with 10 skills, %.0f with %d (%.2fx)",
                    routingSmall.tasksPerSecond, routingLarge.tasksPerSecond, largeSkills + 1,
                    ratio(routingLarge.tasksPerSecond, routingSmall.tasksPerSecond)))
        }
        let failures =
            levels.reduce(0) { $0 + skillbus[$1]!.failed + baseline[$1]!.failed } + routingSmall.failed
            + routingLarge.failed + single.failed + fanout.failed + plan.failed
        return failures == 0 ? 0 : 1
    }

    static func ratio(_ numerator: Double, _ denominator: Double) -> Double {
        denominator > 0 ? (numerator / denominator * 1000).rounded() / 1000 : 0
    }

    /// Runs the blocking load loop on a thread of its own, off the cooperative pool.
    static func measure(
        _ load: LoadGenerator, _ endpoint: String, _ context: ZMQContext, requests: Int, inFlight: Int
    ) async throws -> LoadReport {
        try await withCheckedThrowingContinuation { continuation in
            let thread = Thread {
                continuation.resume(
                    with: Result {
                        try load.run(
                            endpoint: endpoint, context: context, requests: requests, inFlight: inFlight,
                            timeLimit: .seconds(60))
                    })
            }
            thread.start()
        }
    }

    /// A process's resident memory in MB (VmRSS; 0 when it cannot be read).
    static func residentMB(_ pid: Int32?) -> Double {
        guard let pid, let status = try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8),
            let line = status.split(separator: "\n").first(where: { $0.hasPrefix("VmRSS:") }),
            let kilobytes = line.split(whereSeparator: \.isWhitespace).dropFirst().first.flatMap({ Double($0) })
        else { return 0 }
        return kilobytes / 1024
    }

    /// CPU seconds that all threads of a process have run so far (0 when it cannot be read).
    static func cpuSeconds(_ pid: Int32?) -> Double {
        // The scheduler's own runtime of every thread (the first field of schedstat, in nanoseconds): exact,
        // where /proc/PID/stat's ticks only sample which process happened to run at each tick.
        guard let pid, let threads = try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(pid)/task")
        else { return 0 }
        let nanos = threads.reduce(0) { total, thread in
            let stat = try? String(contentsOfFile: "/proc/\(pid)/task/\(thread)/schedstat", encoding: .utf8)
            return total + (stat?.split(separator: " ").first.flatMap { Int($0) } ?? 0)
        }
        return Double(nanos) / 1e9
    }

    /// A coordinator and `workers` echo workers; returns its bus and feed once every worker is registered.
    static func startCluster(
        _ supervisor: Supervisor, name: String, workers: Int, capacity: Int, context: ZMQContext,
        coordinatorOptions: [String] = []
    ) async -> (bus: String, feed: String, coordinator: Child)? {
        let local = "tcp://127.0.0.1:*"
        let coordinator = supervisor.start(
            name: "\(name)-coordinator",
            arguments: ["coordinator", "--bus", local, "--feed", local, "--log-level", "warning"] + coordinatorOptions,
            quiet: true)
        guard let ready = await coordinator.readyLine(timeout: .seconds(20)), let bus = ready["bus"],
            let feed = ready["feed"]
        else { return nil }
        for index in 0..<workers {
            _ = supervisor.start(
                name: "\(name)-worker-\(index)",
                arguments: [
                    "worker", "--name", "bench-\(index)", "--coordinator", bus, "--skills", "echo", "--capacity",
                    String(capacity), "--log-level", "warning",
                ], quiet: true)
        }
        guard await waitForProviders(bus: bus, skill: "echo", count: workers, context: context) else { return nil }
        return (bus, feed, coordinator)
    }

    /// Asks the bus until every worker's replica reports the bus's registry position, for at most 30 s.
    static func waitForReplicasInSync(bus: String, context: ZMQContext) async {
        guard let client = try? SkillbusClient(endpoint: bus, context: context) else { return }
        defer { client.close() }
        let deadline = ContinuousClock.now + .seconds(30)
        while ContinuousClock.now < deadline {
            if let agents = try? await client.agents(timeout: .seconds(2))["agents"]?.arrayValue,
                agents.allSatisfy({ $0["registry"] == .null || $0["registryInSync"] == true })
            {
                return
            }
            try? await Task.sleep(for: .milliseconds(100))
        }
    }

    /// Asks the bus until `count` agents offer `skill`, for at most 30 s.
    static func waitForProviders(bus: String, skill: String, count: Int, context: ZMQContext) async -> Bool {
        guard let client = try? SkillbusClient(endpoint: bus, context: context) else { return false }
        defer { client.close() }
        let deadline = ContinuousClock.now + .seconds(30)
        while ContinuousClock.now < deadline {
            if let catalog = try? await client.skills(timeout: .seconds(2)),
                let entry = catalog.skills.first(where: { $0.descriptor.identifier == skill }),
                entry.providers.count >= count
            {
                return true
            }
            try? await Task.sleep(for: .milliseconds(50))
        }
        return false
    }
}

/// The baseline's broker: a plain ROUTER→DEALER `zmq_proxy`, nothing else.
public enum BaselineProxyCommand: SkillbusCommand {
    public static let spec = CommandSpec(
        name: "bench-baseline-proxy", abstract: "Raw ROUTER→DEALER proxy for the benchmark's baseline.",
        discussion: "Started by 'skillbus bench'; prints its bound endpoints, then proxies until killed.",
        options: [
            OptionSpec("--frontend", value: "ENDPOINT", help: "ROUTER endpoint for clients."),
            OptionSpec("--backend", value: "ENDPOINT", help: "DEALER endpoint for workers."),
        ], hidden: true)

    public static func run(_ arguments: ParsedArguments) async throws -> Int32 {
        let frontendEndpoint = try arguments.endpoint("--frontend", in: spec) ?? "tcp://127.0.0.1:*"
        let backendEndpoint = try arguments.endpoint("--backend", in: spec) ?? "tcp://127.0.0.1:*"
        let context = try ZMQContext()
        let frontend = try ZMQSocket(context: context, type: .router)
        let backend = try ZMQSocket(context: context, type: .dealer)
        for socket in [frontend, backend] {
            try socket.setSendHighWaterMark(0)
            try socket.setReceiveHighWaterMark(0)
        }
        try frontend.bind(frontendEndpoint)
        try backend.bind(backendEndpoint)
        print("skillbus baseline proxy ready: frontend=\(frontend.lastEndpoint) backend=\(backend.lastEndpoint)")
        try frontend.proxy(to: backend)
        return 0
    }
}

/// The baseline's worker: sends every message straight back.
public enum BaselineWorkerCommand: SkillbusCommand {
    public static let spec = CommandSpec(
        name: "bench-baseline-worker", abstract: "Raw echo worker for the benchmark's baseline.",
        discussion: "Started by 'skillbus bench'; echoes every message until killed.",
        options: [OptionSpec("--connect", value: "ENDPOINT", help: "The proxy's backend endpoint.")], hidden: true)

    public static func run(_ arguments: ParsedArguments) async throws -> Int32 {
        guard let endpoint = try arguments.endpoint("--connect", in: spec) else {
            throw UsageError(spec, "option '--connect' is required")
        }
        let context = try ZMQContext()
        let socket = try ZMQSocket(context: context, type: .dealer)
        try socket.connect(endpoint)
        while let message = try socket.receive() { try socket.send(message) }
        return 0
    }
}
