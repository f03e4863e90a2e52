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

    @Test("a failed call never fills a reply: the rule's errorReply answers, or the turn fails with its error")
    func failedCalls() async throws {
        let planner = RulesPlanner(rules: try Self.rules())
        var input = PlannerInput(message: "remember colour is blue and say hi", skills: skills)
        #expect(
            try await planner.next(input)
                == .call(skill: "memory.set", parameters: ["key": "colour", "value": "blue and say hi"]))
        let full = SkillbusError(.storageUnavailable, "disk full")
        input.steps.append(PlannerStep(skill: "memory.set", parameters: [:], outcome: .failure(full)))
        // No errorReply: the call's error, as it is, and the later rule's call is not made.
        do {
            let decision = try await planner.next(input)
            Issue.record("a failed call was answered with \(decision)")
        } catch let error as SkillbusError {
            #expect(error == full)
        }

        let write = try RulesPlanner.Rule(
            intent: "write (?<text>\\w+) to (?<path>\\S+)", skill: "file.write", parameters: ["path": "{path}", "text": "{text}"],
            reply: "wrote {result.bytes} bytes to {path}", errorReply: "could not write {path} ({error.code}): {error}")
        let writer = RulesPlanner(rules: [write])
        let refused = SkillbusError(.confirmationRequired, "nobody approved")
        let failed = PlannerStep(skill: "file.write", parameters: [:], outcome: .failure(refused))
        let message = "write hello to notes.txt"
        #expect(
            try await writer.next(PlannerInput(message: message, steps: [failed], skills: []))
                == .reply("could not write notes.txt (confirmation_required): nobody approved"))
        let wrote = PlannerStep(skill: "file.write", parameters: [:], outcome: .success(.json(["bytes": 5])))
        #expect(
            try await writer.next(PlannerInput(message: message, steps: [wrote], skills: []))
                == .reply("wrote 5 bytes to notes.txt"))
    }

    @Test("a message no rule understands is answered with what the agent can do")
    func noMatch() async throws {
        let planner = RulesPlanner(rules: try Self.rules())
        guard case .reply(let text) = try await planner.next(PlannerInput(message: "sing a song", skills: skills)) else {
            Issue.record("no reply")
            return
        }
        #expect(text.contains("\"what is (1+2)*3\" (math.eval)") && text.contains("memory.set") && text.contains("echo"))
    }

    @Test("errorReply from configuration; {error} in reply and {result} in errorReply are refused by name")
    func errorReplyConfiguration() throws {
        let planner = try RulesPlanner(
            json: ["rules": [["intent": "x", "skill": "echo", "reply": "{result}", "errorReply": "no: {error}"]]])
        #expect(planner.rules.first?.errorReply == "no: {error}")
        let bad: [(JSONValue, String)] = [
            (["intent": "x", "skill": "echo", "reply": "{result} or {error}"], "reply uses {error}"),
            (["intent": "x", "skill": "echo", "reply": "ok", "errorReply": "{result.bytes}"], "errorReply uses {result.bytes}"),
            (["intent": "x", "skill": "echo", "reply": "ok", "errorReply": 3], "'errorReply' must be a string"),
            (["intent": "x", "skill": "echo", "reply": "ok", "onError": "no"], "unknown key 'onError'"),
        ]
        for (rule, words) in bad {
            do {
                _ = try RulesPlanner(json: ["rules": [rule]])
                Issue.record("accepted \(rule)")
            } catch {
                #expect(error.code == .invalidConfiguration && error.message.contains(words), "\(error)")
                #expect(error.message.hasPrefix("rules[0]: "), "\(error)")
            }
        }
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
