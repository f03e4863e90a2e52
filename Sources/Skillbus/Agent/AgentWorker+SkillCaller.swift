extension AgentWorker: SkillCaller {
    /// A skill's sub-call. Inside a round it goes through the coordinator as a REQUEST (same round, same
    /// session, the caller's remaining time), even for a skill this agent offers: so the round's
    /// single-flight decides whether it runs, and the round's document lists it. Only a sub-call with no
    /// round runs here when this agent offers the skill: nothing could share it or list it.
    public func call(
        _ identifier: String, parameters: JSONValue, from context: SkillExecutionContext
    ) async throws -> SkillResult {
        if context.roundID.isEmpty, let skill = state.withLock({ $0.skills[identifier] }) {
            let validated = try InvocationRunner.validate(parameters, for: skill)
            return try await InvocationRunner.run(
                skill, parameters: validated, context: context.child(invoking: identifier))
        }
        if let replica = state.withLock({ $0.replica }), replica.isSynced, replica.registry.skills[identifier] == nil {
            let offered = replica.registry.skills.keys.sorted().joined(separator: ", ")
            throw SkillbusError(
                .unknownSkill, "no agent offers skill '\(identifier)' (the registry holds: \(offered))",
                details: ["skill": .string(identifier)])
        }
        let remaining = context.deadline - .now
        guard remaining > .milliseconds(1) else {
            throw SkillbusError(.timeout, "no time left to call '\(identifier)' before the deadline")
        }
        giveBackRound(context.roundID)
        let outcome = try await client.invoke(
            identifier, parameters: parameters, roundID: context.roundID, sessionID: context.sessionID,
            timeout: remaining)
        if outcome.status == .ok, let result = outcome.result { return result }
        throw outcome.error ?? SkillbusError(.internalError, "'\(identifier)' failed without an error")
    }
}
