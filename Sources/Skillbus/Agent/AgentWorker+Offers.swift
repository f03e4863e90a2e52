/// A turn that does not hold its round (a turn of a team round, or one that gave its round back) offers the
/// bus to run a call here when this agent offers the skill (OFFER, PROTOCOL §3.7.3): the bus answers whether
/// it runs here, what an identical call of the round gave, or that it goes as a REQUEST. The round's
/// deduplication holds as for a REQUEST, and a call that runs here passes the bus once instead of twice.
extension AgentWorker {
    /// The call's outcome and the agent that ran it; nil when it goes as a REQUEST: the turn has no round,
    /// this agent does not offer the skill (or it needs the user's confirmation, which the bus asks for), or
    /// the bus said `route`. `body`: the parameters as they are sent.
    func offerHere(
        _ skill: String, body: [UInt8], in turn: TurnRequest, deadline: ContinuousClock.Instant
    ) async -> (outcome: Result<SkillResult, SkillbusError>, agent: String)? {
        guard !turn.roundID.isEmpty else { return nil }
        let offer = state.withLock { state -> (skill: any AgentSkill, id: String)? in
            guard state.leases[turn.roundID] == nil, let found = state.skills[skill],
                !found.descriptor.needsConfirmation
            else { return nil }
            state.lastClaim += 1
            return (found, "o" + String(state.lastClaim))
        }
        guard let offer else { return nil }
        let verdict = await withTaskCancellationHandler {
            await withCheckedContinuation { (waiting: CheckedContinuation<OfferVerdict?, Never>) in
                let cancelled = state.withLock { state in
                    // Checked under the lock that the cancel handler takes: either it finds this or this sees it.
                    if Task.isCancelled { return true }
                    state.offers[offer.id] = waiting
                    return false
                }
                if cancelled { return waiting.resume(returning: nil) }
                sendAfterTurnReports(
                    WorkerMessage.offer(turnID: turn.turnID, callID: offer.id, skill: skill, parameters: body).encoded()
                )
            }
        } onCancel: {
            state.withLock { $0.offers.removeValue(forKey: offer.id) }?.resume(returning: nil)
        }
        switch verdict {
        case nil:
            return (
                .failure(SkillbusError(.cancelled, "the turn was cancelled while '\(skill)' waited for the bus")), ""
            )
        case .route?:
            return nil
        case .done(let status, let agent, let payload)?:
            return (Self.decode(InvocationRunner.Outcome(status: status, payload: payload), of: skill), agent)
        case .run?:
            let outcome = await runLocally(offer.skill, id: offer.id, parameters: body, in: turn, deadline: deadline)
            socket.send(
                WorkerMessage.called(
                    turnID: turn.turnID, claimID: offer.id, skill: skill, parameters: body, status: outcome.status,
                    payload: outcome.payload
                ).encoded())
            return (Self.decode(outcome, of: skill), options.name)
        }
    }
}
