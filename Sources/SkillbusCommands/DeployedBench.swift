import Foundation
import Skillbus
import SkillbusZMQ

/// What the configuration people deploy costs: a coordinator with keys (bus and feed) and the round journal,
/// sent ROUNDs (as `skillbus send` sends them) while a feed watcher reads every event, against the plain path
/// (REQUESTs to the coordinator without keys or journal) and against the raw proxy; and keys alone, with
/// against without. Each in pairs of alternating order, in the same run.
struct DeployedBench {
    let run: BenchRun
    let supervisor: Supervisor

    static let pairs = 3

    /// Starts the keyed and the deployed coordinators (with as many workers as `plain`) beside `plain` and the
    /// raw proxy at `raw`, and measures.
    func measure(plain: String, raw: String) async throws -> DeployedRows {
        let setup = run.setup
        run.note("deployed: starting a coordinator with keys, and one with keys and the journal…")
        let keys = try BenchKeys(directory: supervisor.directory, workers: setup.workers)
        func start(_ name: String, _ extra: [String]) async throws -> BenchCluster {
            let capacity = String(setup.capacity)
            guard
                let cluster = await BenchCluster.start(
                    supervisor, name: name, workers: setup.workers,
                    coordinatorArguments: ["--config", keys.coordinatorConfig] + extra,
                    workerArguments: { ["--skills", "echo", "--capacity", capacity] + keys.workerArguments($0) },
                    context: run.context, credentials: keys.client)
            else { throw SkillbusError(.timeout, "the '\(name)' coordinator or its workers did not start within 30 s") }
            return cluster
        }
        let keyed = try await start("keyed", [])
        let deployed = try await start("deployed", ["--data-dir", supervisor.directory + "/deployed-journal"])
        let watcher = try await FeedSubscriber.connect(
            endpoint: deployed.feed, topics: [], context: run.context, credentials: keys.client)
        let watching = Task { for await _ in watcher.events {} }
        defer {
            watcher.close()
            watching.cancel()
        }

        let requests = LoadGenerator.skillbusEcho(payloadBytes: setup.payloadBytes)
        let rounds = LoadGenerator.rounds(
            .invoke(skill: "echo", parameters: ["text": .string(String(repeating: "x", count: setup.payloadBytes))]))
        let rawEcho = LoadGenerator.rawEcho(payloadBytes: setup.payloadBytes)
        func load(
            _ generator: LoadGenerator, _ endpoint: String, inFlight: Int, keyed: Bool = false
        ) async throws -> LoadReport {
            let count = inFlight == 1 ? min(setup.requests, 1000) : setup.requests
            return try await generator.measure(
                endpoint: endpoint, context: run.context, requests: count, inFlight: inFlight,
                credentials: keyed ? keys.client : nil)
        }
        // Warm every path: the journal's file, the keyed handshakes, the watcher's subscription.
        _ = try await load(rounds, deployed.bus, inFlight: 64, keyed: true)
        _ = try await load(requests, keyed.bus, inFlight: 64, keyed: true)

        run.note("deployed: \(Self.pairs) pairs of ROUNDs on the deployed coordinator and REQUESTs on the plain one…")
        let versusPlain = try await PairedFigures.measure(pairs: Self.pairs) {
            try await load(rounds, deployed.bus, inFlight: 64, keyed: true)
        } baseline: {
            try await load(requests, plain, inFlight: 64)
        }
        run.note("deployed: \(Self.pairs) pairs against the raw proxy…")
        let versusRaw = try await PairedFigures.measure(pairs: Self.pairs) {
            try await load(rounds, deployed.bus, inFlight: 64, keyed: true)
        } baseline: {
            try await load(rawEcho, raw, inFlight: 64)
        }
        var keysAlone: [Int: PairedFigures] = [:]
        for level in BenchRun.levels {
            run.note("deployed: \(Self.pairs) pairs of REQUESTs with and without keys at \(level) in flight…")
            keysAlone[level] = try await PairedFigures.measure(pairs: Self.pairs) {
                try await load(requests, keyed.bus, inFlight: level, keyed: true)
            } baseline: {
                try await load(requests, plain, inFlight: level)
            }
        }
        return DeployedRows(versusPlain: versusPlain, versusRaw: versusRaw, keysAlone: keysAlone)
    }
}

/// The figures `DeployedBench` measured.
struct DeployedRows {
    /// The deployed coordinator's ROUNDs (subject) against the plain coordinator's REQUESTs, at 64 in flight.
    var versusPlain: PairedFigures
    /// The same ROUNDs against the raw proxy's echo.
    var versusRaw: PairedFigures
    /// REQUESTs with keys against without, by level in flight.
    var keysAlone: [Int: PairedFigures]

    var failed: Int { versusPlain.failed + versusRaw.failed + keysAlone.values.reduce(0) { $0 + $1.failed } }

    var json: JSONValue {
        func row(_ figures: PairedFigures, _ subject: String, _ baseline: String) -> JSONValue {
            [
                subject: figures.subject.json, baseline: figures.baseline.json,
                "throughputRatio": .number(figures.throughputRatio), "p50Ratio": .number(figures.p50Ratio),
                "throughputRatios": .array(figures.throughputRatios.map { .number($0) }),
            ]
        }
        var keys: [String: JSONValue] = [:]
        for (level, figures) in keysAlone { keys["inFlight\(level)"] = row(figures, "keys", "plain") }
        return [
            "pairs": .number(Double(DeployedBench.pairs)), "inFlight": 64,
            "versusPlain": row(versusPlain, "deployed", "plain"), "versusRaw": row(versusRaw, "deployed", "raw"),
            "keysAlone": .object(keys),
        ]
    }

    func printText() {
        func line(_ name: String, _ level: Int, _ figures: PairedFigures) {
            let columns = [
                String(level), String(format: "%.0f", figures.subject.tasksPerSecond),
                String(format: "%.0f", figures.baseline.tasksPerSecond), String(format: "%.2fx", figures.throughputRatio),
                String(format: "%.2fx", figures.p50Ratio),
            ]
            print(BenchResults.row(name, columns, nameWidth: 34))
        }
        print(
            BenchResults.row(
                "deployed: keys, journal, feed", ["in flight", "per s", "against", "rate", "p50"], nameWidth: 34))
        line("ROUNDs / plain REQUESTs", 64, versusPlain)
        line("ROUNDs / raw proxy", 64, versusRaw)
        for (level, figures) in keysAlone.sorted(by: { $0.key < $1.key }) {
            line("keys alone: REQUESTs / without", level, figures)
        }
        print(
            "  (ratios: medians of \(DeployedBench.pairs) pairs in alternating order; the deployed coordinator has keys "
                + "on bus and feed, a journal, and a watcher reading every event)")
    }
}
