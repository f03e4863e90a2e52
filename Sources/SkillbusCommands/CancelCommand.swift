import Foundation
import Skillbus
import SkillbusZMQ

/// `skillbus cancel`
public enum CancelCommand: SkillbusCommand {
    public static let spec = CommandSpec(
        name: "cancel",
        abstract: "Cancel everything of a round: its ROUND, its requests and its turn, whoever sent them.",
        discussion: """
            Sends CANCEL with the round id (PROTOCOL §3.10). Running invocations of the round get CANCEL on their
            agents, waiting ones are dropped, and whoever waits for them is answered 'cancelled' (reason client);
            a turn in the round stops. Prints what was stopped. Ctrl-C in send or ask cancels only its own wait.
            Exit codes: 0 something was cancelled, 1 nothing of the round was running, 2 refused (on a bus with
            keys only an admin key cancels a round by id), 3 coordinator unreachable.

            EXAMPLE: skillbus cancel 3f0c3a9e-5a55-4c7e-9d1e-0b8f0f7d2a11
            """,
        positionals: "ROUND-ID",
        options: [
            OptionSpec("--json", help: "Print the bus's answer: {round, requests, rounds, turns, stopped}."),
            coordinatorOption, serverKeyOption, keyOption,
            OptionSpec("--timeout", value: "SECONDS", help: "How long to wait for the answer (default 5)."),
        ])

    public static func run(_ arguments: ParsedArguments) async throws -> Int32 {
        guard arguments.positionals.count == 1, let roundID = arguments.positionals.first, !roundID.isEmpty else {
            throw UsageError(spec, "give exactly one ROUND-ID")
        }
        let endpoint = try Defaults.bus(arguments, spec)
        let timeout = try arguments.double("--timeout", minimum: 0.001, maximum: 86_400, in: spec) ?? 5
        let client = try await SkillbusClient.connect(
            endpoint: endpoint, context: try ZMQContext(), credentials: try Defaults.credentials(arguments, spec))
        defer { client.close() }
        let summary: JSONValue
        do {
            summary = try await client.cancelRound(roundID, timeout: .seconds(timeout))
        } catch {
            printError("error: \(error.code): \(error.message)")
            return error.code == .notAllowed ? 2 : 3
        }
        let count = { (key: String) in summary[key]?.intValue ?? 0 }
        let found = count("requests") + count("rounds") + count("turns") > 0
        if arguments.flag("--json") {
            print(summary.jsonString)
        } else if found {
            printError(
                "cancelled round \(roundID): \(count("rounds")) round, \(count("requests")) request(s), "
                    + "\(count("turns")) turn; \(count("stopped")) execution(s) stopped")
        } else {
            printError("nothing of round \(roundID) was running")
        }
        return found ? 0 : 1
    }
}
