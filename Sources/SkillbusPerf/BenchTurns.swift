import Foundation
import Skillbus
import SkillbusCommands
import SkillbusTestSupport
import SkillbusZMQ

/// A turn of the rules planner with one skill call (`echo`), against a plain REQUEST of that skill, at
/// 1 in flight: what the agent loop adds to one call.
struct TurnFigures {
    var send: LoadReport
    var turn: LoadReport

    var p50Ratio: Double { PerfCommand.ratio(turn.percentileMs(0.5), send.percentileMs(0.5)) }

    var json: JSONValue {
        ["sendEcho": send.json, "turnWithOneCall": turn.json, "turnVsSendP50Ratio": .number(p50Ratio)]
    }

    func printText() {
        print(
            String(
                format: "turns: a rules-planner turn with one echo call p50 %.3f ms, a plain send %.3f ms (%.2fx; target <= 1.5)",
                turn.percentileMs(0.5), send.percentileMs(0.5), p50Ratio))
    }
}

extension Bench {
    /// Starts an agent whose rules planner answers "say WORD" by calling echo, and measures its turns.
    func turns(_ cluster: Cluster) async throws -> TurnFigures {
        note("turns: a rules-planner turn with one skill call against a plain send…")
        let rules: JSONValue = [
            "rules": [["intent": "say (?<word>\\w+)", "skill": "echo", "params": ["text": "{word}"], "reply": "{result}"]]
        ]
        let config = supervisor.directory + "/planner.json"
        let worker: JSONValue = [
            "version": 1, "name": "bench-planner", "skills": ["echo"], "planner": rules,
            "dataDir": .string(supervisor.directory + "/planner-agent"),
        ]
        try Data(worker.serialized()).write(to: URL(fileURLWithPath: config))
        _ = supervisor.start(
            name: "bench-planner",
            arguments: ["worker", "--config", config, "--coordinator", cluster.bus, "--log-level", "warning"], quiet: true)
        guard
            await BenchCluster.waitForProviders(
                bus: cluster.bus, skill: "echo", count: setup.workers + 1, agent: "bench-planner", context: context)
        else { throw SkillbusError(.timeout, "the planner agent did not register within 30 s") }
        let count = min(setup.requests, 2000)
        let send = try await measure(echoLoad, cluster.bus, requests: count, inFlight: 1)
        let turn = try await measure(.turns("say hello", agent: "bench-planner"), cluster.bus, requests: count, inFlight: 1)
        return TurnFigures(send: send, turn: turn)
    }
}
