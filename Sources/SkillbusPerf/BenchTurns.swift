import Foundation
import Skillbus
import SkillbusCommands
import SkillbusZMQ

/// The turn rows of `skillbus bench` (TurnBench), measured alike, with the team's targets: a one-call turn
/// against a plain send, a delegated ask against the two asks in turn, an asks round against three asks at once.
struct TurnFigures {
    var rows: TurnRows

    /// The p50 ratio each row should stay within, in the rows' order.
    static let targets = [1.5, 1.2, 1.2]

    var failed: Int { rows.failed }

    /// The rows as `skillbus bench --json` has them, the targets, and the one-call row under its earlier keys.
    var json: JSONValue {
        var object = rows.json.objectValue ?? [:]
        object["targets"] = [
            "oneCallTurnVsSend": .number(Self.targets[0]), "delegatedAskVsTwoAsks": .number(Self.targets[1]),
            "asksRoundVsThreeAsks": .number(Self.targets[2]),
        ]
        object["sendEcho"] = rows.turnVsSend.baseline.json
        object["turnWithOneCall"] = rows.turnVsSend.subject.json
        object["turnVsSendP50Ratio"] = .number(rows.turnVsSend.p50Ratio)
        return .object(object)
    }

    func printText() { rows.printText(targets: Self.targets) }
}

extension Bench {
    /// Starts the agents of the turn rows beside the cluster's workers, and measures the rows.
    func turns(_ cluster: Cluster) async throws -> TurnFigures {
        note("turns: starting \(TurnBench.agents.count) agents with a rules planner…")
        guard try await TurnBench.startAgents(supervisor, bus: cluster.bus, context: context) else {
            throw SkillbusError(.timeout, "the agents with a planner did not register within 30 s")
        }
        let bench = TurnBench(
            bus: cluster.bus, context: context, samples: min(setup.requests, 300), pairs: 5,
            payloadBytes: setup.payloadBytes)
        return TurnFigures(rows: try await bench.measure(note: note))
    }
}
