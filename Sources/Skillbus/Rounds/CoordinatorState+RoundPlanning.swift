/// What a round will run, checked against the registry before anything starts (PROTOCOL §3.5.2).
extension CoordinatorState {
    /// The invocations a round will make, checked against the registry: nothing runs if one is impossible.
    func plannedInvocations(_ spec: RoundSpec) throws(SkillbusError) -> [RoundInvocation] {
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
            parameters.containsReference ? nil : parameters.serialized()
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
            let names = agents ?? workers.providers(of: skill).compactMap { workers[$0]?.name }.sorted()
            for name in names {
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
            return steps.map {
                RoundInvocation(
                    id: $0.id, skill: $0.skill, target: nil, parameters: $0.parameters, after: $0.dependencies)
            }
        }
    }

    /// Every step's skill is offered, and its literal parameters fit the skill's schema (a reference to an
    /// earlier step's result is checked when it is resolved). One problem keeps its own error; several are
    /// one error that lists them all: `unknown_skill` when each is a skill nobody offers (so that the startup
    /// grace waits for them), else `invalid_round`.
    func checkSteps(_ steps: [PlanStep]) throws(SkillbusError) {
        var problems: [SkillbusError] = []
        for step in steps {
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
        guard problems.count > 1 else {
            if let only = problems.first { throw only }
            return
        }
        throw SkillbusError(
            problems.allSatisfy { $0.code == .unknownSkill } ? .unknownSkill : .invalidRound,
            "the plan has \(problems.count) problems: " + problems.map(\.message).joined(separator: "; "),
            details: .array(problems.map(\.json)))
    }
}
