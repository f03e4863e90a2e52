import Foundation
import Skillbus
import SkillbusZMQ

/// What agents' turns cost, each against the same work done without them, in pairs of alternating order (at
/// one sample at a time): a turn of the rules planner with one skill call against a plain send of that
/// skill; a turn that asks another agent (whose turn makes the call) against the client asking the two
/// agents itself, one after the other; and an asks round of three agents against the client sending the
/// three asks at once, and against the three asks sent in one round (whose identical calls then run once, as
/// the asks round's do). `skillbus bench` prints them, and so does `skillbus-perf`.
public struct TurnBench: Sendable {
    /// The agents, each with a rules planner that answers "say WORD" by calling echo; the first also
    /// answers "relay WORD" by asking the second "say WORD".
    public static let agents = ["bench-team-0", "bench-team-1", "bench-team-2"]

    public let bus: String
    public let context: ZMQContext
    /// Samples per side of each pair.
    public let samples: Int
    public let pairs: Int
    /// The plain send's echo text size.
    public let payloadBytes: Int

    public init(bus: String, context: ZMQContext, samples: Int, pairs: Int, payloadBytes: Int) {
        self.bus = bus
        self.context = context
        self.samples = samples
        self.pairs = pairs
        self.payloadBytes = payloadBytes
    }

    /// Starts the agents as workers of `bus`, each keeping its context in the supervisor's folder; false
    /// unless all of them offer echo within 30 s.
    public static func startAgents(_ supervisor: Supervisor, bus: String, context: ZMQContext) async throws -> Bool {
        let say: JSONValue = ["intent": "^say (?<word>\\w+)$", "skill": "echo", "params": ["text": "{word}"], "reply": "{result}"]
        let relay: JSONValue = [
            "intent": "^relay (?<word>\\w+)$", "ask": .string(agents[1]), "message": "say {word}", "reply": "{result}",
        ]
        for (index, name) in agents.enumerated() {
            let config: JSONValue = [
                "version": 1, "name": .string(name), "skills": ["echo"],
                "planner": ["rules": .array(index == 0 ? [say, relay] : [say])],
                "dataDir": .string(supervisor.directory + "/\(name)-data"),
            ]
            let path = supervisor.directory + "/\(name).json"
            try Data(config.serialized()).write(to: URL(fileURLWithPath: path))
            _ = supervisor.start(
                name: name, arguments: ["worker", "--config", path, "--coordinator", bus, "--log-level", "warning"],
                quiet: true)
        }
        for name in agents {
            guard await BenchCluster.waitForProviders(bus: bus, skill: "echo", count: 1, agent: name, context: context)
            else { return false }
        }
        return true
    }

    /// The three rows; `note` hears what is being measured.
    public func measure(note: (String) -> Void) async throws -> TurnRows {
        let say = { (agent: String) in LoadGenerator.turns("say hello", agent: agent) }
        let turn = StepLoad(say(Self.agents[1]))
        let send = StepLoad(.skillbusEcho(payloadBytes: payloadBytes))
        let delegated = StepLoad(.turns("relay hello", agent: Self.agents[0]))
        let twoAsks = StepLoad(steps: [[say(Self.agents[0])], [say(Self.agents[1])]])
        let asksRound = StepLoad(.rounds(body: Self.asksBody(message: "say hello")))
        let threeAsks = StepLoad(steps: [Self.agents.map(say)])
        // The same three asks in one round: their calls then run once, as the asks round's do.
        let inOneRound = RoundIDGroups(size: Self.agents.count)
        let threeAsksInOneRound = StepLoad(steps: [
            Self.agents.map { LoadGenerator.turns("say hello", agent: $0, roundID: inOneRound.next) }
        ])
        // Warm every path: the agents' planners, their stores, the bus's tables.
        for load in [turn, send, delegated, twoAsks, threeAsks] { _ = try await run(load, samples: min(samples, 50)) }

        note("turns: \(pairs) pairs of \(samples) one-call turns and plain sends…")
        let oneCall = try await inPairs(turn, against: send)
        note("turns: \(pairs) pairs of \(samples) delegated asks and two asks in turn…")
        let delegation = try await inPairs(delegated, against: twoAsks)
        var round: PairedFigures?
        var roundByHand: PairedFigures?
        if try await Self.takesAsksRounds(bus: bus, context: context) {
            for load in [asksRound, threeAsksInOneRound] { _ = try await run(load, samples: min(samples, 50)) }
            note("turns: \(pairs) pairs of \(samples) asks rounds of three agents and three asks at once…")
            round = try await inPairs(asksRound, against: threeAsks)
            note("turns: \(pairs) pairs of \(samples) asks rounds of three agents and three asks in one round…")
            roundByHand = try await inPairs(asksRound, against: threeAsksInOneRound)
        } else {
            note("turns: this bus takes no asks rounds; those rows are left out")
        }
        return TurnRows(
            samples: samples, pairs: pairs, turnVsSend: oneCall, delegatedVsTwoAsks: delegation,
            asksRoundVsThreeAsks: round, asksRoundVsThreeAsksInOneRound: roundByHand)
    }

    private func run(_ load: StepLoad, samples: Int) async throws -> LoadReport {
        try await load.measure(endpoint: bus, context: context, samples: samples)
    }

    private func inPairs(_ subject: StepLoad, against baseline: StepLoad) async throws -> PairedFigures {
        try await PairedFigures.measure(pairs: pairs) {
            try await run(subject, samples: samples)
        } baseline: {
            try await run(baseline, samples: samples)
        }
    }

    /// An asks round (PROTOCOL §3.5.10) of the three agents, all of whose replies make the round's outcome.
    static func asksBody(message: String) -> [UInt8] {
        JSONValue.object([
            "asks": ["agents": .array(agents.map { .string($0) }), "message": .string(message), "aggregate": "all"]
        ]).serialized()
    }

    /// Whether the bus takes asks rounds: a bus that does not know the shape refuses one with `invalid_round`.
    static func takesAsksRounds(bus: String, context: ZMQContext) async throws -> Bool {
        let document = try await OwnThread.run { () throws -> JSONValue? in
            let socket = try ZMQSocket(context: context, type: .dealer)
            defer { socket.close() }
            try socket.connect(bus)
            try socket.send(LoadGenerator.rounds(body: asksBody(message: "say hello")).makeRequest(0))
            let deadline = ContinuousClock.now + .seconds(20)
            while ContinuousClock.now < deadline {
                guard try poll([PollItem(.socket(socket))], timeoutMs: 1000).readable[0],
                    let reply = try socket.receive(dontWait: true), let fields = Wire.busMessageFields(reply),
                    fields.count == 5, fields[1] == Array("ROUND".utf8)
                else { continue }
                return try? JSONValue(parsing: fields[4])
            }
            return nil
        }
        guard let document else { throw SkillbusError(.timeout, "the bus did not answer an asks round within 20 s") }
        return document["error"]?["code"] != "invalid_round"
    }
}

/// The figures `TurnBench` measured.
public struct TurnRows: Sendable {
    public var samples: Int
    public var pairs: Int
    public var turnVsSend: PairedFigures
    public var delegatedVsTwoAsks: PairedFigures
    /// Nil when the bus takes no asks rounds (and so is the next one).
    public var asksRoundVsThreeAsks: PairedFigures?
    /// The asks round against the three asks sent in one round, whose calls then run once too.
    public var asksRoundVsThreeAsksInOneRound: PairedFigures?

    public var failed: Int {
        turnVsSend.failed + delegatedVsTwoAsks.failed + (asksRoundVsThreeAsks?.failed ?? 0)
            + (asksRoundVsThreeAsksInOneRound?.failed ?? 0)
    }

    /// Each row: both sides' figures (their runs merged), the median of the pairs' p50 ratios, and each pair's.
    public var json: JSONValue {
        func row(_ figures: PairedFigures, _ subject: String, _ baseline: String) -> JSONValue {
            [
                subject: figures.subject.json, baseline: figures.baseline.json,
                "p50Ratio": .number(figures.p50Ratio), "p50Ratios": .array(figures.p50Ratios.map { .number($0) }),
            ]
        }
        return [
            "samples": .number(Double(samples)), "pairs": .number(Double(pairs)),
            "oneCallTurnVsSend": row(turnVsSend, "oneCallTurn", "plainSend"),
            "delegatedAskVsTwoAsks": row(delegatedVsTwoAsks, "delegatedAsk", "twoAsksInTurn"),
            "asksRoundVsThreeAsks": asksRoundVsThreeAsks.map { row($0, "asksRound", "threeAsksAtOnce") }
                ?? ["available": false, "reason": "needs asks rounds"],
            "asksRoundVsThreeAsksInOneRound": asksRoundVsThreeAsksInOneRound.map {
                row($0, "asksRound", "threeAsksInOneRound")
            } ?? ["available": false, "reason": "needs asks rounds"],
        ]
    }

    /// The rows as a table, with a target after each ratio when given (the team's perf tool gives them).
    public func printText(targets: [Double]? = nil) {
        func line(_ name: String, _ columns: [String], _ target: Double? = nil) {
            print(
                BenchResults.row(name, columns, nameWidth: 34)
                    + (target.map { String(format: "   (target <= %.1fx)", $0) } ?? ""))
        }
        func row(_ name: String, _ figures: PairedFigures?, _ target: Double?) {
            guard let figures else { return line(name, ["n/a (needs asks rounds)"]) }
            let p50s = [figures.subject, figures.baseline].map { String(format: "%.3f", $0.percentileMs(0.5)) }
            line(name, p50s + [String(format: "%.2fx", figures.p50Ratio), String(figures.failed)], target)
        }
        line("turns, one at a time", ["p50 ms", "against", "ratio", "failed"])
        row("one-call turn / plain send", turnVsSend, targets?[0])
        row("delegated ask / two asks in turn", delegatedVsTwoAsks, targets?[1])
        row("asks round of 3 / 3 asks at once", asksRoundVsThreeAsks, targets?[2])
        row("asks round of 3 / 3 asks, 1 round", asksRoundVsThreeAsksInOneRound, nil)
        print("  (each ratio is the median of the p50 ratios of \(pairs) pairs of \(samples) run in alternating order)")
    }
}
