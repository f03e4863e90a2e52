import Foundation

/// A turn's step that asks another agent (PROTOCOL §3.7.1): a nested turn in the same round and session, asked
/// through the bus with this turn as its parent; the reply is the step's text result.
extension AgentWorker {
    func delegate(
        _ message: String, to target: AgentTarget, in turn: TurnRequest, deadline: ContinuousClock.Instant
    ) async -> TurnCall {
        // The nested turn's calls go through the bus as the round's: the round goes back first.
        giveBackRound(turn.roundID)
        let started = ContinuousClock.now
        func ended(_ outcome: Result<SkillResult, SkillbusError>, agent: String, nested: JSONValue?) -> TurnCall {
            TurnCall(
                skill: "", parameters: ["message": .string(message)], agent: agent,
                durationMs: (ContinuousClock.now - started) / .milliseconds(1), outcome: outcome, asked: target,
                nestedTurn: nested)
        }
        do {
            let answer = try await askOnWorkerConnection(
                AskRequest(
                    requestID: client.makeRequestID(), roundID: turn.roundID, sessionID: turn.sessionID,
                    agent: target.text, timeoutMs: max(1, Int((deadline - .now) / .milliseconds(1))), message: message,
                    parentTurnID: turn.turnID))
            let reply = answer.document["reply"]?.stringValue ?? ""
            return ended(.success(.text(reply)), agent: answer.agent, nested: answer.document)
        } catch {
            // A turn that failed on its agent carries its document as the details; a handoff the bus refused, the
            // handing turn's as `turn`; a turn the bus refused before it ran, none.
            let details = error.details
            let nested = details?["states"] != nil ? details : details?["turn"]?.objectValue.map(JSONValue.object)
            return ended(.failure(error), agent: nested?["agent"]?.stringValue ?? "", nested: nested)
        }
    }

    /// What a planner is shown of the registry replica: its skills, and the other live agents with a planner.
    /// Made once per change of the replica, not on every step of every turn (sorting the agents and copying
    /// the descriptors cost 3% of a one-call turn's CPU).
    func plannerView() -> PlannerView {
        guard let replica = state.withLock({ $0.replica }) else { return PlannerView() }
        let (registry, epoch, sequence) = replica.versionedRegistry
        let source = ObjectIdentifier(replica)
        if let view = state.withLock({ $0.plannerView }), view.source == source, view.epoch == epoch,
            view.sequence == sequence
        {
            return view
        }
        let agents = registry.sortedAgents.filter { $0.profile.planner && $0.name != options.name }.map {
            TeamMember(name: $0.name, role: $0.profile.role, description: $0.profile.description)
        }
        let view = PlannerView(
            source: source, epoch: epoch, sequence: sequence, skills: registry.skills.values.map(\.descriptor),
            agents: agents)
        state.withLock { $0.plannerView = view }
        return view
    }
}

/// The registry as an agent's planner sees it: the replica it was made from, at which epoch and sequence.
struct PlannerView {
    var source: ObjectIdentifier?
    var epoch: String?
    var sequence: UInt64 = 0
    var skills: [SkillDescriptor] = []
    var agents: [TeamMember] = []
}
