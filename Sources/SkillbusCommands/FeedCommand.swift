import Foundation
import Skillbus
import SkillbusZMQ

/// `skillbus feed`
public enum FeedCommand: SkillbusCommand {
    public static let spec = CommandSpec(
        name: "feed",
        abstract: "Watch agent states, rounds, requests and registry changes live.",
        discussion: """
            Subscribes to the coordinator's feed and prints one line per event: time, event, agent, details.
            Topics: agent.joined, agent.left, agent.state, agent.refused; round.accepted, round.done,
            invocation.dispatched, invocation.deduplicated, invocation.done, invocation.cancelled,
            invocation.output (partial output as it streams), invocation.cancelIgnored; request.queued,
            request.dispatched, request.deduplicated, request.done, request.cancelled; registry.update,
            registry.heartbeat. --topic filters by prefix (e.g. 'agent.' or 'round.'). With keys the coordinator
            may refuse this one (unknown, or a role its feed does not admit): then it says so and exits 3.

            EXAMPLE: skillbus feed --topic agent.state
                     skillbus feed --json | jq .
            """,
        options: [
            OptionSpec("--json", help: "One JSON object per line."),
            OptionSpec(
                "--topic", value: "PREFIX", help: "Only events whose topic starts with PREFIX.", repeatable: true),
            feedOption, serverKeyOption, keyOption,
            OptionSpec("--count", value: "N", help: "Exit after N events."),
        ])

    public static func run(_ arguments: ParsedArguments) async throws -> Int32 {
        let endpoint = try Defaults.feed(arguments, spec)
        let limit = try arguments.int("--count", minimum: 1, in: spec)
        let json = arguments.flag("--json")
        let signals = SignalWatcher()
        let context = try ZMQContext()
        let (refusals, refused) = AsyncStream.makeStream(of: Void.self)
        let subscriber = try await FeedSubscriber.connect(
            endpoint: endpoint, topics: arguments.all("--topic"), context: context,
            credentials: try Defaults.credentials(arguments, spec), onRefused: { refused.yield() })
        defer { subscriber.close() }
        let topics = arguments.all("--topic").isEmpty ? "all topics" : arguments.all("--topic").joined(separator: ", ")
        printError("watching \(endpoint) (\(topics)); events appear as they happen, Ctrl-C stops")
        let printer = FunctionService {
            var seen = 0
            // A batch's lines in one print: stdout is line-buffered, so that is one write, not one per event.
            for await batch in subscriber.batches {
                let lines = batch.prefix(limit.map { $0 - seen } ?? batch.count).map { topic, event in
                    json ? event.jsonString : render(topic: topic, event: event)
                }
                print(lines.joined(separator: "\n") + "\n", terminator: "")
                seen += lines.count
                if let limit, seen >= limit { return }
            }
        }
        // A refused key gets nothing, ever (libzmq gives the connection up): say so and stop.
        let refusal = FunctionService {
            for await _ in refusals {
                printError(
                    "the coordinator at \(endpoint) refused this key on the feed (unknown, or its role may not "
                        + "read the feed: security.feedRoles)")
                return
            }
        }
        try await runUntilStopped([printer, refusal], signals: signals)
        return subscriber.keyRefused ? 3 : 0
    }

    /// `12:00:01.234  agent.state         alpha     executingSkill(echo)`
    static func render(topic: String, event: JSONValue) -> String {
        let time = event["time"]?.stringValue.map { String($0.dropFirst(11).prefix(12)) } ?? ""
        let agent = event["agent"]?.stringValue ?? "-"
        let round = event["round"]?.stringValue ?? ""
        var detail: String
        switch topic {
        case "agent.state":
            detail = event["state"]?.stringValue ?? "?"
            if let skill = event["skill"]?.stringValue { detail += "(\(skill))" }
            if let reason = event["reason"]?.stringValue { detail += "(\(reason))" }
        case "agent.joined":
            let skills = event["skills"]?.arrayValue?.compactMap(\.stringValue).joined(separator: ",") ?? ""
            detail = "capacity \(event["capacity"]?.intValue ?? 0), skills \(skills)"
        case "agent.left":
            detail = event["reason"]?.stringValue ?? ""
        case "registry.update":
            let provided = event["provided"]?.arrayValue?.compactMap(\.stringValue) ?? []
            let withdrawn = event["withdrawn"]?.arrayValue?.compactMap(\.stringValue) ?? []
            detail = "seq \(event["seq"]?.intValue ?? 0): \(event["reason"]?.stringValue ?? "")"
            if !provided.isEmpty { detail += " +" + provided.joined(separator: ",") }
            if !withdrawn.isEmpty { detail += " -" + withdrawn.joined(separator: ",") }
        case "round.accepted":
            let invocations = event["invocations"]?.arrayValue?.compactMap(\.stringValue) ?? []
            detail = "\(event["shape"]?.stringValue ?? "?") \(invocations.joined(separator: ","))  round \(round)"
        case "invocation.dispatched", "invocation.deduplicated", "invocation.done", "invocation.cancelled":
            detail = "\(event["invocation"]?.stringValue ?? "?")"
            if let skill = event["skill"]?.stringValue { detail += " \(skill)" }
            if let status = event["status"]?.stringValue { detail += " \(status)" }
            if let ms = event["durationMs"]?.doubleValue { detail += String(format: " %.2f ms", ms) }
            if event["deduplicated"] == true { detail += " (deduplicated)" }
            if let reused = event["reusing"]?.stringValue {
                detail += " reusing \(reused.isEmpty ? "a running one" : reused)"
            }
            if topic == "invocation.cancelled" { detail += " cancelled (\(event["reason"]?.stringValue ?? "?"))" }
            detail += "  round \(round)"
        case "invocation.output":
            let parts = (event["parts"]?.arrayValue ?? []).compactMap { try? OutputPart(json: $0) }
            detail =
                "\(event["skill"]?.stringValue ?? "?") \(event["dispatch"]?.stringValue ?? "?") "
                + "#\(event["first"]?.intValue ?? 0): " + parts.map(\.humanReadable).joined(separator: " | ")
                + "  round \(round)"
        case "round.done":
            let summary = event["summary"]
            detail =
                "\(event["status"]?.stringValue ?? "?"): \(summary?["executions"]?.intValue ?? 0) execution(s), "
                + "\(summary?["deduplicated"]?.intValue ?? 0) deduplicated  round \(round)"
        case "registry.heartbeat":
            detail = "seq \(event["seq"]?.intValue ?? 0) (epoch \(event["epoch"]?.stringValue ?? "?"))"
        case "coordinator.leader":
            let leader = event["leader"]
            detail =
                "group \(event["group"]?.stringValue ?? "?"): '\(leader?["name"]?.stringValue ?? "?")' leads at "
                + "\(leader?["bus"]?.stringValue ?? "?") (epoch \(event["epoch"]?.intValue ?? 0))"
        case "coordinator.journal":
            let rounds = event["rounds"]?.intValue ?? 0
            detail =
                "group \(event["group"]?.stringValue ?? "?"): "
                + (rounds > 0 ? "the journal is behind by \(rounds) round(s)" : "the journal caught up")
        case "request.done":
            detail = "\(event["skill"]?.stringValue ?? "") \(event["status"]?.stringValue ?? "")"
            if let ms = event["durationMs"]?.doubleValue { detail += String(format: " %.2f ms", ms) }
            if let message = event["error"]?["message"]?.stringValue { detail += ": \(message)" }
            detail += "  round \(event["round"]?.stringValue ?? "")"
        default:
            var fields = event.objectValue ?? [:]
            for key in ["time", "type", "agent"] { fields[key] = nil }
            detail = fields.keys.sorted().map { "\($0)=\(fields[$0]!.stringValue ?? fields[$0]!.jsonString)" }
                .joined(separator: " ")
        }
        return "\(time)  \(topic.padded(to: 18)) "
            + "\(agent.padded(to: 10)) \(detail)"
    }
}
