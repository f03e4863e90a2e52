import Foundation
import Skillbus
import SkillbusZMQ

/// `skillbus ask --agents a,b,c` (or `--all`): one message to several agents in one team round (an `asks`
/// body, PROTOCOL §3.5.10), printed and exited as `skillbus send` does.
enum TeamAsk {
    /// The asks round the arguments describe; nil when they ask one agent (a plain turn).
    static func round(_ arguments: ParsedArguments, message: String, spec: CommandSpec) throws -> RoundSpec? {
        let agents = arguments.value("--agents").map {
            $0.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }
        }
        let mode = arguments.value("--aggregate")
        guard agents != nil || arguments.flag("--all") else {
            if mode != nil { throw UsageError(spec, "--aggregate needs --agents or --all") }
            return nil
        }
        if agents != nil && arguments.flag("--all") { throw UsageError(spec, "give --agents or --all, not both") }
        if agents != nil && (arguments.value("--role") != nil || arguments.value("--agent") != nil) {
            throw UsageError(spec, "--agents names the agents: give no --agent or --role with it")
        }
        if arguments.flag("--all") && arguments.value("--agent") != nil {
            throw UsageError(spec, "--all asks every agent: give no --agent with it")
        }
        guard let aggregate = RoundSpec.Aggregation(rawValue: mode ?? "all") else {
            throw UsageError(spec, "option '--aggregate': expected all, first or majority, got '\(mode ?? "")'")
        }
        let group: AgentGroup = agents.map(AgentGroup.agents) ?? arguments.value("--role").map(AgentGroup.role) ?? .all
        return .asks(group, message: message, aggregate: aggregate)
    }

    static func run(
        _ round: RoundSpec, _ arguments: ParsedArguments, spec: CommandSpec, session: String, timeout: Double
    ) async throws -> Int32 {
        let json = arguments.flag("--json")
        let context = try ZMQContext()
        let client = try await SkillbusClient.connect(
            endpoint: try Defaults.bus(arguments, spec), context: context,
            credentials: try Defaults.credentials(arguments, spec))
        let code = await SendCommand.send(
            round, client: client, roundID: UUID().uuidString.lowercased(), session: session,
            timeout: .seconds(timeout), retries: nil, printer: OutputPrinter(mode: json ? .silent : .lines(labelled: true)),
            json: json, stream: false)
        client.close()
        await context.terminate(within: .seconds(1))
        return code
    }
}

extension SendCommand {
    /// An asks round's `all` result for people: each agent's reply (or error) on a line of its own.
    static func teamReplies(_ document: RoundDocument) -> String? {
        guard document.shape == "asks", let entries = document.result.arrayValue else { return nil }
        return entries.map { entry in
            let agent = entry["agent"]?.stringValue ?? "?"
            let reply = entry["result"]?["text"]?.stringValue ?? entry["error"]?["message"]?.stringValue ?? ""
            return "\(agent): \(reply)"
        }.joined(separator: "\n")
    }
}
