import Foundation
import Skillbus
import SkillbusZMQ

/// Turns `key=value` (a string) and `key:=JSON` (any JSON value) into a parameters object. As in HTTPie,
/// `key=@FILE` takes the string from a file and `key:=@FILE` the JSON value.
public enum RequestParameters {
    public static func parse(_ items: [String]) throws(SkillbusError) -> JSONValue {
        var object: [String: JSONValue] = [:]
        for item in items {
            let key: String
            let value: JSONValue
            if let range = item.range(of: ":="), !item[..<range.lowerBound].contains("=") {
                key = String(item[..<range.lowerBound])
                let text = try contents(String(item[range.upperBound...]), key: key)
                do {
                    value = try JSONValue(parsing: text)
                } catch {
                    throw SkillbusError(
                        .invalidParameters, "parameter '\(key)': '\(text.prefix(80))' is not JSON (\(error))")
                }
            } else if let equals = item.firstIndex(of: "=") {
                key = String(item[..<equals])
                value = .string(try contents(String(item[item.index(after: equals)...]), key: key))
            } else {
                throw SkillbusError(.invalidParameters, "'\(item)' is not key=value or key:=JSON")
            }
            guard !key.isEmpty else { throw SkillbusError(.invalidParameters, "'\(item)' has an empty key") }
            guard object[key] == nil else {
                throw SkillbusError(.invalidParameters, "parameter '\(key)' is given twice")
            }
            object[key] = value
        }
        return .object(object)
    }

    /// The value as given, or the text of the file it names with a leading `@`.
    static func contents(_ value: String, key: String) throws(SkillbusError) -> String {
        guard value.hasPrefix("@") else { return value }
        let path = String(value.dropFirst())
        guard let data = FileManager.default.contents(atPath: path) else {
            throw SkillbusError(.invalidParameters, "parameter '\(key)': cannot read file '\(path)'")
        }
        guard let text = String(validating: data, as: UTF8.self) else {
            throw SkillbusError(.invalidParameters, "parameter '\(key)': file '\(path)' is not UTF-8 text")
        }
        return text
    }
}

/// `skillbus send`
public enum SendCommand: SkillbusCommand {
    public static let spec = CommandSpec(
        name: "send",
        abstract: "Send a round to the coordinator: one task, a fan-out to several agents, or a plan.",
        discussion: """
            Parameters follow HTTPie: key=value gives a string, key:=JSON gives any JSON value, and
            key=@FILE or key:=@FILE read the string or the JSON value from a file.
            With --all or --agents the skill runs on each of those agents; --aggregate says what comes back:
            all (every result, in agent order), first (the first success; the rest are cancelled), or
            majority (the result most agents returned). With --plan FILE the round runs a plan of steps
            (see configs/plans/). Within a round the same skill with the same parameters runs once; sending
            the same --round-id again returns the stored result (not a failure that may be retried: that runs
            again). Skills that declare a retry policy are retried on another agent when they fail retryably
            (agent_lost, timeout of idempotent skills, the codes they list); --retries N overrides.
            --priority high|normal|low orders the round's invocations among those waiting for a free agent
            (a low one waiting long is promoted, so it is served in the end). A skill that declares itself
            pure with a cache lifetime is answered from the bus's cache when it ran with the same parameters
            within that lifetime (the document says "cached": true); --no-cache runs it anyway. Ctrl-C cancels
            the round on the bus: its running invocations get CANCEL, and the document printed says cancelled
            (see also skillbus cancel).
            A skill's partial output (a command skill's lines, say) is printed as it arrives, each part on a
            line (prefixed with its invocation for a fan-out or plan); a text result that only repeats it is
            not printed again. --json prints the document at the end (each invocation's output is in it);
            --stream prints one JSON object per line as events arrive: each batch of output, then the
            document (PROTOCOL §5.20).
            Exit codes: 0 ok, 1 a skill failed (or no majority), 2 usage, invalid parameters or plan, unknown
            skill, 3 coordinator unreachable or timed out.

            EXAMPLE: skillbus send math.eval expression='(1 + 2) * 3'
                     skillbus send echo text=hi --all --aggregate majority
                     skillbus send --plan configs/plans/report.json --json
                     skillbus send sys.countdown from:=3 --stream
            """,
        positionals: "[SKILL [key=value …] [key:=JSON …]]",
        options: [
            OptionSpec("--json", help: "Print the round's document: status, result, every invocation, summary."),
            OptionSpec("--stream", help: "One JSON object per line: each batch of output as it arrives, then the document."),
            OptionSpec("--all", help: "Run SKILL on every agent that offers it."),
            OptionSpec("--agents", value: "a,b,…", help: "Run SKILL on these agents."),
            OptionSpec("--aggregate", value: "MODE", help: "all, first or majority (default all)."),
            OptionSpec("--plan", value: "FILE", help: "Run the plan in FILE (JSON) instead of one SKILL."),
            OptionSpec(
                "--timeout", value: "SECONDS",
                help: "How long the whole round may take (default: the skill's own, else the bus's 15)."),
            connectTimeoutOption,
            OptionSpec(
                "--retries", value: "N",
                help: "Retry each invocation up to N times (0-10) instead of as its skill declares; 0 never."),
            OptionSpec(
                "--priority", value: "LEVEL", help: "high, normal or low: the order among waiting invocations."),
            OptionSpec("--no-cache", help: "Run pure skills even when the bus's result cache holds the answer."),
            coordinatorOption, serverKeyOption, keyOption,
            OptionSpec("--round-id", value: "ID", help: "Round id (default: a new UUID)."),
            Approval.option,
            OptionSpec("--session", value: "ID", help: "Session id passed to the skills (default: none)."),
        ])

    public static func run(_ arguments: ParsedArguments) async throws -> Int32 {
        let endpoint = try Defaults.bus(arguments, spec)
        // None given: the ROUND carries none, and the bus applies the skill's own default (PROTOCOL §3.5.6).
        let timeout = try arguments.double("--timeout", minimum: 0.001, maximum: 86_400, in: spec).map(Duration.seconds)
        let connectTimeout = try Defaults.connectTimeout(arguments, spec, within: timeout)
        let stream = arguments.flag("--stream")
        let json = arguments.flag("--json") || stream
        let retries = try arguments.int("--retries", minimum: 0, maximum: RetryPolicy.maxRetries, in: spec)
        var priority = InvocationPriority.normal
        if let name = arguments.value("--priority") {
            guard let level = InvocationPriority(name: name) else {
                throw UsageError(spec, "option '--priority': expected high, normal or low, got '\(name)'")
            }
            priority = level
        }
        let roundID = arguments.value("--round-id") ?? UUID().uuidString.lowercased()
        let round: RoundSpec
        do {
            round = try roundSpec(arguments)
        } catch {
            return report(failure: error, roundID: roundID, json: json, stream: stream, exitCode: 2)
        }
        let session = arguments.value("--session") ?? ""
        guard session.utf8.count <= Wire.maxSessionIDBytes else {
            let error = UsageError(spec, "option '--session': at most \(Wire.maxSessionIDBytes) bytes, got \(session.utf8.count)")
            return report(failure: error, roundID: roundID, json: json, stream: stream, exitCode: 2)
        }
        let context = try ZMQContext()
        let client = try await SkillbusClient.connect(
            endpoint: endpoint, context: context, credentials: try Defaults.credentials(arguments, spec))
        Approval.install(on: client, yes: arguments.flag("--yes"))
        do {
            try await client.checkReachable(within: connectTimeout)
        } catch {
            client.close()
            return report(failure: error, roundID: roundID, json: json, stream: stream, exitCode: 3)
        }
        let printer = OutputPrinter(
            mode: stream ? .jsonLines : json ? .silent : .lines(labelled: round.shape != "invoke"))
        let code = await send(
            round, client: client, roundID: roundID, session: session, timeout: timeout, retries: retries,
            priority: priority, noCache: arguments.flag("--no-cache"), printer: printer, json: json, stream: stream)
        // Ending the context flushes what is still queued: after Ctrl-C, the round's CANCEL.
        client.close()
        await context.terminate(within: .seconds(1))
        return code
    }

    /// Sends the round and prints its document (and its output as it comes, through `printer`). Ctrl-C (or
    /// SIGTERM) cancels the round on the bus, whose document then says `cancelled`; the exit code is then
    /// the signal's (130 for Ctrl-C).
    static func send(
        _ round: RoundSpec, client: SkillbusClient, roundID: String, session: String, timeout: Duration?, retries: Int?,
        priority: InvocationPriority = .normal, noCache: Bool = false, printer: OutputPrinter, json: Bool, stream: Bool
    ) async -> Int32 {
        let (outcome, stoppedBy) = await cancellingOnSignal { () async -> Result<RoundDocument, SkillbusError> in
            do throws(SkillbusError) {
                return .success(
                    try await client.round(
                        round, roundID: roundID, sessionID: session, timeout: timeout, retries: retries,
                        priority: priority, noCache: noCache,
                        onOutput: printer.receive))
            } catch {
                return .failure(error)
            }
        }
        let document: RoundDocument
        switch outcome {
        case .success(let answer): document = answer
        case .failure(let error):
            let code = report(
                failure: error, roundID: roundID, json: json, stream: stream, exitCode: exitCode(for: error.code))
            return stoppedBy ?? code
        }
        if stream {
            OutputPrinter.finish(document)
        } else if json {
            print(document.json.jsonString)
        } else {
            render(document, printer: printer)
        }
        if let stoppedBy { return stoppedBy }
        guard let error = document.error else { return 0 }
        return exitCode(for: error.code)
    }

    /// The round the arguments describe; a usage problem is an error naming it.
    static func roundSpec(_ arguments: ParsedArguments) throws -> RoundSpec {
        if let path = arguments.value("--plan") {
            guard arguments.positionals.isEmpty, !arguments.flag("--all"), arguments.value("--agents") == nil else {
                throw UsageError(spec, "--plan takes no SKILL, parameters, --all or --agents")
            }
            guard let data = FileManager.default.contents(atPath: path) else {
                throw SkillbusError(.invalidRound, "cannot read plan file '\(path)'")
            }
            let body: JSONValue
            do {
                body = try JSONValue(parsing: Array(data))
            } catch {
                throw SkillbusError(.invalidRound, "plan file '\(path)' is not JSON: \(error)")
            }
            // A plan file holds the plan itself: {"steps": [...], "onFailure": ...}.
            return try RoundSpec(json: ["plan": body], stepLimit: Int.max)
        }
        guard let skill = arguments.positionals.first else { throw UsageError(spec, "missing SKILL (or --plan FILE)") }
        let parameters = try RequestParameters.parse(Array(arguments.positionals.dropFirst()))
        let agents = arguments.value("--agents").map {
            $0.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }
        }
        let mode = arguments.value("--aggregate")
        guard arguments.flag("--all") || agents != nil else {
            if mode != nil { throw UsageError(spec, "--aggregate needs --all or --agents") }
            return .invoke(skill: skill, parameters: parameters)
        }
        if arguments.flag("--all") && agents != nil { throw UsageError(spec, "give --all or --agents, not both") }
        guard let aggregate = RoundSpec.Aggregation(rawValue: mode ?? "all") else {
            throw UsageError(spec, "option '--aggregate': expected all, first or majority, got '\(mode ?? "")'")
        }
        return .fanout(skill: skill, parameters: parameters, agents: agents, aggregate: aggregate)
    }

    /// The document for people: each invocation, then the result (or the error).
    static func render(_ document: RoundDocument, printer: OutputPrinter? = nil) {
        if document.shape == "invoke", let only = document.invocations.first, only.attempts.count > 1 {
            printError(
                "↻ \(only.attempts.count) attempts: "
                    + only.attempts.map { "\($0.agent ?? "-") \($0.error?.code.rawValue ?? $0.status.documentName)" }
                    .joined(separator: ", "))
        }
        if document.shape != "invoke" {
            for invocation in document.invocations { printError(line(for: invocation)) }
        }
        // A round id sent again is answered from what the bus kept: say so, and that nothing ran now.
        let round = document.stored ? "stored result of round \(document.round)" : "round \(document.round)"
        guard document.status == .ok else {
            let error = document.error ?? SkillbusError(.internalError, "the round failed without an error")
            return printError("✗ \(round) failed: \(error.code): \(error.message)")
        }
        if let replies = teamReplies(document) {
            print(replies)
        } else if let form = try? SkillResult(json: document.result) {
            let only = document.invocations.first?.id ?? ""
            if printer?.alreadyShown(form, of: only) != true { print(form.humanReadable) }
        } else {
            print(document.result.prettyString())
        }
        var line = "✓ \(round)"
        if let agent = document.agent { line += " on \(agent)" }
        line += String(format: document.stored ? " (it ran in %.2f ms; nothing ran now)" : " in %.2f ms", document.durationMs)
        if let vote = document.vote, let votes = vote.votes { line += ", \(votes) of \(vote.of) agree" }
        line += "; \(document.summary.executions) execution(s), \(document.summary.deduplicated) deduplicated"
        printError(line)
    }

    /// One invocation of a fan-out or plan, for people: `✓ a (echo on alpha, 0.31 ms)`; one that never ran
    /// says it was skipped and why.
    static func line(for invocation: RoundDocument.Invocation) -> String {
        let what = invocation.asked.map { "ask \($0.text)" } ?? invocation.skill
        guard invocation.status != .skipped else {
            let reason = invocation.error?.message.replacingOccurrences(of: "skipped: ", with: "") ?? "the round stopped"
            return "– \(invocation.id) (\(what)) skipped: \(reason)"
        }
        var line =
            "\(invocation.status == .ok ? "✓" : "✗") \(invocation.id) (\(what) on "
            + "\(invocation.agent ?? "-"), " + String(format: "%.2f ms", invocation.durationMs) + ")"
        if invocation.deduplicated {
            line += " deduplicated, reusing \(invocation.reusedFrom ?? "a running one")"
        }
        if invocation.status != .ok, let error = invocation.error {
            line += " \(invocation.status.documentName): \(error.message)"
        }
        if invocation.attempts.count > 1 {
            line += " after \(invocation.attempts.count) attempts ("
                + invocation.attempts.map { "\($0.agent ?? "-") \($0.error?.code.rawValue ?? $0.status.documentName)" }
                .joined(separator: ", ") + ")"
        }
        return line
    }

    static func exitCode(for code: SkillbusError.Code) -> Int32 {
        switch code {
        case .invalidParameters, .unknownSkill, .invalidRound, .roundConflict, .confirmationRequired: 2
        case .unreachable, .timeout: 3
        default: 1
        }
    }

    static func report(failure: any Error, roundID: String, json: Bool, stream: Bool = false, exitCode: Int32)
        -> Int32
    {
        if let usage = failure as? UsageError {
            printError(usage.description)
            return 2
        }
        let failure = failure as? SkillbusError ?? SkillbusError(.internalError, "\(failure)")
        if json {
            // The document a refused round gets: nothing ran, and the error says why.
            let refusal = RoundDocument.refusal(round: roundID, shape: nil, failure)
            if stream { OutputPrinter.finish(refusal) } else { print(refusal.json.jsonString) }
        } else {
            printError("error: \(failure.code): \(failure.message)")
        }
        return exitCode
    }
}
