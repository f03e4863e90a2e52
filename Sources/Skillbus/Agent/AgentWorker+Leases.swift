import Foundation

/// A turn that holds its round (TURN's lease, PROTOCOL §3.7) runs a call of a skill this agent offers
/// right here, with no pass through the bus, and reports it with CALLED as it ends. Before anything of
/// the round goes through the bus (a call of a skill offered elsewhere, or a skill's sub-call), RELEASE
/// gives the round back, after a CLAIM for each call still running here: so the bus decides on the
/// round's other invocations knowing every call the turn made.
extension AgentWorker {
    /// The outcome of the call run here, or nil when it must go through the bus: the round is not held
    /// (any more), this agent does not offer the skill, or the skill needs the user's confirmation (which
    /// the bus asks for). `body`: the parameters as they are sent. `ranHere` holds the outcomes of the turn's
    /// calls run here so far: an identical call gets its outcome again and does not run twice, as the bus's
    /// single-flight would do.
    func runHere(
        _ skill: String, body: [UInt8], in turn: TurnRequest, deadline: ContinuousClock.Instant,
        ranHere: inout [[UInt8]: Result<SkillResult, SkillbusError>]
    ) async -> Result<SkillResult, SkillbusError>? {
        let key = Array(skill.utf8) + [0] + body
        if let earlier = ranHere[key], state.withLock({ $0.leases[turn.roundID] == turn.turnID }) { return earlier }
        let claim = state.withLock { state -> (skill: any AgentSkill, id: String)? in
            guard state.leases[turn.roundID] == turn.turnID, let found = state.skills[skill],
                !found.descriptor.needsConfirmation
            else { return nil }
            state.lastClaim += 1
            let id = "c" + String(state.lastClaim)
            state.runningHere[turn.roundID, default: [:]][id] = (skill, body)
            return (found, id)
        }
        guard let claim else { return nil }
        let outcome = await runLocally(claim.skill, id: claim.id, parameters: body, in: turn, deadline: deadline)
        // Under the lock, as giveBackRound sends its CLAIMs: CALLED goes either before them or after this
        // call's CLAIM, never in between.
        state.withLock { state in
            state.runningHere[turn.roundID]?[claim.id] = nil
            if state.runningHere[turn.roundID]?.isEmpty == true { state.runningHere[turn.roundID] = nil }
            socket.send(
                WorkerMessage.called(
                    turnID: turn.turnID, claimID: claim.id, skill: skill, parameters: body, status: outcome.status,
                    payload: outcome.payload
                ).encoded())
        }
        let result = Self.decode(outcome, of: skill)
        ranHere[key] = result
        return result
    }

    /// Runs a call of the turn on this agent, as an invocation the bus sent would run.
    func runLocally(
        _ skill: any AgentSkill, id: String, parameters: [UInt8], in turn: TurnRequest,
        deadline: ContinuousClock.Instant
    ) async -> InvocationRunner.Outcome {
        let invocation = Invocation(
            invocationID: id, frames: Array(turn.roundID.utf8), Array(turn.sessionID.utf8), skill: skill.identifier,
            deadlineMs: max(1, Int((deadline - .now) / .milliseconds(1))), parameters: parameters)
        if skill.executionStyle == .quick { return await runner.run(invocation) }
        // Off this thread, as the bus's invocations of such a skill run; the turn's cancel reaches it.
        let running = Task { await self.runner.run(invocation) }
        return await withTaskCancellationHandler {
            await running.value
        } onCancel: {
            running.cancel()
        }
    }

    static func decode(_ outcome: InvocationRunner.Outcome, of skill: String) -> Result<SkillResult, SkillbusError> {
        do throws(SkillbusError) {
            let json: JSONValue
            do {
                json = try JSONValue(parsing: outcome.payload)
            } catch {
                throw SkillbusError(.malformedResult, "'\(skill)' answered something that is not JSON")
            }
            guard outcome.status == .ok else { return .failure(SkillbusError(json: json)) }
            return .success(try SkillResult(json: json))
        } catch {
            return .failure(error)
        }
    }

    /// How long a turn keeps its round while it waits for something (its planner, a store, a skill that takes a
    /// while): a turn that runs within a few passes of the loop keeps it to its end; a longer one holds the round's
    /// other calls (another agent's, in a team round) up for this long at most.
    static let leaseKeptWhileWaiting: Duration = .milliseconds(1)

    /// Runs on the I/O thread before it waits: gives back the rounds of turns that have held theirs for
    /// `leaseKeptWhileWaiting` and not ended; returns how long until the next one is due.
    func releaseWaitingTurnsRounds() -> Duration? {
        let now = ContinuousClock.now
        var next: Duration?
        let due = state.withLock { state -> [String] in
            guard !state.leases.isEmpty else { return [] }
            var due: [String] = []
            for (round, turnID) in state.leases where state.turns[turnID] != nil {
                let left = (state.leasedSince[turnID] ?? now) + Self.leaseKeptWhileWaiting - now
                if left <= .zero { due.append(round) } else { next = min(next ?? left, left) }
            }
            return due
        }
        for round in due { giveBackRound(round) }
        return next
    }

    /// Gives the round back to the bus if a turn of this agent holds it; anything of the round may then
    /// go through the bus.
    func giveBackRound(_ roundID: String) {
        guard !roundID.isEmpty else { return }
        // Sent under the lock: RELEASE leaves before anything the caller sends after it.
        state.withLock { state in
            guard let turnID = state.leases.removeValue(forKey: roundID) else { return }
            sendTurnReports(&state)
            for (claimID, call) in state.runningHere[roundID] ?? [:] {
                socket.send(
                    WorkerMessage.claim(turnID: turnID, claimID: claimID, skill: call.skill, parameters: call.parameters)
                        .encoded())
            }
            socket.send(WorkerMessage.release(turnID: turnID).encoded())
        }
    }
}
