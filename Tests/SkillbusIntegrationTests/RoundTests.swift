import Foundation
import Skillbus
import SkillbusZMQ
import Synchronization
import Testing

/// A skill that counts how often it really executed, by its parameters, and takes a while so that
/// identical invocations overlap.
final class CountingSkill: AgentSkill, @unchecked Sendable {  // the counter is a Mutex
    let identifier = "test.count"
    let displayName = "Count"
    let description = "Counts its own executions."
    let parameterSchema = ParameterSchema([
        ParameterField("a", .number), ParameterField("b", .number, required: false, default: 2),
    ])
    let executions = Mutex(0)

    func execute(parameters: [String: JSONValue], context: SkillExecutionContext) async throws -> SkillResult {
        let count = executions.withLock { value -> Int in
            value += 1
            return value
        }
        try await Task.sleep(for: .milliseconds(200))
        return .json([
            "execution": .number(Double(count)),
            "sum": .number((parameters["a"]?.doubleValue ?? 0) + (parameters["b"]?.doubleValue ?? 0)),
        ])
    }
}

/// Agents whose skill was cancelled while it ran, by name.
final class CancelLog: Sendable {
    let agents = Mutex<[String]>([])
}

/// A skill that answers with a fixed value after a fixed delay: to make agents vote, or race.
struct FixedAnswerSkill: AgentSkill {
    let identifier: String
    let answer: String
    let delay: Duration
    var cancellations: CancelLog? = nil
    var displayName: String { identifier }
    var description: String { "answers '\(answer)' after \(delay)" }
    var parameterSchema: ParameterSchema { ParameterSchema([ParameterField("question", .string, required: false)]) }
    func execute(parameters: [String: JSONValue], context: SkillExecutionContext) async throws -> SkillResult {
        do {
            try await Task.sleep(for: delay)
        } catch {
            cancellations?.agents.withLock { $0.append(context.agentName) }
            throw error
        }
        return .text(answer)
    }
}

/// Single-flight across real sockets: a coordinator process, an agent holding a counting skill, clients.
@Suite("Rounds: the same invocation executes once per round", .serialized, .timeLimit(.minutes(2)))
struct RoundTests {
    let context: ZMQContext
    init() throws { context = try ZMQContext() }

    /// A coordinator, an agent in this process that counts its executions, and a client; `stop` ends them.
    func counterCluster(_ coordinatorArguments: [String] = []) async throws -> (
        cluster: TestCluster, skill: CountingSkill, client: SkillbusClient, stop: @Sendable () -> Void
    ) {
        let cluster = try await TestCluster(coordinatorArguments: coordinatorArguments)
        let skill = CountingSkill()
        let running = try await agents(cluster, ["counter": [skill]])[0]
        let client = try SkillbusClient(endpoint: cluster.bus, context: context)
        return (
            cluster, skill, client,
            {
                client.close()
                running.cancel()
                cluster.terminate()
            }
        )
    }

    @Test("50 identical invocations in one round: 1 execution, 50 equal results; another round executes again")
    func fiftyIdentical() async throws {
        let (_, skill, client, stop) = try await counterCluster()
        defer { stop() }

        let outcomes = try await withThrowingTaskGroup(of: InvocationOutcome.self) { group in
            for _ in 0..<50 {
                group.addTask { try await client.invoke("test.count", parameters: ["a": 1], roundID: "round-1") }
            }
            var all: [InvocationOutcome] = []
            for try await outcome in group { all.append(outcome) }
            return all
        }
        #expect(outcomes.count == 50)
        #expect(outcomes.allSatisfy { $0.status == .ok && $0.result == outcomes[0].result && $0.agent == "counter" })
        #expect(skill.executions.withLock { $0 } == 1)

        // A retry after it finished gets the stored result; key order, number spelling and defaults do not
        // make a new invocation.
        for parameters: JSONValue in [["a": 1], ["b": 2, "a": 1.0], ["a": 1e0, "b": 2.0]] {
            let again = try await client.invoke("test.count", parameters: parameters, roundID: "round-1")
            #expect(again.result == outcomes[0].result)
        }
        #expect(skill.executions.withLock { $0 } == 1)

        // Another round, or other parameters, execute again.
        _ = try await client.invoke("test.count", parameters: ["a": 1], roundID: "round-2")
        _ = try await client.invoke("test.count", parameters: ["a": 1, "b": 3], roundID: "round-1")
        #expect(skill.executions.withLock { $0 } == 3)
    }

    @Test("send --round-id twice: the second is answered from the first, nothing executes again")
    func sendRetry() async throws {
        let (cluster, skill, _, stop) = try await counterCluster(["--heartbeat-ms", "200"])
        defer { stop() }
        let (first, one) = try await cluster.sendJSON(["test.count", "a:=5", "--round-id", "retry-1"])
        let (second, two) = try await cluster.sendJSON(["test.count", "a:=5", "--round-id", "retry-1"])
        #expect(first == 0 && second == 0)
        #expect(one["result"] == two["result"])
        #expect(one["stored"] == nil && two["stored"] == true)
        #expect(skill.executions.withLock { $0 } == 1)
        // For people: the second says it is the stored result, and that nothing ran now.
        let (_, lines) = try await cluster.send(["test.count", "a:=5", "--round-id", "retry-1"])
        #expect(lines.contains { $0.hasPrefix("✓ stored result of round retry-1") && $0.contains("nothing ran now") }, "\(lines)")
    }

    @Test("a coordinator started with --no-dedup executes every invocation")
    func switchedOff() async throws {
        let (_, skill, client, stop) = try await counterCluster(["--no-dedup"])
        defer { stop() }
        for _ in 0..<3 { _ = try await client.invoke("test.count", parameters: ["a": 1], roundID: "same") }
        #expect(skill.executions.withLock { $0 } == 3)
    }

    /// Agents in this process, each with its own skills, registered with the cluster.
    func agents(_ cluster: TestCluster, _ skills: [String: [any AgentSkill]]) async throws -> [Task<Void, Never>] {
        var tasks: [Task<Void, Never>] = []
        for (name, list) in skills {
            let worker = try AgentWorker(
                options: .init(name: name, coordinator: cluster.bus, capacity: 100), skills: list, context: context,
                logger: Logger(label: name, level: .error))
            tasks.append(Task { await worker.run() })
            try await cluster.coordinator.waitForLine("\(name) to join") { $0.contains("agent '\(name)' joined") }
        }
        return tasks
    }

    @Test("the same round id sent 10 times, also while it runs: 1 execution, 10 identical documents")
    func idempotentRound() async throws {
        let (_, skill, client, stop) = try await counterCluster()
        defer { stop() }
        let spec = RoundSpec.invoke(skill: "test.count", parameters: ["a": 3])
        let documents = try await withThrowingTaskGroup(of: RoundDocument.self) { group in
            for _ in 0..<10 { group.addTask { try await client.round(spec, roundID: "same-round") } }
            var all: [RoundDocument] = []
            for try await document in group { all.append(document) }
            return all
        }
        // One that came after the round ended gets it marked stored; otherwise all are the same document.
        func unmarked(_ document: RoundDocument) -> [UInt8] {
            var document = document
            document.stored = false
            return document.json.serialized()
        }
        #expect(documents.count == 10 && Set(documents.map(unmarked)).count == 1)
        #expect(documents[0].status == .ok)
        #expect(skill.executions.withLock { $0 } == 1)
        let later = try await client.round(spec, roundID: "same-round")
        #expect(later.stored && unmarked(later) == unmarked(documents[0]))
        let conflict = try await client.round(.invoke(skill: "test.count", parameters: ["a": 4]), roundID: "same-round")
        #expect(conflict.error?.code == .roundConflict)
        #expect(skill.executions.withLock { $0 } == 1)
    }

    @Test("fan-out: first wins and the feed shows the losers cancelled; majority votes, or shows the split")
    func fanout() async throws {
        let cluster = try await TestCluster()
        defer { cluster.terminate() }
        let cancelLog = CancelLog()
        let tasks = try await agents(
            cluster,
            [
                "speedy": [
                    FixedAnswerSkill(identifier: "test.race", answer: "speedy", delay: .milliseconds(50)),
                    FixedAnswerSkill(identifier: "test.vote", answer: "yes", delay: .zero),
                ],
                "slowpoke": [
                    FixedAnswerSkill(
                        identifier: "test.race", answer: "slowpoke", delay: .seconds(5), cancellations: cancelLog),
                    FixedAnswerSkill(identifier: "test.vote", answer: "yes", delay: .zero),
                ],
                "contrary": [
                    FixedAnswerSkill(
                        identifier: "test.race", answer: "contrary", delay: .seconds(5), cancellations: cancelLog),
                    FixedAnswerSkill(identifier: "test.vote", answer: "no", delay: .zero),
                ],
            ])
        defer { for task in tasks { task.cancel() } }
        let feed = try SkillbusProcess(
            ["feed", "--feed", cluster.feed, "--json", "--topic", "invocation.", "--topic", "registry.heartbeat"],
            name: "feed")
        defer { feed.signal(SIGTERM) }
        _ = try await feed.waitForLine("the feed to be subscribed") { $0.contains("registry.heartbeat") }

        let (raceCode, race) = try await cluster.sendJSON(["test.race", "--all", "--aggregate", "first"])
        #expect(raceCode == 0)
        #expect(race["agent"] == "speedy" && race["result"]?["text"] == "speedy")
        let cancelled = race["invocations"]?.arrayValue?.filter { $0["status"] == "cancelled" }.compactMap(\.["id"])
        #expect(Set(cancelled ?? []) == ["slowpoke", "contrary"])
        for loser in ["slowpoke", "contrary"] {
            _ = try await feed.waitForLine("\(loser) cancelled on the feed") {
                $0.contains("invocation.cancelled") && $0.contains("\"\(loser)\"")
            }
        }
        // The CANCEL reached both losers while their skills still ran.
        try await waitUntil("both losers to be cancelled on their agents", timeout: .seconds(4)) {
            Set(cancelLog.agents.withLock { $0 }) == ["slowpoke", "contrary"]
        }

        let (voteCode, vote) = try await cluster.sendJSON(["test.vote", "--all", "--aggregate", "majority"])
        #expect(voteCode == 0)
        #expect(vote["result"]?["text"] == "yes" && vote["aggregate"]?["votes"] == 2)
        let (splitCode, split) = try await cluster.sendJSON(
            ["test.vote", "--agents", "speedy,contrary", "--aggregate", "majority"])
        #expect(splitCode == 1)
        #expect(split["error"]?["code"] == "no_majority")
        #expect(split["aggregate"]?["split"]?.arrayValue?.count == 2)
        let (allCode, all) = try await cluster.sendJSON(["test.vote", "--agents", "contrary,speedy"])
        #expect(allCode == 0)
        #expect(all["result"]?.arrayValue?.compactMap { $0["agent"]?.stringValue } == ["contrary", "speedy"])
    }

    @Test("a plan file: steps in parallel, references, and a composite's sub-call that repeats a step is deduplicated")
    func planWithComposite() async throws {
        let cluster = try await TestCluster()
        defer { cluster.terminate() }
        let sandbox = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().appendingPathComponent("configs/sandbox").path
        let plans = URL(fileURLWithPath: sandbox).deletingLastPathComponent().appendingPathComponent("plans").path
        try await cluster.startWorker("alpha", ["--skills", "text.report,text.stats,text.grep"])
        try await cluster.startWorker("gamma", ["--skills", "file.read", "--sandbox", sandbox])
        let (code, document) = try await cluster.sendJSON(["--plan", plans + "/report.json", "--round-id", "plan-1"])
        #expect(code == 0)
        #expect(document["status"] == "ok")
        let invocations = document["invocations"]?.arrayValue ?? []
        #expect(invocations.prefix(4).map { $0["status"] } == ["ok", "ok", "ok", "ok"])
        let welcome = try String(contentsOfFile: sandbox + "/welcome.txt", encoding: .utf8)
        let mentions = welcome.split(separator: "\n").filter { $0.contains("Skillbus") }.count
        #expect(document["result"]?["mentions"]?["json"]?["count"]?.intValue == mentions)
        #expect(document["result"]?["report"]?["json"]?["stats"] == document["result"]?["stats"]?["json"])
        // text.report on alpha asked the bus for file.read of the same file: the plan's 'read' step served it;
        // and for text.stats of its text, which alpha offers too: the 'stats' step served that.
        let subCall = invocations.first { $0["skill"] == "file.read" && $0["id"] != "read" }
        #expect(subCall?["deduplicated"] == true)
        #expect(subCall?["reusedFrom"] == "read")
        let statsSubCall = invocations.first { $0["skill"] == "text.stats" && $0["id"] != "stats" }
        #expect(statsSubCall?["deduplicated"] == true && statsSubCall?["reusedFrom"] == "stats")
        #expect(document["summary"]?["deduplicated"] == 2)

        // Bad plans are refused before anything runs, with the reason.
        let broken = NSTemporaryDirectory() + "skillbus-plan-\(UUID().uuidString).json"
        try Data(#"{"steps": [{"id": "a", "skill": "echo", "after": ["a"]}]}"#.utf8).write(
            to: URL(fileURLWithPath: broken))
        let (badCode, bad) = try await cluster.sendJSON(["--plan", broken])
        #expect(badCode == 2)
        #expect(bad["error"]?["code"] == "invalid_round")
        try Data("{ not json".utf8).write(to: URL(fileURLWithPath: broken))
        let (notJSONCode, notJSON) = try await cluster.sendJSON(["--plan", broken])
        #expect(notJSONCode == 2)
        #expect(notJSON["error"]?["message"]?.stringValue?.contains("not JSON") == true)
    }
}
