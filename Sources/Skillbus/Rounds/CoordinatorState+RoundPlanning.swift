/// What a round will run, checked against the registry before anything starts (PROTOCOL §3.5.2).
extension CoordinatorState {
    /// The invocations a round will make, checked against the registry: nothing runs if one is impossible.
    /// Mutating only because finding who would take an ask moves the rotation among equally loaded agents.
    /// `parameterBytes`: the parameters as the body holds them, when it is canonical (CanonicalRoundBody).
    mutating func plannedInvocations(
        _ spec: RoundSpec, parameterBytes: SentParameters? = nil
    ) throws(SkillbusError) -> [RoundInvocation] {
        func offered(_ skill: String) throws(SkillbusError) {
            guard workers.offers(skill) else {
                let list = workers.offeredSkills.joined(separator: ", ")
                throw SkillbusError(
                    .unknownSkill, "no agent offers skill '\(skill)'; offered: \(list.isEmpty ? "none" : list)",
                    details: ["skill": .string(skill)])
            }
        }
        // Without references the parameters are the same bytes whenever an invocation starts.
        func serialized(_ parameters: JSONValue) -> [UInt8]? {
            if case .shared(let bytes)? = parameterBytes { return bytes }
            return parameters.containsReference ? nil : parameters.serialized()
        }
        switch spec {
        case .invoke(let skill, let parameters):
            try offered(skill)
            return [
                RoundInvocation(
                    id: skill, skill: skill, target: nil, parameters: parameters,
                    serializedParameters: serialized(parameters), after: [])
            ]
        case .fanout(let skill, let parameters, let agents, _):
            try offered(skill)
            // The providers of a skill are registered workers that offer it: only names the body gives are checked.
            let names = agents ?? workers.providers(of: skill).compactMap { workers[$0]?.name }.sorted()
            for name in agents ?? [] {
                guard let peer = workers.peer(named: name), workers[peer]?.skills[skill] != nil else {
                    throw SkillbusError(
                        .unknownSkill, "agent '\(name)' is not registered or does not offer '\(skill)'",
                        details: ["agent": .string(name), "skill": .string(skill)])
                }
            }
            let bytes = serialized(parameters)
            return names.map {
                RoundInvocation(
                    id: $0, skill: skill, target: $0, parameters: parameters, serializedParameters: bytes, after: [])
            }
        case .plan(let steps, _):
            try checkSteps(steps)
            let sent: [[UInt8]]? = if case .steps(let list)? = parameterBytes { list } else { nil }
            return steps.indices.map { index in
                let step = steps[index]
                // One walk of the parameters for both: a step without references sends the same bytes whenever
                // it starts.
                let references = step.references
                let constant = step.ask == nil && references.isEmpty
                return RoundInvocation(
                    id: step.id, skill: step.skill, target: nil, parameters: step.parameters,
                    serializedParameters: constant ? sent?[index] ?? step.parameters.serialized() : nil,
                    after: PlanStep.dependencies(after: step.after, references: references), ask: step.ask)
            }
        case .ask(let ask):
            if let problem = askProblem(ask.target) { throw problem }
            return [RoundInvocation(id: ask.target.text, skill: "", target: nil, parameters: [:], after: [], ask: ask)]
        case .asks(let group, let message, _):
            return try askedAgents(group).map {
                RoundInvocation(
                    id: $0, skill: "", target: nil, parameters: [:], after: [],
                    ask: AskStep(target: .agent($0), message: MessageText(message)))
            }
        }
    }

    /// Every step's skill is offered, and its literal parameters fit the skill's schema (a reference to an
    /// earlier step's result is checked when it is resolved). One problem keeps its own error; several are
    /// one error that lists them all: `unknown_skill` when each is a skill nobody offers (so that the startup
    /// grace waits for them), else `invalid_round`.
    mutating func checkSteps(_ steps: [PlanStep]) throws(SkillbusError) {
        var problems: [SkillbusError] = []
        for step in steps {
            if let ask = step.ask {
                if let problem = askProblem(ask.target) {
                    var details = problem.details?.objectValue ?? [:]
                    details["step"] = .string(step.id)
                    problems.append(
                        SkillbusError(problem.code, "plan step '\(step.id)': \(problem.message)", details: .object(details)))
                }
                continue
            }
            guard let descriptor = ledger.registry.skills[step.skill]?.descriptor, workers.offers(step.skill) else {
                let list = workers.offeredSkills.joined(separator: ", ")
                problems.append(
                    SkillbusError(
                        .unknownSkill,
                        "plan step '\(step.id)': no agent offers skill '\(step.skill)'; offered: \(list.isEmpty ? "none" : list)",
                        details: ["skill": .string(step.skill), "step": .string(step.id)]))
                continue
            }
            let found = descriptor.parameters.check(step.parameters.objectValue ?? [:]) { Reference($0) != nil }.problems
            if !found.isEmpty {
                problems.append(
                    SkillbusError(
                        .invalidParameters,
                        "plan step '\(step.id)': invalid parameters for '\(step.skill)': " + found.joined(separator: "; "),
                        details: ["step": .string(step.id), "problems": .array(found.map { .string($0) })]))
            }
        }
        try Self.throwAll(problems, in: "the plan")
    }

    /// One problem keeps its own error; several are one error that lists them all: `unknown_skill` when each is
    /// a skill nobody offers (so that the startup grace waits for them), `unknown_agent` when each is an agent
    /// or role nobody plays, else `invalid_round`.
    static func throwAll(_ problems: [SkillbusError], in what: String) throws(SkillbusError) {
        guard problems.count > 1 else {
            if let only = problems.first { throw only }
            return
        }
        let code = problems[0].code
        let kept = (code == .unknownSkill || code == .unknownAgent) && problems.allSatisfy { $0.code == code }
        throw SkillbusError(
            kept ? code : .invalidRound,
            "\(what) has \(problems.count) problems: " + problems.map(\.message).joined(separator: "; "),
            details: .array(problems.map(\.json)))
    }
}
