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

/// Single-flight across real sockets: a coordinator process, an agent holding a counting skill, clients.
@Suite("Rounds: the same invocation executes once per round", .serialized, .timeLimit(.minutes(2)))
struct RoundTests {
    let context: ZMQContext
    init() throws { context = try ZMQContext() }

    func agent(_ cluster: TestCluster, _ skill: CountingSkill) async throws -> Task<Void, Never> {
        let worker = try AgentWorker(
            options: .init(name: "counter", coordinator: cluster.bus, capacity: 100), skills: [skill],
            context: context, logger: Logger(label: "counter", level: .error))
        let running = Task { await worker.run() }
        try await cluster.coordinator.waitForLine("the counter to join") { $0.contains("agent 'counter' joined") }
        return running
    }

    @Test("50 identical invocations in one round: 1 execution, 50 equal results; another round executes again")
    func fiftyIdentical() async throws {
        let cluster = try await TestCluster()
        defer { cluster.terminate() }
        let skill = CountingSkill()
        let running = try await agent(cluster, skill)
        defer { running.cancel() }
        let client = try SkillbusClient(endpoint: cluster.bus, context: context)
        defer { client.close() }

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
        let cluster = try await TestCluster(coordinatorArguments: ["--heartbeat-ms", "200"])
        defer { cluster.terminate() }
        let skill = CountingSkill()
        let running = try await agent(cluster, skill)
        defer { running.cancel() }
        let (first, one) = try await cluster.sendJSON(["test.count", "a:=5", "--round-id", "retry-1"])
        let (second, two) = try await cluster.sendJSON(["test.count", "a:=5", "--round-id", "retry-1"])
        #expect(first == 0 && second == 0)
        #expect(one["result"] == two["result"])
        #expect(skill.executions.withLock { $0 } == 1)
    }

    @Test("a coordinator started with --no-dedup executes every invocation")
    func switchedOff() async throws {
        let cluster = try await TestCluster(coordinatorArguments: ["--no-dedup"])
        defer { cluster.terminate() }
        let skill = CountingSkill()
        let running = try await agent(cluster, skill)
        defer { running.cancel() }
        let client = try SkillbusClient(endpoint: cluster.bus, context: context)
        defer { client.close() }
        for _ in 0..<3 { _ = try await client.invoke("test.count", parameters: ["a": 1], roundID: "same") }
        #expect(skill.executions.withLock { $0 } == 3)
    }
}
