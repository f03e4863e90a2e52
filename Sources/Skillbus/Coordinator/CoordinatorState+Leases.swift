/// A turn's lease on its round (PROTOCOL §3.7): when a turn starts in a round nothing has run in, the
/// round is the turn's. Its agent may then run a call of a skill it offers itself, with no pass through
/// the bus, and reports it with CALLED as it ends (and, for a call still running when the round goes
/// back, CLAIM before RELEASE), which enters it among the round's executions, so an identical invocation
/// reuses or joins it. Any other invocation of the round waits until the turn gives the round back
/// (RELEASE, sent before any call of the turn goes through the bus) or ends: so every invocation the bus
/// decides on sees every call of the turn before it. Two passes through the bus per call are saved;
/// deduplication holds as it does for invocations the bus routes.
extension CoordinatorState {
    /// Whether a turn starting now in `round` may hold it: nothing ran or runs in it, and nothing holds it.
    func mayLease(_ round: [UInt8]) -> Bool {
        let key = ByteKey(round)
        return settings.deduplication && !round.isEmpty && turns.lease(of: key) == nil && !rounds.holds(key)
            && !singleFlight.knows(round: round)
    }

    /// A REQUEST of a round a turn holds waits for the round to come back (in `ParkedRequests`, in the phase
    /// `parked(lease)`). True when it was parked.
    mutating func parkIfLeased(_ request: InvokeRequest, from client: PeerID, now: UInt64) -> Bool {
        let key = ByteKey(request.$roundID)
        guard turns.lease(of: key) != nil else { return false }
        parked.park(request, client: client, arrived: now, .lease(key))
        return true
    }

    /// CLAIM: one of the turn's calls runs on its agent. Ignored unless the turn holds its round.
    mutating func noteClaim(
        turnID: String, claimID: String, skill: String, parameters: [UInt8], from peer: PeerID, now: UInt64
    ) -> [CoordinatorAction] {
        if let claim = enter(turnID, claimID, skill, parameters, from: peer, now: now) {
            turns.claim(claim, as: TurnTable.ClaimKey(worker: peer, turnID: turnID, claimID: claimID))
        }
        return []
    }

    /// The turn's call as an execution of its round, when the turn holds the round; in a team round, one of the
    /// round's sub-calls too, as an offered call is.
    private mutating func enter(
        _ turnID: String, _ claimID: String, _ skill: String, _ parameters: [UInt8], from peer: PeerID, now: UInt64
    ) -> TurnTable.Claim? {
        guard let turn = turns.turn(turnID, of: peer), turns.lease(of: ByteKey(turn.round))?.turnID == turnID else {
            return nil
        }
        let admission = singleFlight.admit(
            round: turn.round, skill: skill, parameters: parameters, waiter: .claim,
            schema: { ledger.registry.skills[$0]?.descriptor.parameters })
        // Only the holder adds to a held round, and it runs each call once: its call is always the first.
        guard case .first(let execution) = admission else { return nil }
        var claim = TurnTable.Claim(execution: execution, round: turn.round, accepted: now)
        if rounds.isRunning(ByteKey(turn.round)) {
            let subCall = Self.offerSubCallID(turnID: turnID, callID: claimID)
            noteSubCall(round: turn.round, skill: skill, parameters: parameters, id: subCall, deduplicated: false)
            claim.subCall = subCall
        }
        return claim
    }

    /// CALLED: the call ended; whoever joined it gets its outcome. One with no CLAIM before it ended while
    /// the turn held its round: it enters the round as an execution that has ended.
    mutating func noteCalled(
        turnID: String, claimID: String, skill: String, parameters: [UInt8], status: ReplyStatus, payload: [UInt8],
        from peer: PeerID, now: UInt64
    ) -> [CoordinatorAction] {
        guard
            let claim = turns.takeClaim(TurnTable.ClaimKey(worker: peer, turnID: turnID, claimID: claimID))
                ?? enter(turnID, claimID, skill, parameters, from: peer, now: now)
        else { return [] }
        let agent = workers[peer]?.nameFrame ?? []
        var outcome = Outcome(
            status: status, agent: agent, payload: payload, durationMicros: Int((now &- claim.accepted) / 1000))
        if status == .ok, let problem = SkillResult.problem(in: payload) {
            let error = SkillbusError(.malformedResult, "a turn's call ended ok with no result form: " + problem)
            outcome = Outcome(
                status: .error, agent: agent, payload: error.json.serialized(), durationMicros: outcome.durationMicros)
        }
        return settle(claim, outcome, now: now) + decideWaitingOffers(of: claim.round, skill: skill, now: now)
    }

    /// RELEASE: the turn gives its round back.
    mutating func noteRelease(turnID: String, from peer: PeerID, now: UInt64) -> [CoordinatorAction] {
        guard let turn = turns.turn(turnID, of: peer) else { return [] }
        return endLease(of: turn.round, turnID: turnID, now: now)
    }

    /// The round comes back from the turn `turnID` (if it holds it): what waited for it is handled now.
    mutating func endLease(of round: [UInt8], turnID: String, now: UInt64) -> [CoordinatorAction] {
        let key = ByteKey(round)
        guard let offers = turns.endLease(of: key, turnID: turnID) else { return [] }
        var actions: [CoordinatorAction] = []
        for item in parked.releaseLease(key) {
            guard case .invoke(let request, let client, let arrived) = item else {
                preconditionFailure("a ROUND waited behind a lease: a leased round refuses ROUNDs")
            }
            actions += acceptInvoke(request, from: client, accepted: arrived, now: now)
        }
        return actions + decide(offers, now: now)
    }

    /// Claims that will never be reported: their turn ended, or their agent left.
    mutating func dropClaims(
        where matches: (TurnTable.ClaimKey) -> Bool, _ error: SkillbusError, now: UInt64
    ) -> [CoordinatorAction] {
        var actions: [CoordinatorAction] = []
        for (key, claim) in turns.takeClaims(where: matches) {
            let agent = workers[key.worker]?.nameFrame ?? []
            let outcome = Outcome(
                status: .error, agent: agent, payload: error.json.serialized(),
                durationMicros: Int((now &- claim.accepted) / 1000))
            actions += settle(claim, outcome, now: now)
        }
        return actions
    }

    /// Parked REQUESTs whose time ran out while their round was held.
    mutating func expireParked(now: UInt64) -> [CoordinatorAction] {
        guard turns.hasLeases else { return [] }
        let (ledger, settings) = (ledger, settings)
        func timeoutMs(_ request: InvokeRequest) -> Int {
            request.timeoutMs ?? Self.defaultTimeoutMs(skill: request.skill, ledger: ledger, settings: settings)
        }
        let expired = parked.removeExpiredLeased { item in
            guard case .invoke(let request, _, let arrived) = item else { return false }
            return arrived &+ UInt64(timeoutMs(request)) * 1_000_000 <= now
        }
        var actions: [CoordinatorAction] = []
        for case .invoke(let request, let client, let arrived) in expired {
            let error = SkillbusError(
                .timeout, "'\(request.skill)' waited \(timeoutMs(request)) ms for its round, which a turn held")
            actions += unrunReply(request, client: client, arrived: arrived, error, now: now)
        }
        return actions
    }

    private mutating func settle(_ claim: TurnTable.Claim, _ outcome: Outcome, now: UInt64) -> [CoordinatorAction] {
        if let subCall = claim.subCall, rounds.runningCount > 0 {
            noteSubCallDone(roundID: claim.round, requestID: subCall, outcome)
        }
        let waiters = singleFlight.finish(claim.execution, outcome: outcome, now: now)
        return deliver(outcome, to: waiters, roundID: claim.round, origin: .claim, now: now)
    }
}
