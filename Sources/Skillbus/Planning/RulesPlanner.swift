import Foundation
import Synchronization

/// The planner that needs nothing outside the process: intents from configuration. Each rule is a regular
/// expression with named groups, an action — the skill to call with a parameter template, another agent (or
/// role) to ask a message template, or one to hand the session over to with a note template — that uses the
/// groups, a reply template that uses the result, and optionally a reply for when the step fails. Every rule
/// whose expression matches the message fires, in the order given, one step each; then the replies of the
/// rules that fired make the answer (a handoff ends the turn instead). A step that failed is never passed off
/// as a result: its rule's error reply answers instead, or, when the rule has none, the turn fails with the
/// step's error (so `ask` exits as `send` does for that error). A message no rule matches is answered with
/// what the agent can do.
public struct RulesPlanner: Planner {
    /// Matching a few expressions takes microseconds.
    public var executionStyle: SkillExecutionStyle { .quick }

    /// What a rule does when it fires; its templates' `{group}` are replaced by the groups' texts.
    public enum Action: Sendable {
        case call(skill: String, parameters: [String: JSONValue])
        case ask(AgentTarget, message: String)
        case handoff(AgentTarget, note: String)
    }

    public struct Rule: Sendable {
        /// The regular expression, matched anywhere in the message, ignoring case.
        public let intent: String
        public let action: Action
        /// For a step that succeeded: `{group}`, `{result}` (the result for people) and `{result.KEY.KEY}` (a
        /// field of a JSON result).
        public let reply: String
        /// For a call that failed: `{group}`, `{error}` (the error's message) and `{error.code}`. Nil: the
        /// call's failure fails the turn.
        public let errorReply: String?
        /// A message this rule answers, for the list of what the agent can do.
        public let example: String?
        /// The reply, its placeholders found once: every turn the rule fires in fills it.
        let replyTemplate: Template
        let errorReplyTemplate: Template?
        /// The action's parameters, message or note, split into their parts once.
        let actionTemplate: TemplateValue
        private let expression: Expression
        /// The intent's named groups, found once: a turn matches every rule at each of its steps.
        private let groups: [String]

        public init(
            intent: String, skill: String, parameters: [String: JSONValue] = [:], reply: String,
            errorReply: String? = nil, example: String? = nil
        ) throws(SkillbusError) {
            try self.init(
                intent: intent, action: .call(skill: skill, parameters: parameters), reply: reply, errorReply: errorReply,
                example: example)
        }

        public init(
            intent: String, action: Action, reply: String, errorReply: String? = nil, example: String? = nil
        ) throws(SkillbusError) {
            do {
                expression = Expression(try NSRegularExpression(pattern: intent, options: [.caseInsensitive]))
            } catch {
                throw SkillbusError(.invalidConfiguration, "intent '\(intent)' is not a regular expression: \(error)")
            }
            let groups = Self.groupNames(in: intent)
            self.groups = groups.sorted()
            let (what, template): (String, JSONValue) =
                switch action {
                case .call(let skill, let parameters): ("the parameters of the rule for '\(skill)'", .object(parameters))
                case .ask(let target, let message): ("the message of the rule that asks \(target)", .string(message))
                case .handoff(let target, let note): ("the note of the rule that hands over to \(target)", .string(note))
                }
            let actionTemplate = TemplateValue(template)
            for name in actionTemplate.names where !groups.contains(name) {
                throw SkillbusError(
                    .invalidConfiguration, "\(what) uses {\(name)}, which intent '\(intent)' has no group for")
            }
            // Each reply sees one outcome: the result, or the error, never both.
            let misplaced =
                Template(reply).names.first { $0 == "error" || $0.hasPrefix("error.") }.map { "reply uses {\($0)}" }
                ?? errorReply.flatMap { Template($0).names.first { $0.hasPrefix("result") } }
                .map { "errorReply uses {\($0)}" }
            if let misplaced {
                throw SkillbusError(
                    .invalidConfiguration,
                    "the rule with intent '\(intent)': \(misplaced); reply is for a call that succeeded ({result…}), "
                        + "errorReply for one that failed ({error}, {error.code})")
            }
            self.intent = intent
            self.action = action
            self.actionTemplate = actionTemplate
            self.reply = reply
            self.replyTemplate = Template(reply)
            self.errorReply = errorReply
            self.errorReplyTemplate = errorReply.map(Template.init)
            self.example = example
        }

        /// The named groups' texts when the rule fires on `message`; nil when it does not.
        func match(_ message: String) -> [String: String]? {
            let range = NSRange(message.startIndex..., in: message)
            guard let found = expression.value.firstMatch(in: message, range: range) else { return nil }
            var texts: [String: String] = [:]
            for name in groups {
                let group = found.range(withName: name)
                if group.location != NSNotFound, let bounds = Range(group, in: message) {
                    texts[name] = String(message[bounds])
                }
            }
            return texts
        }

        static func groupNames(in pattern: String) -> Set<String> {
            Set(
                pattern.components(separatedBy: "(?<").dropFirst().compactMap { rest in
                    let name = rest.prefix { $0.isLetter || $0.isNumber || $0 == "_" }
                    return rest.dropFirst(name.count).first == ">" && !name.isEmpty ? String(name) : nil
                })
        }
    }

    /// NSRegularExpression is immutable and safe to use from any thread once made.
    private struct Expression: @unchecked Sendable {
        let value: NSRegularExpression
        init(_ value: NSRegularExpression) { self.value = value }
    }

    public var rules: [Rule] {
        didSet { lastFired = FiredRules() }
    }
    /// The rules that fired on the message matched last: a turn asks at each of its steps about the same
    /// message, and matching every expression again cost as much as the rest of the step.
    private var lastFired = FiredRules()

    public init(rules: [Rule]) { self.rules = rules }

    /// From configuration: `{"rules": [{"intent", "skill", "params", "reply", "errorReply", "example"}, …]}`
    /// (`params`, `errorReply` and `example` may be left out); in place of `skill` and `params`, `ask` (an agent
    /// or `role:NAME`) with a `message`, or `handoff` with a `note` (then `reply` may be left out). An error
    /// names the rule and the key.
    public init(json: JSONValue) throws(SkillbusError) {
        guard let list = json["rules"]?.arrayValue, json.objectValue?.count == 1 else {
            throw SkillbusError(.invalidConfiguration, "a rules planner is {\"rules\": [rule, …]}")
        }
        var rules: [Rule] = []
        for (index, item) in list.enumerated() {
            func problem(_ message: String) -> SkillbusError {
                SkillbusError(.invalidConfiguration, "rules[\(index)]: \(message)")
            }
            let known = [
                "ask", "errorReply", "example", "handoff", "intent", "message", "note", "params", "reply", "skill",
            ]
            guard let fields = item.objectValue else { throw problem("expected an object") }
            if let unknown = fields.keys.sorted().first(where: { !known.contains($0) }) {
                throw problem("unknown key '\(unknown)' (known: \(known.joined(separator: ", ")))")
            }
            let action: Action
            do throws(SkillbusError) {
                action = try Self.action(fields)
            } catch {
                throw problem(error.message)
            }
            let handsOver = if case .handoff = action { true } else { false }
            guard let intent = fields["intent"]?.stringValue,
                let reply = fields["reply"]?.stringValue ?? (handsOver ? "" : nil)
            else { throw problem("'intent' and 'reply' are strings, and required") }
            let errorReply = fields["errorReply"]
            guard errorReply == nil || errorReply?.stringValue != nil else { throw problem("'errorReply' must be a string") }
            do throws(SkillbusError) {
                rules.append(
                    try Rule(
                        intent: intent, action: action, reply: reply, errorReply: errorReply?.stringValue,
                        example: fields["example"]?.stringValue))
            } catch {
                throw problem(error.message)
            }
        }
        self.init(rules: rules)
    }

    /// A rule's action: exactly one of `skill` (with `params`), `ask` (with `message`) or `handoff` (with `note`).
    static func action(_ fields: [String: JSONValue]) throws(SkillbusError) -> Action {
        let chosen = ["skill", "ask", "handoff"].filter { fields[$0] != nil }
        guard chosen.count == 1 else {
            throw SkillbusError(.invalidConfiguration, "a rule has exactly one of 'skill', 'ask' or 'handoff'")
        }
        func target(_ key: String) throws(SkillbusError) -> AgentTarget {
            guard let text = fields[key]?.stringValue, let target = AgentTarget(text) else {
                throw SkillbusError(.invalidConfiguration, "'\(key)' must be an agent name or role:NAME")
            }
            return target
        }
        switch chosen[0] {
        case "ask":
            guard let message = fields["message"]?.stringValue else {
                throw SkillbusError(.invalidConfiguration, "a rule that asks needs a 'message' string")
            }
            return .ask(try target("ask"), message: message)
        case "handoff":
            return .handoff(try target("handoff"), note: fields["note"]?.stringValue ?? "")
        default:
            guard let skill = fields["skill"]?.stringValue else {
                throw SkillbusError(.invalidConfiguration, "'skill' must be a string")
            }
            guard let parameters = (fields["params"] ?? [:]).objectValue else {
                throw SkillbusError(.invalidConfiguration, "'params' must be an object")
            }
            return .call(skill: skill, parameters: parameters)
        }
    }

    public func next(_ input: PlannerInput) async throws -> PlannerDecision {
        let fired = lastFired.on(input.message) { message in
            rules.compactMap { rule in rule.match(message).map { (rule, $0) } }
        }
        guard !fired.isEmpty else { return .reply(capabilities) }
        // A failed call whose rule has no error reply fails the turn now: later rules' calls would be for nothing.
        for ((rule, _), step) in zip(fired, input.steps) {
            if case .failure(let error) = step.outcome, rule.errorReply == nil { throw error }
        }
        if input.steps.count < fired.count {
            let (rule, groups) = fired[input.steps.count]
            let filled = rule.actionTemplate.fill(groups)
            switch rule.action {
            case .call(let skill, _): return .call(skill: skill, parameters: filled.objectValue ?? [:])
            case .ask(let target, _): return .ask(target, message: filled.stringValue ?? "")
            case .handoff(let target, _): return .handoff(target, note: filled.stringValue ?? "")
            }
        }
        // A turn handed over may say by whom and why: {handoff.from}, {handoff.note}.
        let handedOver = input.team?.handoff.map { ["handoff.from": $0.from, "handoff.note": $0.note] } ?? [:]
        let replies = try zip(fired, input.steps).map { fired, step throws(SkillbusError) in
            try Self.reply(fired.0, fired.1.merging(handedOver) { group, _ in group }, step.outcome)
        }
        return .reply(replies.joined(separator: "\n"))
    }

    /// The answer to a message no rule understood.
    var capabilities: String {
        let examples = rules.map { rule in
            let does = switch rule.action {
                case .call(let skill, _): skill
                case .ask(let target, _): "asks \(target)"
                case .handoff(let target, _): "hands over to \(target)"
                }
            return rule.example.map { "\"\($0)\" (\(does))" } ?? does
        }
        guard !examples.isEmpty else { return "I did not understand that, and I know no intents." }
        return "I did not understand that. I can answer: " + examples.joined(separator: ", ") + "."
    }

    /// The rule's reply to how its call ended: its reply with the result, or its error reply with the
    /// error. A failure with no error reply throws the call's error, which fails the turn.
    static func reply(
        _ rule: Rule, _ groups: [String: String], _ outcome: Result<SkillResult, SkillbusError>
    ) throws(SkillbusError) -> String {
        switch outcome {
        case .success(let result):
            return rule.replyTemplate.fill { name in
                if let group = groups[name] { return group }
                if name == "result" { return result.humanReadable }
                guard name.hasPrefix("result."), case .json(let value) = result else { return nil }
                let field = name.dropFirst("result.".count).split(separator: ".").reduce(value as JSONValue?) {
                    $0?[String($1)]
                }
                return field.map { $0.stringValue ?? $0.jsonString }
            }
        case .failure(let error):
            guard let template = rule.errorReplyTemplate else { throw error }
            return template.fill { name in
                switch name {
                case "error": error.message
                case "error.code": error.code.rawValue
                default: groups[name]
                }
            }
        }
    }
}

/// The rules that fired on one message, with their groups' texts; any turn may ask, from any thread.
private final class FiredRules: Sendable {
    typealias Fired = [(rule: RulesPlanner.Rule, groups: [String: String])]
    private let last = Mutex<(message: String, fired: Fired)?>(nil)

    /// The rules that fire on `message`: as found last time when it was the same message, else `match`'s.
    func on(_ message: String, match: (String) -> Fired) -> Fired {
        if let last = last.withLock({ $0 }), last.message == message { return last.fired }
        let fired = match(message)
        last.withLock { $0 = (message, fired) }
        return fired
    }
}

/// A text with `{name}` placeholders, split into its parts once.
struct Template: Sendable {
    private let parts: [Part]

    init(_ text: String) { parts = Self.parts(of: text) }

    var names: [String] { parts.compactMap { if case .placeholder(let name) = $0 { name } else { nil } } }

    /// The text with each placeholder replaced by its value; one without a value stays as written.
    func fill(_ value: (String) -> String?) -> String {
        var filled = ""
        for part in parts {
            switch part {
            case .text(let text): filled += text
            case .placeholder(let name): filled += value(name) ?? "{\(name)}"
            }
        }
        return filled
    }

    private enum Part: Sendable { case text(String), placeholder(String) }

    private static func parts(of text: String) -> [Part] {
        var parts: [Part] = []
        var rest = Substring(text)
        while let open = rest.firstIndex(of: "{"), let close = rest[open...].firstIndex(of: "}") {
            parts.append(.text(String(rest[..<open])))
            let name = rest[rest.index(after: open)..<close]
            parts.append(name.isEmpty || name.contains(Character("{")) ? .text(String(rest[open...close])) : .placeholder(String(name)))
            rest = rest[rest.index(after: close)...]
        }
        parts.append(.text(String(rest)))
        return parts
    }
}

/// A JSON value whose strings are templates, split once: a rule's parameters (or message, or note), filled
/// on every turn the rule fires in.
indirect enum TemplateValue: Sendable {
    case text(Template)
    case array([TemplateValue])
    case object([String: TemplateValue])
    case literal(JSONValue)

    init(_ value: JSONValue) {
        switch value {
        case .string(let text): self = .text(Template(text))
        case .array(let items): self = .array(items.map(TemplateValue.init))
        case .object(let fields): self = .object(fields.mapValues(TemplateValue.init))
        default: self = .literal(value)
        }
    }

    var names: [String] {
        switch self {
        case .text(let template): template.names
        case .array(let items): items.flatMap(\.names)
        case .object(let fields): fields.values.flatMap(\.names)
        case .literal: []
        }
    }

    func fill(_ groups: [String: String]) -> JSONValue {
        switch self {
        case .text(let template): .string(template.fill { groups[$0] })
        case .array(let items): .array(items.map { $0.fill(groups) })
        case .object(let fields): .object(fields.mapValues { $0.fill(groups) })
        case .literal(let value): value
        }
    }
}
