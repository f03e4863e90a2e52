import Testing

@testable import Skillbus

/// The rules planner as a plain value: which rules fire, the calls they make in order, and the reply
/// built from their results.
@Suite("Rules planner")
struct RulesPlannerTests {
    static func rules() throws -> [RulesPlanner.Rule] {
        [
            try .init(
                intent: #"what is (?<expression>[0-9][0-9+\-*/^(). ]*)"#, skill: "math.eval",
                parameters: ["expression": "{expression}"], reply: "{expression} = {result.value}",
                example: "what is (1+2)*3"),
            try .init(
                intent: #"remember (?<key>\w+) is (?<value>.+)"#, skill: "memory.set",
                parameters: ["key": "{key}", "value": "{value}"], reply: "I will remember that {key} is {value}."),
            try .init(
                intent: #"and say (?<text>\w+)"#, skill: "echo", parameters: ["text": "{text}!"], reply: "{result}"),
        ]
    }

    let skills = [SkillDescriptor(identifier: "math.eval", displayName: "", description: "", parameters: .init([]))]

    @Test("each rule that fires makes one call, in rule order, with its groups filled in; then one reply")
    func turn() async throws {
        let planner = RulesPlanner(rules: try Self.rules())
        let message = "What is 6*7 and say hello"
        var input = PlannerInput(message: message, skills: skills)
        #expect(try await planner.next(input) == .call(skill: "math.eval", parameters: ["expression": "6*7 "]))
        input.steps.append(
            PlannerStep(
                skill: "math.eval", parameters: ["expression": "6*7 "],
                outcome: .success(.json(["expression": "6*7", "value": 42]))))
        #expect(try await planner.next(input) == .call(skill: "echo", parameters: ["text": "hello!"]))
        input.steps.append(PlannerStep(skill: "echo", parameters: ["text": "hello!"], outcome: .success(.text("hello!"))))
        #expect(try await planner.next(input) == .reply("6*7  = 42\nhello!"))
    }

    @Test("a failed call is part of the reply; a message no rule understands is answered with what the agent can do")
    func failuresAndNoMatch() async throws {
        let planner = RulesPlanner(rules: try Self.rules())
        var input = PlannerInput(message: "remember colour is blue", skills: skills)
        #expect(try await planner.next(input) == .call(skill: "memory.set", parameters: ["key": "colour", "value": "blue"]))
        input.steps.append(
            PlannerStep(
                skill: "memory.set", parameters: [:], outcome: .failure(SkillbusError(.storageUnavailable, "disk full"))))
        #expect(try await planner.next(input) == .reply("I will remember that colour is blue."))

        let echo = RulesPlanner(rules: [try .init(intent: "say (?<t>.+)", skill: "echo", parameters: ["text": "{t}"], reply: "{result}")])
        let failed = PlannerStep(skill: "echo", parameters: [:], outcome: .failure(SkillbusError(.timeout, "too slow")))
        #expect(try await echo.next(PlannerInput(message: "say hi", steps: [failed], skills: [])) == .reply("(timeout: too slow)"))

        guard case .reply(let text) = try await planner.next(PlannerInput(message: "sing a song", skills: skills)) else {
            Issue.record("no reply")
            return
        }
        #expect(text.contains("\"what is (1+2)*3\" (math.eval)") && text.contains("memory.set") && text.contains("echo"))
    }

    @Test("a rule that is no regular expression, or uses a group its intent lacks, is refused by name")
    func badRules() {
        #expect(throws: SkillbusError.self) { try RulesPlanner.Rule(intent: "what is (", skill: "x", reply: "") }
        do {
            _ = try RulesPlanner.Rule(intent: "add (?<a>\\d+)", skill: "math.eval", parameters: ["expression": "{a}+{b}"], reply: "")
            Issue.record("a rule with an unknown group was accepted")
        } catch {
            #expect(error.code == .invalidConfiguration && error.message.contains("{b}"))
        }
    }

    @Test("templates: placeholders replaced, unknown ones and stray braces kept as written")
    func templates() {
        #expect(Template("{a} and {b} and {} and {x{y}").fill { $0 == "a" ? "1" : nil } == "1 and {b} and {} and {x{y}")
        #expect(Template("no placeholders").names.isEmpty && Template("{a}{b}").names == ["a", "b"])
    }
}
