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
            invocation, and fan-out rounds that invoke echo on every worker; and, at 64 in flight, rounds of one
            invocation against REQUESTs of the same echo (five alternating pairs), with the coordinator's CPU
            per round, per request, per invocation of a fan-out and per step of a plan.
            Then turns, one at a time, with three agents of a rules planner beside the workers, each against the
            same work done without them, in five alternating pairs: a turn with one skill call against a plain
            send; a turn that asks another agent (whose turn makes the call) against the client asking the two
            agents itself, one after the other; an asks round of the three against the three asks sent at once,
            and against the three asks sent in one round, whose identical calls then run once too ("n/a" on a bus
            that takes no asks rounds).
            Then the configuration people deploy: a coordinator with keys on bus and feed and the round journal,
            sent ROUNDs while a feed watcher reads every event, against REQUESTs on the plain coordinator and
            against the raw proxy, at 64 in flight; and keys alone, REQUESTs with and without, at 1 and 64.
            Then MCP: a tools/call of echo through a 'skillbus mcp' child on stdio, against the same echo sent as a
            ROUND (what 'skillbus send' sends), one at a time, in five alternating pairs.
            The ratios (skillbus / baseline, the medians of the pairs) are the figures to compare between
            machines; the absolute figures depend on this one. Exit status 1 when any request failed.

            EXAMPLE: skillbus bench
                     skillbus bench --workers 2 --requests 5000 --json
                     skillbus bench --only turns
            """,
        options: [
            OptionSpec("--workers", value: "N", help: "Worker processes on each side (default 4)."),
            OptionSpec(
                "--requests", value: "N",
                help: "Echo requests per side of each pair at 64 in flight (at 1 in flight at most 1000; "
                    + "rounds at most 5000; turns at most 300) (default 20000)."),
            OptionSpec("--payload-bytes", value: "N", help: "Echo text size (default 100)."),
            OptionSpec(
                "--capacity", value: "N",
                help: "Capacity of each Skillbus worker (default 32: requests wait for the bus, not for a worker)."),
            OptionSpec(
                "--only", value: "PARTS",
                help: "Measure only these, comma-separated: echo, rounds, turns, deployed, mcp (default all)."),
            OptionSpec("--json", help: "Print one JSON object with every figure."),
        ])

    public static func run(_ arguments: ParsedArguments) async throws -> Int32 {
        let setup = BenchRun.Setup(
            workers: try arguments.int("--workers", minimum: 1, maximum: 64, in: spec) ?? 4,
            requests: try arguments.int("--requests", minimum: 10, maximum: 10_000_000, in: spec) ?? 20_000,
            payloadBytes: try arguments.int("--payload-bytes", minimum: 1, maximum: 1 << 20, in: spec) ?? 100,
            capacity: try arguments.int("--capacity", minimum: 1, maximum: 100_000, in: spec) ?? 32)
        let parts = try only(arguments)
        let json = arguments.flag("--json")
        let supervisor = try Supervisor()
        defer { supervisor.cleanUp() }
        let bench = BenchRun(setup: setup, context: try ZMQContext(), quiet: json)
        bench.note("starting a coordinator with \(setup.workers) echo worker(s)…")
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
        var results = BenchResults(setup: setup)
        var baseline: BenchBaseline?
        if !parts.isDisjoint(with: ["echo", "deployed"]) {
            bench.note("starting the baseline proxy with as many workers…")
            baseline = await BenchBaseline.start(supervisor, workers: setup.workers)
            guard baseline != nil else {
                printError("error: the baseline proxy did not start within 20 s")
                await supervisor.stopAll()
                return 1
            }
        }
        if let baseline, parts.contains("echo") {
            results.echo = try await bench.echo(bus: cluster.bus, baseline: baseline.frontend)
        }
        if parts.contains("rounds") { results.rounds = try await bench.rounds(bus: cluster.bus, coordinator: cluster.coordinator.pid) }
        if parts.contains("turns") {
            bench.note("starting \(TurnBench.agents.count) agents with a rules planner…")
            guard try await TurnBench.startAgents(supervisor, bus: cluster.bus, context: bench.context) else {
                printError("error: the agents with a planner did not start within 30 s")
                await supervisor.stopAll()
                return 1
            }
            let turns = TurnBench(
                bus: cluster.bus, context: bench.context, samples: min(setup.requests, 300), pairs: BenchRun.pairs,
                payloadBytes: setup.payloadBytes)
            results.turns = try await turns.measure(note: bench.note)
        }
        if let baseline, parts.contains("deployed") {
            results.deployed = try await DeployedBench(run: bench, supervisor: supervisor)
                .measure(plain: cluster.bus, raw: baseline.frontend)
        }
        if parts.contains("mcp") {
            let mcp = MCPBench(
                bus: cluster.bus, feed: cluster.feed, context: bench.context, samples: min(setup.requests, 1000),
                pairs: BenchRun.pairs, payloadBytes: setup.payloadBytes)
            results.mcp = try await mcp.measure(note: bench.note)
        }
        await supervisor.stopAll()

        if json { print(results.json.jsonString) } else { results.printText() }
        return results.failures == 0 ? 0 : 1
    }

    static let parts = ["echo", "rounds", "turns", "deployed", "mcp"]

    /// The parts `--only` names, each known; all of them without it.
    static func only(_ arguments: ParsedArguments) throws(UsageError) -> Set<String> {
        guard let list = arguments.value("--only") else { return Set(parts) }
        let named = list.split(separator: ",", omittingEmptySubsequences: false).map {
            $0.trimmingCharacters(in: .whitespaces)
        }
        if let unknown = named.first(where: { !parts.contains($0) }) {
            throw UsageError(
                spec,
                "option '--only': expected echo, rounds, turns, deployed or mcp, comma-separated; got '\(unknown)'")
        }
        return Set(named)
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
    /// Steps of the plans whose CPU per step is measured: distinct echoes, none referring to another.
    static let planSteps = 8

    func note(_ text: String) { if !quiet { printError(text) } }

    func measure(_ load: LoadGenerator, _ endpoint: String, requests: Int, inFlight: Int) async throws -> LoadReport {
        try await load.measure(endpoint: endpoint, context: context, requests: requests, inFlight: inFlight)
    }

    /// Echo on the bus and on the baseline at each level, in pairs whose order alternates.
    func echo(bus: String, baseline: String) async throws -> [Int: PairedFigures] {
        let ours = LoadGenerator.skillbusEcho(payloadBytes: setup.payloadBytes)
        let theirs = LoadGenerator.rawEcho(payloadBytes: setup.payloadBytes)
        // Warm both paths (and let every raw worker connect) before measuring anything.
        _ = try await measure(ours, bus, requests: min(2000, setup.requests), inFlight: 64)
        _ = try await measure(theirs, baseline, requests: min(2000, setup.requests), inFlight: 64)
        var levels: [Int: PairedFigures] = [:]
        for level in Self.levels {
            // At 1 in flight each request waits for a whole round trip: 1,000 are plenty.
            let count = level == 1 ? min(setup.requests, 1000) : setup.requests
            note("echo: \(Self.pairs) pairs of \(count) requests at \(level) in flight…")
            levels[level] = try await PairedFigures.measure(pairs: Self.pairs) {
                try await measure(ours, bus, requests: count, inFlight: level)
            } baseline: {
                try await measure(theirs, baseline, requests: count, inFlight: level)
            }
        }
        return levels
    }

    /// Rounds of one echo invocation, and fan-out rounds that invoke echo on every worker; then what a round
    /// costs against a REQUEST of the same echo, at 64 in flight in passes whose order alternates, with the
    /// coordinator's CPU time (`coordinator`: its pid) per round, per fan-out invocation and per step of a plan.
    func rounds(bus: String, coordinator: Int32?) async throws -> BenchResults.Rounds {
        let count = min(setup.requests, 5000)
        note("rounds: \(count) of one invocation, then \(count) fan-outs to \(setup.workers) worker(s)…")
        let single = try await measure(
            .rounds(.invoke(skill: "echo", parameters: ["text": "x"])), bus, requests: count,
            inFlight: Self.roundsInFlight)
        let fanout = try await measure(
            .rounds(.fanout(skill: "echo", parameters: ["text": "x"], agents: nil, aggregate: .all)), bus,
            requests: count, inFlight: Self.roundsInFlight)
        let level = 64
        func load(_ generator: LoadGenerator, requests: Int = count, inFlight: Int = level) async throws -> LoadReport {
            try await generator.measure(
                endpoint: bus, context: context, requests: requests, inFlight: inFlight, serverPID: coordinator)
        }
        note(
            "rounds: \(Self.pairs) passes of \(count) one-invocation rounds, requests, and fan-outs and plans of "
                + "\(Self.planSteps) steps, at \(level) in flight, with the coordinator's CPU…")
        let request = LoadGenerator.skillbusEcho(payloadBytes: 1)
        let steps = (0..<Self.planSteps).map {
            PlanStep(id: "s\($0)", skill: "echo", parameters: ["text": .string("t\($0)")])
        }
        // Each pass runs the four in another order, so that a machine getting busier or quieter weighs on all of
        // them; each shape's runs are merged, so that its CPU is read over as much work as the REQUESTs'.
        enum Shape: CaseIterable { case round, request, fanout, plan }
        var runs: [Shape: [LoadReport]] = [:]
        for pass in 0..<Self.pairs {
            for shape in pass % 2 == 0 ? Shape.allCases : Shape.allCases.reversed() {
                let report =
                    switch shape {
                    case .round: try await load(.rounds(.invoke(skill: "echo", parameters: ["text": "x"])))
                    case .request: try await load(request)
                    case .fanout:
                        try await load(
                            .rounds(.fanout(skill: "echo", parameters: ["text": "x"], agents: nil, aggregate: .all)),
                            requests: max(1, count / setup.workers), inFlight: max(1, level / setup.workers))
                    case .plan:
                        try await load(
                            .rounds(.plan(steps: steps, continueOnFailure: false)),
                            requests: max(1, count / Self.planSteps), inFlight: max(1, level / Self.planSteps))
                    }
                runs[shape, default: []].append(report)
            }
        }
        let versusRequests = PairedFigures(
            pairs: zip(runs[.round] ?? [], runs[.request] ?? []).map { (subject: $0, baseline: $1) })
        var perInvocation = LoadReport.merged(runs[.fanout] ?? [])
        perInvocation.serverMicrosPerRequest /= Double(setup.workers)
        var perStep = LoadReport.merged(runs[.plan] ?? [])
        perStep.serverMicrosPerRequest /= Double(Self.planSteps)
        return BenchResults.Rounds(
            single: single, fanout: fanout, agents: setup.workers, versusRequests: versusRequests,
            fanoutPerInvocation: perInvocation, planPerStep: perStep)
    }
}
