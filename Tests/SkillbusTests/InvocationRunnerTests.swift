import Synchronization
import Testing

@testable import Skillbus

/// The parameters of both probes: a text, and a count that defaults to 2.
let probeSchema = ParameterSchema([
    ParameterField("text", .string),
    ParameterField("count", .integer, required: false, default: 2),
])

/// A skill whose behaviour each test chooses.
struct ProbeSkill: AgentSkill {
    let identifier: String
    var displayName: String { identifier }
    var description: String { "a skill for tests" }
    var parameterSchema = probeSchema
    let behaviour: @Sendable ([String: JSONValue], SkillExecutionContext) async throws -> SkillResult

    func execute(parameters: [String: JSONValue], context: SkillExecutionContext) async throws -> SkillResult {
        try await behaviour(parameters, context)
    }
}

/// A synchronous skill whose body each test chooses.
struct SynchronousProbe: SynchronousSkill {
    let identifier: String
    var displayName: String { identifier }
    var description: String { "a synchronous skill for tests" }
    var parameterSchema = probeSchema
    var executionStyle: SkillExecutionStyle = .quick
    let body: @Sendable ([String: JSONValue], SkillExecutionContext) throws -> SkillResult

    /// The same skill, run on the global executor (synchronous, but not quick).
    var general: SynchronousProbe {
        var probe = self
        probe.executionStyle = .general
        return probe
    }

    func executeNow(parameters: [String: JSONValue], context: SkillExecutionContext) throws -> SkillResult {
        try body(parameters, context)
    }
}

private struct Broken: Error, CustomStringConvertible {
    var description: String { "the probe broke" }
}

@Suite("Invocation runner: the worker's execution path without sockets")
struct InvocationRunnerTests {
    func invocation(_ skill: String, _ parameters: String) -> Invocation {
        Invocation(
            invocationID: "inv-1", roundID: "round-1", sessionID: "session-1", skill: skill, deadlineMs: 60_000,
            parameters: Array(parameters.utf8))
    }

    func runner(_ skills: ProbeSkill...) -> InvocationRunner {
        InvocationRunner(
            agentName: "alpha", skills: Dictionary(uniqueKeysWithValues: skills.map { ($0.identifier, $0) }))
    }

    let repeater = ProbeSkill(identifier: "text.repeat") { parameters, _ in
        .text(String(repeating: parameters["text"]?.stringValue ?? "", count: parameters["count"]?.intValue ?? 0))
    }

    func error(of outcome: InvocationRunner.Outcome) throws -> SkillbusError {
        #expect(outcome.status == .error)
        return SkillbusError(json: try JSONValue(parsing: outcome.payload))
    }

    @Test("success: status ok, the result's wire form, defaults applied, the skill announced first")
    func success() async throws {
        let started = Mutex<[String]>([])
        let outcome = await runner(repeater).run(invocation("text.repeat", #"{"text":"ab"}"#)) { identifier in
            started.withLock { $0.append(identifier) }
        }
        #expect(outcome == .init(status: .ok, payload: SkillResult.text("abab").serialized(), failure: nil))
        #expect(started.withLock { $0 } == ["text.repeat"])
    }

    @Test("the skill sees the invocation's round, session, agent and deadline")
    func context() async throws {
        let seen = ProbeSkill(identifier: "seen", parameterSchema: ParameterSchema([])) { _, context in
            .json([
                "round": .string(context.roundID), "session": .string(context.sessionID),
                "agent": .string(context.agentName), "invocation": .string(context.invocationID),
                "future": .bool(context.deadline > .now),
            ])
        }
        let outcome = await runner(seen).run(invocation("seen", "{}"))
        #expect(outcome.status == .ok)
        let result = try SkillResult(json: try JSONValue(parsing: outcome.payload))
        #expect(
            result
                == .json([
                    "round": "round-1", "session": "session-1", "agent": "alpha", "invocation": "inv-1",
                    "future": true,
                ]))
    }

    @Test("an unknown skill is refused, naming what the agent offers; nothing runs")
    func unknownSkill() async throws {
        let started = Mutex(false)
        let outcome = await runner(repeater).run(invocation("teleport", "{}")) { _ in started.withLock { $0 = true } }
        let error = try error(of: outcome)
        #expect(error.code == .unknownSkill)
        #expect(error.message == "agent 'alpha' does not offer 'teleport' (offers: text.repeat)")
        #expect(outcome.failure == nil)
        #expect(!started.withLock { $0 })
    }

    @Test("the skill is looked up before the parameters are read (PROTOCOL §4.10); no skills is 'offers: none'")
    func lookupFirst() async throws {
        let outcome = await InvocationRunner(agentName: "alpha", skills: [:]).run(invocation("teleport", "{broken"))
        let error = try error(of: outcome)
        #expect(error.code == .unknownSkill)
        #expect(error.message == "agent 'alpha' does not offer 'teleport' (offers: none)")
    }

    @Test("parameters that are not JSON, or not an object, are invalid_parameters", arguments: ["{text:", "[1, 2]"])
    func invalidJSON(parameters: String) async throws {
        let outcome = await runner(repeater).run(invocation("text.repeat", parameters))
        let error = try error(of: outcome)
        #expect(error.code == .invalidParameters)
        #expect(error.message.hasPrefix("parameters of 'text.repeat' "))
        #expect(outcome.failure == nil)
    }

    @Test("invalid parameters report every problem at once; nothing runs")
    func invalidParameters() async throws {
        let ran = Mutex(false)
        let guarded = ProbeSkill(identifier: "text.repeat") { _, _ in
            ran.withLock { $0 = true }
            return .text("")
        }
        let outcome = await runner(guarded).run(invocation("text.repeat", #"{"count":1.5,"extra":true}"#))
        let error = try error(of: outcome)
        #expect(error.code == .invalidParameters)
        #expect(
            error.details?.arrayValue?.compactMap(\.stringValue) == [
                "missing required parameter 'text' (string)",
                "parameter 'count' must be integer, got number",
                "unknown parameter 'extra' (expected: text, count)",
            ])
        #expect(!ran.withLock { $0 })
        #expect(outcome.failure == nil)
    }

    @Test("a skill that throws a plain Error fails as skill_failed with its description")
    func plainError() async throws {
        let broken = ProbeSkill(identifier: "text.repeat") { _, _ in throw Broken() }
        let outcome = await runner(broken).run(invocation("text.repeat", #"{"text":"x"}"#))
        let error = try error(of: outcome)
        #expect(error == SkillbusError(.skillFailed, "'text.repeat' failed: the probe broke"))
        #expect(outcome.failure == "'text.repeat' failed: the probe broke")
    }

    @Test("a SkillbusError from the skill travels as it is")
    func skillbusError() async throws {
        let refusing = ProbeSkill(identifier: "text.repeat") { _, _ in throw SkillbusError(.timeout, "too slow") }
        let outcome = await runner(refusing).run(invocation("text.repeat", #"{"text":"x"}"#))
        #expect(try error(of: outcome) == SkillbusError(.timeout, "too slow"))
        #expect(outcome.failure == "too slow")
    }

    @Test("a cancelled skill ends as cancelled")
    func cancelled() async throws {
        let started = OneShot<Void>()
        let waiting = ProbeSkill(identifier: "wait") { _, _ in
            started.offer(())
            try await Task.sleep(for: .seconds(3600))
            return .text("woke up")
        }
        let runner = runner(waiting)
        let task = Task { await runner.run(invocation("wait", #"{"text":"x"}"#)) }
        await started.value()
        task.cancel()
        let outcome = try #require(await withDeadline(.seconds(10)) { await task.value })
        #expect(try error(of: outcome) == SkillbusError(.cancelled, "'wait' was cancelled"))
        #expect(outcome.failure == "cancelled")
    }

    let synchronousRepeater = SynchronousProbe(identifier: "text.repeat") { parameters, context in
        #expect(context.invocationID == "inv-1")
        return .text(String(repeating: parameters["text"]?.stringValue ?? "", count: parameters["count"]?.intValue ?? 0))
    }

    @Test("runNow runs a synchronous skill as run does: defaults applied, the skill announced first")
    func synchronousSuccess() async throws {
        let runner = InvocationRunner(agentName: "alpha", skills: ["text.repeat": synchronousRepeater])
        var started: [String] = []
        let outcome = runner.runNow(invocation("text.repeat", #"{"text":"ab"}"#), synchronousRepeater) {
            started.append($0)
        }
        #expect(outcome == .init(status: .ok, payload: SkillResult.text("abab").serialized(), failure: nil))
        #expect(started == ["text.repeat"])
        // Its `execute` is the same body, for callers that await.
        #expect(await runner.run(invocation("text.repeat", #"{"text":"ab"}"#)) == outcome)
    }

    @Test("runNow: invalid parameters are refused before the body runs; what the body throws is mapped as run maps it")
    func synchronousFailures() throws {
        let runner = InvocationRunner(agentName: "alpha", skills: [:])
        var started = false
        let invalid = runner.runNow(invocation("text.repeat", #"{"count":"x"}"#), synchronousRepeater) { _ in
            started = true
        }
        #expect(try error(of: invalid).code == .invalidParameters)
        #expect(invalid.failure == nil)
        #expect(!started)
        let broken = SynchronousProbe(identifier: "text.repeat") { _, _ in throw Broken() }
        let failed = runner.runNow(invocation("text.repeat", #"{"text":"x"}"#), broken)
        #expect(try error(of: failed) == SkillbusError(.skillFailed, "'text.repeat' failed: the probe broke"))
        #expect(failed.failure == "'text.repeat' failed: the probe broke")
        let refusing = SynchronousProbe(identifier: "text.repeat") { _, _ in throw SkillbusError(.timeout, "too slow") }
        let refused = runner.runNow(invocation("text.repeat", #"{"text":"x"}"#), refusing)
        #expect(try error(of: refused) == SkillbusError(.timeout, "too slow"))
    }

    @Test("a worker runs inline its quick synchronous skills, also under its policies, and no other")
    func inlineSkills() {
        let underPolicy = PolicyOverriddenSkill(
            base: MathEvalSkill(), retryPolicy: nil, isIdempotent: true, concurrencyLimit: 2, isPure: false, cacheMs: nil)
        let skills: [String: any AgentSkill] = [
            "echo": EchoSkill(), "math.eval": underPolicy, "sleep": SleepSkill(), "text.stats": TextStatsSkill(),
            "slow": SynchronousProbe(identifier: "slow") { _, _ in .text("") }.general,
        ]
        #expect(AgentWorker.State.synchronous(in: skills).keys.sorted() == ["echo", "math.eval"])
    }

    @Test("a sub-call outside an agent is refused, and the refusal is the skill's error")
    func noCaller() async throws {
        let calling = ProbeSkill(identifier: "text.repeat") { _, context in try await context.invoke("echo") }
        let outcome = await runner(calling).run(invocation("text.repeat", #"{"text":"x"}"#))
        #expect(try error(of: outcome).code == .unknownSkill)
    }
}
