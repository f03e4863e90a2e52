import Foundation
import Skillbus
import SkillbusZMQ
import Synchronization

/// What the context commands share: asking agents through the bus, and printing the answer.
enum ContextQuery {
    static let timeoutOption = OptionSpec("--timeout", value: "SECONDS", help: "How long to wait (default 5).")

    /// Connects, runs `body`, and maps a failure to its exit code: 1 when an agent answered with an
    /// error (unknown session, say), 3 when the bus could not be reached.
    static func run(
        _ arguments: ParsedArguments, _ spec: CommandSpec,
        _ body: (SkillbusClient, Duration) async throws(SkillbusError) -> Void
    ) async throws -> Int32 {
        let endpoint = try Defaults.bus(arguments, spec)
        let timeout = try arguments.double("--timeout", minimum: 0.001, maximum: 86_400, in: spec) ?? 5
        let client = try await SkillbusClient.connect(
            endpoint: endpoint, context: try ZMQContext(), credentials: try Defaults.credentials(arguments, spec))
        defer { client.close() }
        do throws(SkillbusError) {
            try await body(client, .seconds(timeout))
            return 0
        } catch {
            printError("error: \(error.code): \(error.message)")
            return error.code == .unreachable || error.code == .timeout ? 3 : 1
        }
    }

    /// The names of the live agents, from AGENTS.
    static func liveAgents(_ client: SkillbusClient, timeout: Duration) async throws(SkillbusError) -> [String] {
        (try await client.agents(timeout: timeout)["agents"]?.arrayValue ?? []).compactMap { $0["agent"]?.stringValue }
    }

    static func table(_ rows: [[String]]) -> String {
        guard let header = rows.first else { return "" }
        let widths = header.indices.map { column in rows.map { $0[column].count }.max() ?? 0 }
        return rows.map { row in
            row.enumerated().map { $0 == row.count - 1 ? $1 : $1.padded(to: widths[$0]) }
                .joined(separator: "  ")
        }.joined(separator: "\n")
    }
}

/// `skillbus memory`
public enum MemoryCommand: SkillbusCommand {
    public static let spec = CommandSpec(
        name: "memory",
        abstract: "Print an agent's memory: its own, or one session's.",
        discussion: """
            Asks the agent for every key and value of its memory in the agent's own scope, or with --session in
            that session's scope. Skills write it (memory.set, or SkillExecutionContext.memory).

            EXAMPLE: skillbus memory --agent alpha --session s1
            """,
        options: [
            OptionSpec("--agent", value: "NAME", help: "The agent (required; with --session, default: the bus knows)."),
            OptionSpec("--session", value: "ID", help: "The session's scope instead of the agent's."),
            OptionSpec("--json", help: "Print the answer as JSON."),
            coordinatorOption, serverKeyOption, keyOption, ContextQuery.timeoutOption,
        ])

    public static func run(_ arguments: ParsedArguments) async throws -> Int32 {
        let session = arguments.value("--session")
        let agent = arguments.value("--agent") ?? ""
        guard !agent.isEmpty || session != nil else { throw UsageError(spec, "option '--agent' is required") }
        return try await ContextQuery.run(arguments, spec) { client, timeout throws(SkillbusError) in
            let (holder, answer) = try await client.query(
                .memory(session.map { .session($0) } ?? .agent), agent: agent, timeout: timeout)
            if arguments.flag("--json") {
                var object = answer.objectValue ?? [:]
                object["agent"] = .string(holder)
                return print(JSONValue.object(object).jsonString)
            }
            let entries = answer["memory"]?.arrayValue ?? []
            print("memory of \(session.map { "session \($0)" } ?? "agent") on \(holder): \(entries.count) key(s)")
            for entry in entries {
                print("\(entry["key"]?.stringValue ?? "?") = \((entry["value"] ?? .null).jsonString)")
            }
        }
    }
}

/// `skillbus ask`
public enum AskCommand: SkillbusCommand {
    public static let spec = CommandSpec(
        name: "ask",
        abstract: "Ask an agent: its planner decides which skills to call, and it answers.",
        discussion: """
            Sends MESSAGE for a turn: to the named agent (or one that plays --role), else the session's current
            agent, else the coordinator's default agent, else the least loaded agent with a planner. Prints the reply as it streams in; on standard error each skill call of the
            turn and the states it went through (on a terminal, as they happen). --json prints the turn document (PROTOCOL §5.18). Exit codes as for send.
            With --agents (or --all: every agent with a planner, or with --role every one that plays it) each of
            those agents answers MESSAGE in one team round, and --aggregate says what comes back: all (every
            reply), first (the first reply; the others are cancelled) or majority (the reply most agents gave,
            compared trimmed and lower-cased). --json then prints the round document (PROTOCOL §5.14).

            EXAMPLE: skillbus ask "what is (1+2)*3" --session s1
                     skillbus ask "what is 6*7" --agents lead,writer,critic --aggregate majority
            """,
        positionals: "MESSAGE",
        options: [
            OptionSpec("--agent", value: "NAME", help: "The agent to ask."),
            OptionSpec("--role", value: "ROLE", help: "Ask an agent that plays this role (in a session: the same one)."),
            OptionSpec("--agents", value: "a,b,…", help: "Ask each of these agents, in one round."),
            OptionSpec("--all", help: "Ask every agent with a planner (with --role: every one that plays it)."),
            OptionSpec("--aggregate", value: "MODE", help: "With --agents or --all: all, first or majority (default all)."),
            OptionSpec("--session", value: "ID", help: "The session the turn belongs to (default: none)."),
            Approval.option,
            OptionSpec("--json", help: "Print the turn document as JSON (with --agents or --all: the round's)."),
            coordinatorOption, serverKeyOption, keyOption,
            OptionSpec("--timeout", value: "SECONDS", help: "How long the whole turn may take (default 30)."),
        ])

    public static func run(_ arguments: ParsedArguments) async throws -> Int32 {
        guard !arguments.positionals.isEmpty else { throw UsageError(spec, "give the message to ask") }
        if arguments.value("--agent") != nil && arguments.value("--role") != nil {
            throw UsageError(spec, "give --agent or --role, not both")
        }
        let message = arguments.positionals.joined(separator: " ")
        let session = arguments.value("--session") ?? ""
        guard session.utf8.count <= Wire.maxSessionIDBytes else {
            throw UsageError(spec, "option '--session': at most \(Wire.maxSessionIDBytes) bytes")
        }
        let endpoint = try Defaults.bus(arguments, spec)
        let timeout = try arguments.double("--timeout", minimum: 0.001, maximum: 86_400, in: spec) ?? 30
        if let round = try TeamAsk.round(arguments, message: message, spec: spec) {
            return try await TeamAsk.run(round, arguments, spec: spec, session: session, timeout: timeout)
        }
        let context = try ZMQContext()
        let client = try await SkillbusClient.connect(
            endpoint: endpoint, context: context, credentials: try Defaults.credentials(arguments, spec))
        Approval.install(on: client, yes: arguments.flag("--yes"))
        let code = await run(arguments, client: client, message: message, session: session, timeout: timeout)
        // Ending the context flushes what is still queued: after Ctrl-C, the turn's CANCEL.
        client.close()
        await context.terminate(within: .seconds(1))
        return code
    }

    private static func run(
        _ arguments: ParsedArguments, client: SkillbusClient, message: String, session: String, timeout: Double
    ) async -> Int32 {
        let json = arguments.flag("--json")
        // Without --json the reply is printed as it streams in, and not again at the end; on a terminal the
        // turn's states and calls are shown as they happen too.
        let streamed = Mutex(false)
        let live = !json && isatty(STDERR_FILENO) != 0
        let view = TurnView()
        var onPiece: (@Sendable (String) -> Void)?
        if !json {
            onPiece = { piece in
                streamed.withLock { $0 = true }
                view.piece(piece)
            }
        }
        let onProgress: (@Sendable (String, TurnProgress) -> Void)? = live ? view.show : nil
        // Ctrl-C (or SIGTERM) cancels the turn: the ask gives up, the agent stops it, and the exit code is 130.
        let agentName = arguments.value("--role").map { AgentTarget.role($0).text } ?? arguments.value("--agent") ?? ""
        let printPieces = onPiece
        let (outcome, stoppedBy) = await cancellingOnSignal {
            () async -> Result<(agent: String, document: JSONValue), SkillbusError> in
            do throws(SkillbusError) {
                return .success(
                    try await client.ask(
                        message, agent: agentName, sessionID: session, timeout: .seconds(timeout), onPiece: printPieces,
                        onProgress: onProgress))
            } catch {
                return .failure(error)
            }
        }
        do throws(SkillbusError) {
            let (agent, document) = try outcome.get()
            if json {
                print(document.jsonString)
            } else {
                if streamed.withLock({ $0 }) { print("") }
                if live {
                    if let handedOver = document["handedOverBy"] { printError(handoffLine(handedOver, to: agent)) }
                    if !streamed.withLock({ $0 }), let reply = document["reply"]?.stringValue { print(reply) }
                } else {
                    render(document, agent: agent, printReply: !streamed.withLock { $0 })
                }
            }
            return 0
        } catch {
            // A turn that failed carries its document in the error's details.
            let document = error.details?["turn"] != nil ? error.details : nil
            if json {
                print((document ?? error.json).jsonString)
            } else if let document, !live {
                render(document, agent: document["agent"]?.stringValue ?? "")
            }
            printError("error: \(error.code): \(error.message)")
            return stoppedBy ?? SendCommand.exitCode(for: error.code)
        }
    }

    /// `↪ lead handed over to support: the note`.
    static func handoffLine(_ handedOver: JSONValue, to agent: String) -> String {
        "↪ \(handedOver["agent"]?.stringValue ?? "?") handed over to \(agent): \(handedOver["note"]?.stringValue ?? "")"
    }

    /// The calls and states on standard error, the reply on standard output. A turn handed over shows the
    /// handing turn first; a call that asked another agent shows that agent's turn indented under it.
    static func render(_ document: JSONValue, agent: String, printReply: Bool = true, indent: String = "") {
        if let handedOver = document["handedOverBy"] {
            if let earlier = handedOver["turn"], earlier != .null {
                render(earlier, agent: earlier["agent"]?.stringValue ?? "", printReply: false, indent: indent)
            }
            printError(indent + handoffLine(handedOver, to: agent))
        }
        for call in document["calls"]?.arrayValue ?? [] {
            let ok = call["status"] == "ok"
            let outcome = ok ? (call["result"] ?? .null).jsonString : call["error"]?["message"]?.stringValue ?? "?"
            let what =
                if let ask = call["ask"] {
                    "ask \(ask["to"]?.stringValue ?? "?") \((ask["message"] ?? "").jsonString.prefix(80))"
                } else {
                    "\(call["skill"]?.stringValue ?? "?") \((call["parameters"] ?? [:]).jsonString.prefix(80))"
                }
            printError("\(indent)\(ok ? "✓" : "✗") \(what) → \(outcome.prefix(120))")
            if let nested = call["turn"], nested != .null {
                render(nested, agent: nested["agent"]?.stringValue ?? "", printReply: false, indent: indent + "    ")
            }
        }
        let states = (document["states"]?.arrayValue ?? []).compactMap { $0["state"]?.stringValue }
        printError("\(indent)\(agent): " + states.joined(separator: " → "))
        if printReply, let reply = document["reply"]?.stringValue { print(reply) }
    }
}

/// How `send` and `ask` answer the bus when a skill needs confirmation: `--yes` approves in advance; on a
/// terminal the user is asked; without one it is refused (and the command exits 2, confirmation_required).
enum Approval {
    static let option = OptionSpec("--yes", help: "Approve skills that need confirmation (file.write) without asking.")

    static func install(on client: SkillbusClient, yes: Bool) {
        client.onConfirmation { confirmation in
            if yes { return true }
            guard isatty(STDIN_FILENO) == 1 else { return false }
            let parameters = (confirmation.parameters.objectValue ?? [:]).sorted { $0.key < $1.key }
                .map { "\($0.key)=\($0.value.stringValue ?? $0.value.jsonString)" }.joined(separator: " ")
            FileHandle.standardError.write(Data("run \(confirmation.skill) \(parameters)? [y/N] ".utf8))
            // Reading the terminal blocks: on a thread of its own, never the cooperative pool.
            let line = await withCheckedContinuation { continuation in
                Thread.detachNewThread { continuation.resume(returning: readLine()) }
            }
            return ["y", "yes"].contains(line?.trimmingCharacters(in: .whitespaces).lowercased() ?? "")
        }
    }
}
