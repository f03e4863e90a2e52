import Skillbus

extension ContextQuery {
    /// Asks each of `agents` the same query at once; the outcomes in the order of `agents`.
    static func askEach(
        _ client: SkillbusClient, _ agents: [String], _ query: AgentQuery, timeout: Duration
    ) async -> [(agent: String, answer: Result<JSONValue, SkillbusError>)] {
        await withTaskGroup(of: (Int, Result<JSONValue, SkillbusError>).self) { group in
            for (index, agent) in agents.enumerated() {
                group.addTask {
                    // The answer is awaited before the pair is made: `(index, .success(try await …))` lost its
                    // index in optimised builds (Swift 6.3: every success came back as index 0).
                    let answer: Result<JSONValue, SkillbusError>
                    do throws(SkillbusError) {
                        answer = .success(try await client.query(query, agent: agent, timeout: timeout).answer)
                    } catch {
                        answer = .failure(error)
                    }
                    return (index, answer)
                }
            }
            var answers = [Result<JSONValue, SkillbusError>?](repeating: nil, count: agents.count)
            for await (index, answer) in group { answers[index] = answer }
            return zip(agents, answers).map { ($0, $1 ?? .failure(SkillbusError(.internalError, "no answer"))) }
        }
    }

    /// The bus's roster answer (`{"query":"roster"}`, PROTOCOL §5.17); nil from a bus that answers none (an
    /// older one refuses the query as malformed).
    static func roster(
        _ client: SkillbusClient, session: String?, timeout: Duration
    ) async throws(SkillbusError) -> JSONValue? {
        do {
            let limit = session == nil ? CoordinatorState.rosterLimit : 1
            return try await client.query(.roster(session: session, limit: limit), timeout: timeout).answer
        } catch where error.code == .malformedMessage {
            return nil
        }
    }

    static func text(_ value: JSONValue?) -> String { value.map { $0.stringValue ?? $0.jsonString } ?? "-" }
}

/// `skillbus sessions`
public enum SessionsCommand: SkillbusCommand {
    public static let spec = CommandSpec(
        name: "sessions",
        abstract: "List every session with the agents that took part in it (or one agent's sessions).",
        discussion: """
            Lists the sessions the bus knows, each with every agent that served it (its role, when it served
            first and last), and what each live agent's own store says of it: turns, messages, last update.
            With --agent, that agent's sessions only. --json: PROTOCOL §5.21.

            EXAMPLE: skillbus sessions --agent alpha
            """,
        options: [
            OptionSpec("--agent", value: "NAME", help: "Only this agent's sessions."),
            OptionSpec("--json", help: "Print the answers as JSON."),
            coordinatorOption, serverKeyOption, keyOption, ContextQuery.timeoutOption,
        ])

    public static func run(_ arguments: ParsedArguments) async throws -> Int32 {
        try await ContextQuery.run(arguments, spec) { client, timeout throws(SkillbusError) in
            if let agent = arguments.value("--agent") {
                return try await listAgent(agent, client, json: arguments.flag("--json"), timeout)
            }
            let roster = try await ContextQuery.roster(client, session: nil, timeout: timeout)
            let live = try await ContextQuery.liveAgents(client, timeout: timeout)
            var stores: [(agent: String, sessions: [JSONValue])] = []
            var errors: [JSONValue] = []
            for (agent, answer) in await ContextQuery.askEach(client, live, .sessions, timeout: timeout) {
                switch answer {
                case .success(let body): stores.append((agent, body["sessions"]?.arrayValue ?? []))
                case .failure(let error): errors.append(["agent": .string(agent), "error": error.json])
                }
            }
            let sessions = SessionViews.listing(roster: roster?["sessions"]?.arrayValue ?? [], stores: stores)
            if arguments.flag("--json") {
                print(JSONValue.object(["sessions": .array(sessions), "errors": .array(errors)]).jsonString)
            } else {
                var rows = [["SESSION", "AGENT", "ROLE", "LAST SERVED", "TURNS", "MESSAGES", "UPDATED"]]
                for session in sessions {
                    for agent in session["agents"]?.arrayValue ?? [] {
                        let role = agent["role"]?.stringValue ?? ""
                        rows.append(
                            [ContextQuery.text(session["session"]), ContextQuery.text(agent["agent"]),
                             role.isEmpty ? "-" : role]
                                + ["last", "turns", "messages", "updated"].map { ContextQuery.text(agent[$0]) })
                    }
                }
                print(rows.count == 1 ? "No sessions." : ContextQuery.table(rows))
                for error in errors {
                    printError("\(ContextQuery.text(error["agent"])): \(ContextQuery.text(error["error"]?["code"])): "
                        + ContextQuery.text(error["error"]?["message"]))
                }
            }
            if let total = roster?["total"]?.intValue, total > CoordinatorState.rosterLimit {
                printError("the bus knows \(total) sessions: the \(CoordinatorState.rosterLimit) served last are listed")
            }
        }
    }

    /// One agent's sessions, as its store says them: `{"agents": [{"agent", "sessions"}]}`.
    static func listAgent(
        _ agent: String, _ client: SkillbusClient, json: Bool, _ timeout: Duration
    ) async throws(SkillbusError) {
        let (_, answer) = try await client.query(.sessions, agent: agent, timeout: timeout)
        let sessions = answer["sessions"]?.arrayValue ?? []
        if json {
            return print(JSONValue.object(["agents": [["agent": .string(agent), "sessions": .array(sessions)]]]).jsonString)
        }
        var rows = [["AGENT", "SESSION", "TURNS", "MESSAGES", "UPDATED"]]
        for session in sessions {
            rows.append([agent] + ["session", "turns", "messages", "updated"].map { ContextQuery.text(session[$0]) })
        }
        print(rows.count == 1 ? "No sessions." : ContextQuery.table(rows))
    }
}

/// `skillbus history`
public enum HistoryCommand: SkillbusCommand {
    public static let spec = CommandSpec(
        name: "history",
        abstract: "Print a session's messages in time order, from every agent that took part in it.",
        discussion: """
            Asks every agent the bus saw serve the session (or the one named with --agent; when the bus knows
            none, every live agent) for its history of the session, and prints all messages in time order,
            each with its agent and role (user, agent, skillCall, skillResult). An agent that does not answer
            is named on standard error; the command fails only when none answered. --json: PROTOCOL §5.22.

            EXAMPLE: skillbus history s1 --json
            """,
        positionals: "SESSION",
        options: [
            OptionSpec("--agent", value: "NAME", help: "Only this agent's history of the session."),
            OptionSpec("--json", help: "Print the history as JSON."),
            coordinatorOption, serverKeyOption, keyOption, ContextQuery.timeoutOption,
        ])

    /// The agents to ask, and whether they are only guesses (every live agent: most hold no such session, and
    /// saying so of each would be noise).
    static func agents(
        of session: String, _ client: SkillbusClient, named: String?, _ timeout: Duration
    ) async throws(SkillbusError) -> (names: [String], guessed: Bool) {
        if let named { return ([named], false) }
        let roster = try await ContextQuery.roster(client, session: session, timeout: timeout)
        let known = (roster?["sessions"]?.arrayValue?.first?["agents"]?.arrayValue ?? []).compactMap {
            $0["agent"]?.stringValue
        }
        if !known.isEmpty { return (known, false) }
        return (try await ContextQuery.liveAgents(client, timeout: timeout), true)
    }

    public static func run(_ arguments: ParsedArguments) async throws -> Int32 {
        guard arguments.positionals.count == 1, let session = arguments.positionals.first else {
            throw UsageError(spec, "give exactly one session id")
        }
        return try await ContextQuery.run(arguments, spec) { client, timeout throws(SkillbusError) in
            let (agents, guessed) = try await agents(of: session, client, named: arguments.value("--agent"), timeout)
            var histories: [(agent: String, messages: [JSONValue])] = []
            var failures: [(agent: String, error: SkillbusError)] = []
            for (agent, answer) in await ContextQuery.askEach(client, agents, .history(session: session), timeout: timeout) {
                switch answer {
                case .success(let body): histories.append((agent, body["messages"]?.arrayValue ?? []))
                case .failure(let error) where guessed && [.unknownSession, .unsupported].contains(error.code): continue
                case .failure(let error): failures.append((agent, error))
                }
            }
            for (agent, error) in failures { printError("\(agent): \(error.code): \(error.message)") }
            guard !histories.isEmpty else {
                guard !failures.isEmpty else {
                    throw SkillbusError(
                        .unknownSession, "no live agent holds session '\(session.prefix(128))'",
                        details: ["session": .string(session)])
                }
                // Timed out only when every agent did; else what the first other refusal said.
                let code = failures.first { $0.error.code != .timeout }?.error.code ?? .timeout
                throw SkillbusError(
                    code, "no agent of session '\(session.prefix(128))' answered", details: ["session": .string(session)])
            }
            print(history(session, histories, json: arguments.flag("--json")))
        }
    }

    /// The merged history as printed: JSON (§5.22), or a line per message naming its agent.
    static func history(_ session: String, _ histories: [(agent: String, messages: [JSONValue])], json: Bool) -> String {
        let messages = SessionViews.mergedHistory(histories)
        let names = histories.map(\.agent)
        if json {
            return JSONValue.object(
                ["session": .string(session), "agents": .array(names.map(JSONValue.string)), "messages": .array(messages)]
            ).jsonString
        }
        let width = names.map(\.count).max() ?? 0
        let lines = messages.map { message in
            let agent = message["agent"]?.stringValue ?? "?"
            let role = message["role"]?.stringValue ?? "?"
            return "\(message["time"]?.stringValue ?? "")  \(agent.padded(to: width))  "
                + "\(role.padded(to: 11))  \((message["content"] ?? .null).jsonString)"
        }
        return (["session \(session) on \(names.joined(separator: ", ")): \(messages.count) message(s)"] + lines)
            .joined(separator: "\n")
    }
}
