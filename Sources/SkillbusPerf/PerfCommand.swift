import Foundation
import Skillbus
import SkillbusCommands
import SkillbusZMQ

/// `skillbus-perf`: the team's benchmark (`make bench`), every figure the performance work tracks. Not part
/// of the product: it runs the `skillbus` it is given, as `skillbus bench` runs itself.
public enum PerfCommand {
    public static let spec = CommandSpec(
        name: "",
        abstract: "Measure every figure the performance work tracks, each against a baseline of the same run.",
        discussion: """
            Starts a coordinator with N workers (child processes on 127.0.0.1) and, beside it, a raw baseline:
            the same client and worker sockets through a plain ROUTER→DEALER proxy with no Skillbus logic.
            Measures each at 1 and at 64 requests in flight in five pairs of alternating order, and prints both
            and the medians of the pairs' ratios.
            Its echo workers arm retries (idempotent, a retry policy with an attempt timeout); a third coordinator
            whose workers give echo no policy measures what that costs, in alternation, as a ratio. A fourth, whose
            echo is pure with a cache lifetime, measures the cache's miss path against the main one, and rounds
            with priorities are measured against rounds without, both as ratios of the same run.
            A fifth serves the operator HTTP endpoint (--http) while a watcher scrapes /metrics every 100 ms and
            reads /events: its throughput against the main one's is what the endpoint costs the bus.
            A sixth keeps a round journal (--data-dir): its rounds are measured against the main one's, in alternation;
            and, where PostgreSQL's initdb and postgres are installed, one of a coordinator group (ha) whose journal is
            in a throwaway PostgreSQL server with fsync on, in the same rotation.
            A seventh, whose limits keep every round it answers, is read for resident memory when its workers have
            registered and after --remembered-rounds rounds of one text; an eighth after as many rounds whose texts
            all differ. The run ends with the rows of issue 14's speed targets:
            each figure, its target and whether it is met (the coordinator's and the raw proxy's CPU time are read
            from /proc during the same measurements).
            Absolute numbers depend on the machine; the ratio is the figure to compare.
            Every process it starts runs --skillbus (by default the skillbus beside this program).
            --only journal starts only the main and the journaled coordinators and measures only the journals.

            EXAMPLE: skillbus-perf --workers 4 --json
            """,
        options: [
            OptionSpec("--skillbus", value: "PATH", help: "The skillbus to measure (default: the one beside this program)."),
            OptionSpec("--workers", value: "N", help: "Worker processes on each side (default 4)."),
            OptionSpec("--requests", value: "N", help: "Requests per measurement: per side of each echo pair at 64 in flight (at 1 in flight at most 1000), and of each phase after (default 20000)."),
            OptionSpec("--payload-bytes", value: "N", help: "Echo payload size (default 100)."),
            OptionSpec("--capacity", value: "N", help: "Capacity of each Skillbus worker (default 32)."),
            OptionSpec(
                "--registry-agents", value: "N", help: "Registry-only agents for the registry figures (default 100)."),
            OptionSpec("--skills-per-agent", value: "N", help: "Skills each of them offers (default 100)."),
            OptionSpec("--snapshot-runs", value: "N", help: "New replicas timed (default 5)."),
            OptionSpec("--kill-runs", value: "N", help: "Workers killed with kill -9 and timed (default 3)."),
            OptionSpec("--store-sessions", value: "N", help: "Sessions in the large agent store (default 1000)."),
            OptionSpec(
                "--store-messages", value: "N",
                help: "Messages per session in it, besides one of 1,000 (default 99: about 100,000 in all)."),
            OptionSpec(
                "--remembered-rounds", value: "N",
                help: "Rounds a coordinator of its own answers and keeps before its memory is read (default 100000)."),
            OptionSpec(
                "--only", value: "PHASE",
                help: "Measure one phase only: 'journal' (the round journal against rounds without it), or 'state' (the coordinator's state alone, no sockets: a REQUEST against a ROUND, a fan-out and a plan)."),
            OptionSpec(
                "--kind", value: "KIND",
                help:
                    "With --only state: measure one kind alone (request, requestInRound, round, fanout or plan), "
                    + "to compare two builds run after run."),
            OptionSpec("--json", help: "Print one JSON object with every figure."),
        ], program: "skillbus-perf")

    /// Runs the command line and returns the process exit code (2 for a usage error, as skillbus).
    public static func main(_ arguments: [String]) async -> Int32 {
        do {
            let parsed = try spec.parse(arguments == ["help"] ? ["--help"] : arguments)
            if parsed.flag("--help") {
                print(spec.help)
                return 0
            }
            return try await run(parsed)
        } catch let error as UsageError {
            printError(error.description)
            return 2
        } catch let error as SkillbusError {
            printError("error: \(error.message)")
            return 1
        } catch {
            printError("error: \(error)")
            return 1
        }
    }

    /// The skillbus beside this program (both are built into the same folder).
    static var besideThisProgram: String {
        URL(fileURLWithPath: "/proc/self/exe").resolvingSymlinksInPath().deletingLastPathComponent()
            .appendingPathComponent("skillbus").path
    }

    static func run(_ arguments: ParsedArguments) async throws -> Int32 {
        let skillbus = arguments.value("--skillbus") ?? besideThisProgram
        guard FileManager.default.isExecutableFile(atPath: skillbus) else {
            throw UsageError(spec, "no skillbus to run at '\(skillbus)' (build it, or name it with --skillbus)")
        }
        let setup = BenchReport.Setup(
            workers: try arguments.int("--workers", minimum: 1, in: spec) ?? 4,
            payloadBytes: try arguments.int("--payload-bytes", minimum: 1, in: spec) ?? 100,
            requests: try arguments.int("--requests", minimum: 10, in: spec) ?? 20_000,
            capacity: try arguments.int("--capacity", minimum: 1, in: spec) ?? 32)
        let registryAgents = try arguments.int("--registry-agents", minimum: 1, maximum: 10_000, in: spec) ?? 100
        let skillsPerAgent = try arguments.int("--skills-per-agent", minimum: 1, maximum: 10_000, in: spec) ?? 100
        let snapshotRuns = try arguments.int("--snapshot-runs", minimum: 1, maximum: 1000, in: spec) ?? 5
        let killRuns = try arguments.int("--kill-runs", minimum: 0, maximum: 100, in: spec) ?? 3
        let contextSessions = try arguments.int("--store-sessions", minimum: 1, maximum: 100_000, in: spec) ?? 1000
        let contextMessages = try arguments.int("--store-messages", minimum: 1, maximum: 10_000, in: spec) ?? 99
        let rememberedRounds =
            try arguments.int("--remembered-rounds", minimum: 1, maximum: 1_000_000, in: spec)
            ?? SpeedFigures.defaultRememberedRounds
        let json = arguments.flag("--json")
        if let phase = arguments.value("--only"), phase != "journal", phase != "state" {
            throw UsageError(spec, "--only takes 'journal' or 'state' (the phases that run alone), not '\(phase)'")
        }
        if arguments.value("--only") == "state" {
            var kinds = StateMachineBench.Kind.allCases
            if let name = arguments.value("--kind") {
                guard let kind = kinds.first(where: { "\($0)" == name }) else {
                    throw UsageError(
                        spec, "--kind takes one of \(kinds.map { "\($0)" }.joined(separator: ", ")), not '\(name)'")
                }
                kinds = [kind]
            }
            let figures = StateMachineBench(operations: setup.requests, kinds: kinds).measure()
            if json { print(figures.json.jsonString) } else { figures.printText() }
            return 0
        }

        let supervisor = try Supervisor(executable: skillbus)
        defer { supervisor.cleanUp() }
        let bench = Bench(setup: setup, supervisor: supervisor, context: try ZMQContext(), quiet: json)
        if arguments.value("--only") == "journal" { return try await journalOnly(bench, supervisor, json: json) }
        bench.note(
            "starting a coordinator and \(setup.workers) worker(s), a second pair without deduplication, a third without retries, a fourth with a cache, a fifth serving HTTP, a sixth with a journal…")
        guard let main = await bench.startCluster(name: "main"),
            let plain = await bench.startCluster(name: "nodedup", coordinatorOptions: ["--no-dedup"]),
            let unarmed = await bench.startCluster(name: "noretry", workerOptions: Bench.plainEcho),
            let cached = await bench.startCluster(name: "cache", workerOptions: Bench.cachedEcho),
            let watched = await bench.startCluster(name: "http", coordinatorOptions: ["--http", "127.0.0.1:0"]),
            let journaled = await bench.startCluster(
                name: "journal", coordinatorOptions: ["--data-dir", supervisor.directory + "/journal-coordinator"])
        else {
            printError("error: a coordinator or its workers did not start within 30 s")
            await supervisor.stopAll()
            return 1
        }
        bench.note("starting the baseline proxy and \(setup.workers) raw worker(s)…")
        guard let raw = await bench.startBaseline() else {
            printError("error: the baseline proxy did not start")
            await supervisor.stopAll()
            return 1
        }
        var speed = SpeedFigures()
        let echo = try await bench.echo(main: main, baseline: raw)
        speed.echoCPU = echo.cpu
        let deduplication = try await bench.deduplicationCost(with: main, without: plain)
        let retries = try await bench.retryCost(armed: main, plain: unarmed)
        let priorityCache = try await bench.priorityCacheCost(main: main, cached: cached)
        let http = try await bench.httpCost(main: main, http: watched)
        let journal = try await bench.journalCosts(memory: main, journaled: journaled)
        let rounds: BenchReport.Rounds
        (rounds, speed.fanout) = try await bench.rounds(main: main)
        speed.memory = try await bench.rememberedRoundsMemory(rounds: rememberedRounds)
        let contextFigures = try await bench.context(
            main, sessions: contextSessions, messagesPerSession: contextMessages)
        let turns = try await bench.turns(main)
        let curve = try await bench.curve(plain: main)
        let output = try await bench.output(bus: main.bus)
        let registry = try await bench.registry(
            main, agents: registryAgents, skillsPerAgent: skillsPerAgent, snapshotRuns: snapshotRuns,
            killRuns: killRuns)
        await supervisor.stopAll()

        let report = BenchReport(
            setup: setup, skillbus: echo.skillbus, baseline: echo.baseline, echoPairRatios: echo.pairRatios,
            deduplication: deduplication, rounds: rounds,
            registry: registry, context: contextFigures, turns: turns, output: output, retries: retries,
            curve: curve, priorityCache: priorityCache, http: http, journal: journal, speed: speed)
        if json { print(report.json.jsonString) } else { report.printText() }
        return report.failures == 0 ? 0 : 1
    }

    /// `--only journal`: the main coordinator and the journaled one, and the journal phase alone.
    static func journalOnly(_ bench: Bench, _ supervisor: Supervisor, json: Bool) async throws -> Int32 {
        bench.note("starting a coordinator and a second one with a journal, each with its workers…")
        guard let main = await bench.startCluster(name: "main"),
            let journaled = await bench.startCluster(
                name: "journal", coordinatorOptions: ["--data-dir", supervisor.directory + "/journal-coordinator"])
        else {
            printError("error: a coordinator or its workers did not start within 30 s")
            await supervisor.stopAll()
            return 1
        }
        let journal = try await bench.journalCosts(memory: main, journaled: journaled)
        await supervisor.stopAll()
        if json { print(journal.json.jsonString) } else { journal.printText() }
        return journal.failures == 0 ? 0 : 1
    }

    static func ratio(_ numerator: Double, _ denominator: Double) -> Double {
        denominator > 0 ? (numerator / denominator * 1000).rounded() / 1000 : 0
    }

    /// The load loop on a thread of its own, off the cooperative pool.
    static func measure(
        _ load: LoadGenerator, _ endpoint: String, _ context: ZMQContext, requests: Int, inFlight: Int,
        credentials: CurveCredentials? = nil, timeLimit: Duration = .seconds(60)
    ) async throws -> LoadReport {
        try await load.measure(
            endpoint: endpoint, context: context, requests: requests, inFlight: inFlight, timeLimit: timeLimit,
            credentials: credentials)
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
    static func cpuSeconds(_ pid: Int32?) -> Double { ProcessCPU.seconds(pid) }

    /// Asks the bus until every worker's replica reports the bus's registry position, for at most 30 s.
    static func waitForReplicasInSync(bus: String, context: ZMQContext) async {
        guard let client = try? await SkillbusClient.connect(endpoint: bus, context: context) else { return }
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
}
