import Foundation
@testable import Skillbus
import SkillbusZMQ
import Testing

/// One session served by several agents, each with its own context, with real processes: `history` shows the
/// whole session across agents in time order, `sessions` lists every agent of it, an agent that does not answer
/// is named and the rest shown, and a coordinator restart (kill -9, journal on) keeps the session's agents.
@Suite("One session, many agents", .serialized, .timeLimit(.minutes(3)))
struct SessionTeamTests {
    static let rules: JSONValue = [
        "rules": [["intent": "say (?<word>\\w+)", "skill": "echo", "params": ["text": "{word}!"], "reply": "{result}"]]
    ]

    /// Worker arguments for an agent with the rules planner, echo and sleep (its store in the process's own state
    /// directory); the config file is removed when the test ends.
    static func plannerConfig(_ name: String) throws -> String {
        let path = NSTemporaryDirectory() + "skillbus-team-\(name)-\(UUID().uuidString.prefix(8)).json"
        try Data(
            JSONValue.object(["version": 1, "name": .string(name), "skills": ["echo", "sleep"], "planner": Self.rules])
                .serialized()
        ).write(to: URL(fileURLWithPath: path))
        return path
    }

    /// `skillbus ARGS… --coordinator BUS`, and the first line of JSON it printed.
    static func run(_ bus: String, _ arguments: [String]) async throws -> (code: Int32, output: [String], json: JSONValue) {
        let (code, output) = try await runSkillbus(arguments + ["--coordinator", bus])
        let json = output.first { $0.hasPrefix("{") }.flatMap { try? JSONValue(parsing: $0) } ?? .null
        return (code, output, json)
    }

    /// Asks `agent` (nil: whichever the bus picks) in `session`; returns the agent that took the turn.
    static func ask(_ bus: String, _ message: String, session: String, agent: String? = nil) async throws -> String? {
        let named = agent.map { ["--agent", $0] } ?? []
        let (code, output, document) = try await run(bus, ["ask", message, "--session", session, "--json"] + named)
        #expect(code == 0 && document["status"] == "ok", "\(output)")
        return document["agent"]?.stringValue
    }

    static func agentNames(_ value: JSONValue?) -> [String] {
        (value?.arrayValue ?? []).compactMap { $0["agent"]?.stringValue }
    }

    @Test("two agents serve one session: history merges both in time order, sessions lists both, a silent agent is named")
    func twoAgentsOneSession() async throws {
        let cluster = try await TestCluster()
        defer { cluster.terminate() }
        let configs = try ["a", "b"].map(Self.plannerConfig)
        defer { for path in configs { try? FileManager.default.removeItem(atPath: path) } }
        for (name, config) in zip(["a", "b"], configs) { try await cluster.startWorker(name, ["--config", config]) }
        #expect(try await Self.ask(cluster.bus, "say hello", session: "S", agent: "a") == "a")
        #expect(try await Self.ask(cluster.bus, "say world", session: "S", agent: "b") == "b")

        let history = try await Self.run(cluster.bus, ["history", "S", "--json"])
        #expect(history.code == 0 && history.json["session"] == "S" && history.json["agents"] == ["a", "b"])
        let messages = history.json["messages"]?.arrayValue ?? []
        let turn = ["user", "skillCall", "skillResult", "agent"]
        #expect(messages.map { "\($0["agent"]?.stringValue ?? "") \($0["role"]?.stringValue ?? "")" }
            == turn.map { "a \($0)" } + turn.map { "b \($0)" })
        let times = messages.compactMap { $0["time"]?.stringValue }
        #expect(times.count == 8 && times == times.sorted())
        #expect(messages.first?["content"] == "say hello" && messages.last?["content"] == "world!")
        let human = try await Self.run(cluster.bus, ["history", "S"])
        #expect(human.code == 0 && human.output.contains("session S on a, b: 8 message(s)"))
        #expect(human.output.contains { $0.contains("  a  user         \"say hello\"") })
        #expect(human.output.contains { $0.contains("  b  agent        \"world!\"") })

        let sessions = try await Self.run(cluster.bus, ["sessions", "--json"])
        let listed = sessions.json["sessions"]?.arrayValue ?? []
        #expect(sessions.code == 0 && listed.count == 1 && listed.first?["session"] == "S")
        let agents = listed.first?["agents"]?.arrayValue ?? []
        #expect(Self.agentNames(listed.first?["agents"]) == ["a", "b"])
        #expect(agents.allSatisfy { $0["turns"] == 1 && $0["messages"] == 4 && $0["role"] == "" && $0["first"] != nil })

        // b leaves: the roster still names it, history shows a's part and says b did not answer.
        let b = try #require(cluster.workers.withLock { $0["b"] })
        b.signal(SIGTERM)
        _ = try await b.waitForExit()
        try await cluster.coordinator.waitForLine("b to leave") { $0.contains("agent 'b' left") }
        let partial = try await Self.run(cluster.bus, ["history", "S"])
        #expect(partial.code == 0 && partial.output.contains("session S on a: 4 message(s)"), "\(partial.output)")
        #expect(partial.output.contains { $0.hasPrefix("b: unknown_agent:") })
        let withoutB = try await Self.run(cluster.bus, ["sessions", "--json"])
        let remaining = withoutB.json["sessions"]?.arrayValue?.first?["agents"]?.arrayValue ?? []
        #expect(Self.agentNames(.array(remaining)) == ["a", "b"] && remaining.last?["turns"] == nil)

        // Nobody answers: the command fails, after naming each.
        let a = try #require(cluster.workers.withLock { $0["a"] })
        a.signal(SIGTERM)
        _ = try await a.waitForExit()
        try await cluster.coordinator.waitForLine("a to leave") { $0.contains("agent 'a' left") }
        let none = try await Self.run(cluster.bus, ["history", "S"])
        #expect(none.code == 1 && none.output.contains { $0.hasPrefix("a: unknown_agent:") })
        #expect(none.output.contains { $0.hasPrefix("error: unknown_agent:") })
    }

    @Test("after kill -9 and a restart with the journal, the session goes on to its last agent, busy or not")
    func restartKeepsTheSession() async throws {
        let endpoints = try freeEndpoints(2)
        let directory = NSTemporaryDirectory() + "skillbus-team-journal-\(UUID().uuidString.prefix(8))"
        defer { try? FileManager.default.removeItem(atPath: directory) }
        func startCoordinator() async throws -> SkillbusProcess {
            let process = try SkillbusProcess(
                ["coordinator", "--bus", endpoints[0], "--feed", endpoints[1], "--data-dir", directory,
                 "--heartbeat-ms", "500"], name: "coordinator")
            try await process.waitForLine("ready line") { $0.hasPrefix("skillbus coordinator ready:") }
            return process
        }
        var coordinator = try await startCoordinator()
        defer { coordinator.signal(SIGTERM) }
        let configs = try ["a", "b"].map(Self.plannerConfig)
        defer { for path in configs { try? FileManager.default.removeItem(atPath: path) } }
        var workers: [SkillbusProcess] = []
        defer { for worker in workers { worker.signal(SIGTERM) } }
        for (name, config) in zip(["a", "b"], configs) {
            workers.append(
                try SkillbusProcess(
                    ["worker", "--coordinator", endpoints[0], "--heartbeat-ms", "500", "--config", config], name: name))
            try await coordinator.waitForLine("\(name) to join") { $0.contains("agent '\(name)' joined") }
        }
        let bus = endpoints[0]
        #expect(try await Self.ask(bus, "say one", session: "S", agent: "a") == "a")
        #expect(try await Self.ask(bus, "say two", session: "S", agent: "b") == "b")
        // Both members are committed (the move to b is written at the next tick) before the kill.
        try await waitUntil("the journal to hold both agents of S") { journaledAgents(directory, "S") == ["a", "b"] }

        coordinator.signal(SIGKILL)
        _ = try await coordinator.waitForExit()
        coordinator = try await startCoordinator()
        try await coordinator.waitForLine("the roster read back") { $0.contains("the journal knew the agents of 1 session(s)") }
        for name in ["a", "b"] {
            try await coordinator.waitForLine("\(name) to join again") { $0.contains("agent '\(name)' joined") }
        }
        // b is busier than a: routed by load, the turn would go to a. The session's affinity sends it to b.
        let busy = try SkillbusProcess(
            ["send", "sleep", "ms:=5000", "--agents", "b", "--coordinator", bus, "--timeout", "20"], name: "busy")
        defer { busy.signal(SIGTERM) }
        try await waitUntil("b to run the sleep") {
            let listing = try await Self.run(bus, ["agents", "--json"]).json
            return listing["agents"]?.arrayValue?.first { $0["agent"] == "b" }?["inFlight"] == 1
        }
        #expect(try await Self.ask(bus, "say three", session: "S") == "b")
        let sessions = try await Self.run(bus, ["sessions", "--json"])
        #expect(Self.agentNames(sessions.json["sessions"]?.arrayValue?.first?["agents"]) == ["a", "b"])
        let history = try await Self.run(bus, ["history", "S", "--json"])
        let agents = (history.json["messages"]?.arrayValue ?? []).map { $0["agent"]?.stringValue ?? "" }
        #expect(agents == Array(repeating: "a", count: 4) + Array(repeating: "b", count: 8))
    }
}

/// The agents the journal in `directory` holds for `session`, read as a second connection beside the running
/// coordinator (WAL lets a reader in while it writes), in the order they first served it.
func journaledAgents(_ directory: String, _ session: String) -> [String] {
    let path = directory + "/" + JournalSchema.databaseName
    guard FileManager.default.fileExists(atPath: path),
        let database = try? SQLiteDatabase.open(path: path, migrations: JournalSchema.migrations)
    else { return [] }
    defer { database.close() }
    var agents: [String] = []
    try? database.rows("SELECT agent FROM session_members WHERE session = ? ORDER BY first", [.text(session)]) {
        agents.append($0.text(0))
    }
    return agents
}
