/// What a ROUND asks for: one invocation, one skill on several agents, a plan of steps, or agents' turns (a
/// team round: one agent asked, or several asked the same message). Parsed and checked before anything
/// runs, so a bad plan executes nothing.
public enum RoundSpec: Sendable, Equatable {
    case invoke(skill: String, parameters: JSONValue)
    /// `agents` nil: every live provider.
    case fanout(skill: String, parameters: JSONValue, agents: [String]?, aggregate: Aggregation)
    /// Steps that run skills or ask agents (`PlanStep.ask`).
    case plan(steps: [PlanStep], continueOnFailure: Bool)
    /// One agent or role asked a message: a turn of the round.
    case ask(AskStep)
    /// Several agents asked the same message, their replies aggregated (`majority` compares them trimmed and
    /// lower-cased).
    case asks(AgentGroup, message: String, aggregate: Aggregation)

    public enum Aggregation: String, Sendable, CaseIterable {
        /// Every agent's result, in agent order.
        case all
        /// The first success wins; the others are cancelled.
        case first
        /// The result most agents returned (compared as canonical JSON), with its votes.
        case majority
    }

    /// The one skill an invoke or fan-out runs; nil for a plan.
    public var skill: String? {
        switch self {
        case .invoke(let skill, _), .fanout(let skill, _, _, _): skill
        case .plan, .ask, .asks: nil
        }
    }

    /// Every skill the round names (a plan's steps may name one more than once); not those its agents call.
    public var skills: [String] {
        switch self {
        case .invoke(let skill, _), .fanout(let skill, _, _, _): [skill]
        case .plan(let steps, _): steps.filter { $0.ask == nil }.map(\.skill)
        case .ask, .asks: []
        }
    }

    public var shape: String {
        switch self {
        case .invoke: "invoke"
        case .fanout: "fanout"
        case .plan: "plan"
        case .ask: "ask"
        case .asks: "asks"
        }
    }

    /// The ROUND body: `{"invoke": {"skill", "params"}}`, `{"fanout": {"skill", "params", "agents", "aggregate"}}`,
    /// `{"plan": {"steps": [...], "onFailure": "stop" | "continue"}}`, `{"ask": {"agent" | "role", "message"}}`
    /// or `{"asks": {"agents" | "role", "message", "aggregate"}}`.
    public var json: JSONValue {
        switch self {
        case .invoke(let skill, let parameters):
            return ["invoke": ["skill": .string(skill), "params": parameters]]
        case .fanout(let skill, let parameters, let agents, let aggregate):
            return [
                "fanout": [
                    "skill": .string(skill), "params": parameters,
                    "agents": agents.map { .array($0.map { .string($0) }) } ?? "all",
                    "aggregate": .string(aggregate.rawValue),
                ]
            ]
        case .plan(let steps, let continueOnFailure):
            return ["plan": ["steps": .array(steps.map(\.json)), "onFailure": continueOnFailure ? "continue" : "stop"]]
        case .ask(let ask):
            return ["ask": ask.json]
        case .asks(let group, let message, let aggregate):
            return Self.asksJSON(group, message, aggregate)
        }
    }

    /// Parses a ROUND body; every problem is an `invalid_round` error naming what is wrong.
    public init(json: JSONValue, stepLimit: Int) throws(SkillbusError) {
        guard let object = json.objectValue, object.count == 1, let (shape, body) = object.first else {
            throw Self.invalid(
                "a round body is one of {\"invoke\": …}, {\"fanout\": …}, {\"plan\": …}, {\"ask\": …} or {\"asks\": …}")
        }
        guard body.objectValue != nil else { throw Self.invalid("the value of '\(shape)' must be an object") }
        func parameters(_ value: JSONValue?, _ what: String) throws(SkillbusError) -> JSONValue {
            guard let value else { return [:] }
            guard value.objectValue != nil else { throw Self.invalid("\(what): 'params' must be an object") }
            return value
        }
        func skill(_ value: JSONValue?, _ what: String) throws(SkillbusError) -> String {
            guard let name = value?.stringValue, SkillDescriptor.isValidIdentifier(name) else {
                throw Self.invalid("\(what): 'skill' must be a skill identifier")
            }
            return name
        }
        switch shape {
        case "invoke":
            self = .invoke(
                skill: try skill(body["skill"], "invoke"), parameters: try parameters(body["params"], "invoke"))
        case "fanout":
            var agents: [String]?
            switch body["agents"] {
            case nil, .string("all"): agents = nil
            case .array(let list):
                let names = list.compactMap(\.stringValue)
                guard names.count == list.count, !names.isEmpty, Set(names).count == names.count else {
                    throw Self.invalid("fanout: 'agents' must be \"all\" or a non-empty list of distinct agent names")
                }
                agents = names
            default:
                throw Self.invalid("fanout: 'agents' must be \"all\" or a list of agent names")
            }
            let mode = body["aggregate"]?.stringValue ?? "all"
            guard let aggregate = Aggregation(rawValue: mode) else {
                throw Self.invalid("fanout: 'aggregate' must be all, first or majority, got '\(mode)'")
            }
            self = .fanout(
                skill: try skill(body["skill"], "fanout"), parameters: try parameters(body["params"], "fanout"),
                agents: agents, aggregate: aggregate)
        case "plan":
            guard let list = body["steps"]?.arrayValue, !list.isEmpty else {
                throw Self.invalid("plan: 'steps' must be a non-empty array")
            }
            guard list.count <= stepLimit else {
                throw Self.invalid("plan: \(list.count) steps is more than the limit of \(stepLimit)")
            }
            // Every problem of every step at once, not one per attempt.
            var steps: [PlanStep] = []
            var problems: [String] = []
            for (index, item) in list.enumerated() {
                guard let id = item["id"]?.stringValue, !id.isEmpty else {
                    problems.append("plan: step \(index + 1) has no string 'id'")
                    continue
                }
                let what = "plan step '\(id)'"
                var after: [String] = []
                if let value = item["after"] {
                    if let names = value.arrayValue?.compactMap(\.stringValue), names.count == value.arrayValue?.count {
                        after = names
                    } else {
                        problems.append("\(what): 'after' must be a list of step ids")
                    }
                }
                do throws(SkillbusError) {
                    switch (item["skill"], item["ask"]) {
                    case (_, nil):
                        steps.append(
                            PlanStep(
                                id: id, skill: try skill(item["skill"], what),
                                parameters: try parameters(item["params"], what), after: after))
                    case (nil, let ask?):
                        steps.append(PlanStep(id: id, ask: try AskStep(json: ask, what), after: after))
                    case (_?, _?):
                        throw Self.invalid("\(what): a step has a 'skill' or an 'ask', not both")
                    }
                } catch {
                    problems.append(error.message)
                }
            }
            let failure = body["onFailure"]?.stringValue ?? "stop"
            if failure != "stop" && failure != "continue" {
                problems.append("plan: 'onFailure' must be stop or continue, got '\(failure)'")
            }
            if problems.isEmpty { problems = Self.graphProblems(steps) }
            guard problems.isEmpty else {
                throw problems.count == 1
                    ? Self.invalid(problems[0])
                    : SkillbusError(
                        .invalidRound, "the plan has \(problems.count) problems: " + problems.joined(separator: "; "),
                        details: .array(problems.map { .string($0) }))
            }
            self = .plan(steps: steps, continueOnFailure: failure == "continue")
        case "ask":
            self = try Self.parseAsk(body)
        case "asks":
            self = try Self.parseAsks(body)
        default:
            throw Self.invalid("unknown round shape '\(shape)' (expected invoke, fanout, plan, ask or asks)")
        }
    }

    static func invalid(_ message: String) -> SkillbusError { SkillbusError(.invalidRound, message) }

    /// Duplicate ids, dependencies and references to steps that do not exist, and cycles: every one found.
    static func graphProblems(_ steps: [PlanStep]) -> [String] {
        var problems: [String] = []
        var ids = Set<String>(minimumCapacity: steps.count)
        for step in steps where !ids.insert(step.id).inserted {
            problems.append("plan: step id '\(step.id)' is used twice")
        }
        // Each step's references read once: walking the parameters is most of what a plan's check costs.
        var dependencies: [[String]] = []
        dependencies.reserveCapacity(steps.count)
        for step in steps {
            for dependency in step.after where !ids.contains(dependency) {
                problems.append("plan step '\(step.id)': 'after' names '\(dependency)', which is no step of this plan")
            }
            let references = step.references
            for reference in references where !ids.contains(reference.step) {
                problems.append(
                    "plan step '\(step.id)': reference '\(reference.text)' names step '\(reference.step)', which is no "
                        + "step of this plan")
            }
            let stepDependencies = PlanStep.dependencies(after: step.after, references: references)
            if stepDependencies.contains(step.id) { problems.append("plan step '\(step.id)' depends on itself") }
            dependencies.append(stepDependencies)
        }
        // Without dependencies there is no cycle to look for.
        guard problems.isEmpty, dependencies.contains(where: { !$0.isEmpty }) else { return problems }
        // Kahn's algorithm: whatever never becomes ready sits on a cycle.
        var remaining = Dictionary(
            uniqueKeysWithValues: zip(steps, dependencies).map { step, dependencies in (step.id, Set(dependencies)) })
        var progress = true
        while progress && !remaining.isEmpty {
            progress = false
            for (id, dependencies) in remaining where dependencies.allSatisfy({ remaining[$0] == nil }) {
                remaining[id] = nil
                progress = true
            }
        }
        if !remaining.isEmpty {
            problems.append("plan: steps \(remaining.keys.sorted().joined(separator: ", ")) form a cycle or depend on one")
        }
        return problems
    }
}

/// One step of a plan: a skill to run, or an agent to ask (then `skill` is empty and `ask` set).
public struct PlanStep: Sendable, Equatable {
    public var id: String
    public var skill: String
    /// May hold references to earlier results: `{"$ref": "STEP.result.PATH"}` (see `Reference`).
    public var parameters: JSONValue
    /// An ask step: whom it asks, and the message (which may refer to earlier results too).
    public var ask: AskStep?
    public var after: [String]

    public init(id: String, skill: String, parameters: JSONValue = [:], after: [String] = []) {
        self.id = id
        self.skill = skill
        self.parameters = parameters
        self.after = after
    }

    public init(id: String, ask: AskStep, after: [String] = []) {
        self.init(id: id, skill: "", after: after)
        self.ask = ask
    }

    public var json: JSONValue {
        if let ask { return ["id": .string(id), "ask": ask.json, "after": .array(after.map { .string($0) })] }
        return [
            "id": .string(id), "skill": .string(skill), "params": parameters, "after": .array(after.map { .string($0) }),
        ]
    }

    /// Every `{"$ref": …}` in the parameters, or in an ask's message.
    var references: [Reference] {
        var found: [Reference] = []
        func walk(_ value: JSONValue) {
            if let reference = Reference(value) { return found.append(reference) }
            if let object = value.objectValue { for item in object.values { walk(item) } }
            if let array = value.arrayValue { for item in array { walk(item) } }
        }
        walk(parameters)
        return found + (ask?.message.references ?? [])
    }

    /// `after` plus the steps its references read.
    var dependencies: [String] { Self.dependencies(after: after, references: references) }

    static func dependencies(after: [String], references: [Reference]) -> [String] {
        if references.isEmpty && after.count < 2 { return after }
        return Array(Set(after + references.map(\.step)))
    }
}

extension RoundSpec {
    /// The retries a body asks for (PROTOCOL §3.5.1): `retries` in its shape's object, from 0 to
    /// `RetryPolicy.maxRetries`; nil when absent. Like the timeout, not part of the body a round is compared by.
    static func retries(in body: JSONValue) throws(SkillbusError) -> Int? {
        guard let shape = body.objectValue?.values.first, let value = shape["retries"], value != .null else { return nil }
        guard let retries = value.intValue, (0...RetryPolicy.maxRetries).contains(retries) else {
            throw SkillbusError(.invalidRound, "'retries' must be an integer from 0 to \(RetryPolicy.maxRetries)")
        }
        return retries
    }

    /// The priority a body asks for (PROTOCOL §3.5.1): `priority` in its shape's object, `high`, `normal` or
    /// `low`; normal when absent. Not part of the body a round is compared by.
    static func priority(in body: JSONValue) throws(SkillbusError) -> InvocationPriority {
        guard let shape = body.objectValue?.values.first, let value = shape["priority"], value != .null else {
            return .normal
        }
        guard let name = value.stringValue, let priority = InvocationPriority(name: name) else {
            throw SkillbusError(.invalidRound, "'priority' must be high, normal or low")
        }
        return priority
    }

    /// Whether a body bypasses the result cache (PROTOCOL §3.5.1): `noCache` true; false when absent.
    static func noCache(in body: JSONValue) throws(SkillbusError) -> Bool {
        guard let shape = body.objectValue?.values.first, let value = shape["noCache"], value != .null else {
            return false
        }
        guard let flag = value.boolValue else { throw SkillbusError(.invalidRound, "'noCache' must be true or false") }
        return flag
    }

    /// The canonical body (`json.serialized()`) and, for an invoke or a fan-out, its parameters as they are sent:
    /// invokes, fan-outs and plans are written without building their tree, and parameters serialized once.
    var canonicalForm: (body: [UInt8], parameterBytes: [UInt8]?) {
        switch self {
        case .fanout(let skill, let parameters, let agents, let aggregate):
            let serialized = parameters.serialized()
            return (
                Self.canonicalFanout(skill, serialized, agents, aggregate),
                parameters.containsReference ? nil : serialized
            )
        case .plan(let steps, let continueOnFailure):
            return (Self.canonicalPlan(steps, continueOnFailure: continueOnFailure), nil)
        case .ask, .asks:
            return (json.serialized(), nil)
        case .invoke(let skill, let parameters):
            let serialized = parameters.serialized()
            var body = Array(#"{"invoke":{"params":"#.utf8)
            body.reserveCapacity(body.count + serialized.count + skill.utf8.count + 16)
            body += serialized
            body += #","skill":"#.utf8
            JSONValue.writeString(skill, to: &body)
            body += "}}".utf8
            // A reference is resolved when the invocation starts (and fails there, naming it).
            return (body, parameters.containsReference ? nil : serialized)
        }
    }

    /// `{"fanout":{"agents":…,"aggregate":…,"params":…,"skill":…}}`, keys in `json.serialized()`'s order.
    private static func canonicalFanout(
        _ skill: String, _ parameters: [UInt8], _ agents: [String]?, _ aggregate: Aggregation
    ) -> [UInt8] {
        var body = Array(#"{"fanout":{"agents":"#.utf8)
        if let agents { JSONValue.array(agents.map { .string($0) }).write(to: &body) } else { body += #""all""#.utf8 }
        body += #","aggregate":"#.utf8
        JSONValue.writeString(aggregate.rawValue, to: &body)
        body += #","params":"#.utf8
        body += parameters
        body += #","skill":"#.utf8
        JSONValue.writeString(skill, to: &body)
        body += "}}".utf8
        return body
    }

    /// `{"plan":{"onFailure":…,"steps":[…]}}` with each skill step's members written in key order: building and
    /// sorting the tree of a plan cost more than checking it.
    private static func canonicalPlan(_ steps: [PlanStep], continueOnFailure: Bool) -> [UInt8] {
        var body = Array(#"{"plan":{"onFailure":"#.utf8)
        body += (continueOnFailure ? #""continue""# : #""stop""#).utf8
        body += #","steps":["#.utf8
        for (index, step) in steps.enumerated() {
            if index > 0 { body.append(UInt8(ascii: ",")) }
            guard step.ask == nil else {
                step.json.write(to: &body)
                continue
            }
            body += #"{"after":"#.utf8
            JSONValue.array(step.after.map { .string($0) }).write(to: &body)
            body += #","id":"#.utf8
            JSONValue.writeString(step.id, to: &body)
            body += #","params":"#.utf8
            step.parameters.write(to: &body)
            body += #","skill":"#.utf8
            JSONValue.writeString(step.skill, to: &body)
            body.append(UInt8(ascii: "}"))
        }
        body += "]}}".utf8
        return body
    }

    /// The body to send, with `retries` when the client asks for a number of its own, `priority` when not
    /// normal, and `noCache` when set.
    public func body(retries: Int?, priority: InvocationPriority = .normal, noCache: Bool = false) -> JSONValue {
        guard retries != nil || priority != .normal || noCache, case .object(var object) = json,
            let (shape, value) = object.first, var fields = value.objectValue
        else { return json }
        if let retries { fields["retries"] = .number(Double(retries)) }
        if priority != .normal { fields["priority"] = .string(priority.name) }
        if noCache { fields["noCache"] = true }
        object[shape] = .object(fields)
        return .object(object)
    }
}
