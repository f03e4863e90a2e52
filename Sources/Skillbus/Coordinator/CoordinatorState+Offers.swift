/// A turn that does not hold its round (a turn of a team round, or one that gave its round back) offers to
/// run a call on its own agent, which offers the skill (PROTOCOL §3.7.3). The bus decides as it would on a
/// REQUEST of the round: the first of its kind runs there (VERDICT `run`, then CALLED ends it, as a claim's
/// does); an identical call that ran or runs gives its outcome instead (VERDICT `done`); anything the
/// REQUEST path must decide (a held round, a cached skill, parameters that match nothing) is sent back
/// (`route`). Each call then passes the bus once, not twice, and runs where its turn is.
extension CoordinatorState {
    mutating func noteOffer(
        turnID: String, callID: String, skill: String, parameters: [UInt8], from peer: PeerID, now: UInt64
    ) -> [CoordinatorAction] {
        func answer(_ verdict: OfferVerdict) -> [CoordinatorAction] {
            [.toWorker(peer, .verdict(callID: callID, verdict))]
        }
        // A cancelled turn's calls are refused; a cached skill may be answered from the cache: the REQUEST path
        // decides those.
        guard settings.deduplication, let turn = turns.turn(turnID, of: peer), !turn.round.isEmpty,
            !turns.isCancelled(round: turn.round), descriptors.cacheLifetimeMs(of: skill) == nil
        else { return answer(.route) }
        let waiter = Waiter.offer(peer, turnID: turnID, callID: callID)
        // Another turn holds the round (the first ask of a team round). A call identical to one the holder ran
        // (or runs under a CLAIM) takes that outcome at once: it starts nothing the holder could run too. Any
        // other waits until the round comes back, as a REQUEST of the round would.
        if let lease = turns.lease(of: ByteKey(turn.round)) {
            guard lease.turnID != turnID else { return answer(.route) }
            if let admission = singleFlight.reuse(
                round: turn.round, skill: skill, parameters: parameters, waiter: waiter,
                schema: { ledger.registry.skills[$0]?.descriptor.parameters })
            {
                return decide(admission, turn.round, turnID, callID, skill, parameters, from: peer, now: now)
            }
            let waiting = TurnTable.WaitingOffer(
                worker: peer, turnID: turnID, callID: callID, skill: skill, parameters: parameters)
            return turns.wait(waiting, for: ByteKey(turn.round)) ? [] : answer(.route)
        }
        let admission = singleFlight.admit(
            round: turn.round, skill: skill, parameters: parameters, waiter: waiter,
            schema: { ledger.registry.skills[$0]?.descriptor.parameters })
        return decide(admission, turn.round, turnID, callID, skill, parameters, from: peer, now: now)
    }

    /// The VERDICT for an offered call placed among its round's executions.
    private mutating func decide(
        _ admission: SingleFlight.Admission, _ round: [UInt8], _ turnID: String, _ callID: String, _ skill: String,
        _ parameters: [UInt8], from peer: PeerID, now: UInt64
    ) -> [CoordinatorAction] {
        func answer(_ verdict: OfferVerdict) -> [CoordinatorAction] {
            [.toWorker(peer, .verdict(callID: callID, verdict))]
        }
        let subCall = Self.offerSubCallID(turnID: turnID, callID: callID)
        switch admission {
        case .unshared:
            return answer(.route)
        case .first(let execution):
            noteSubCall(round: round, skill: skill, parameters: parameters, id: subCall, deduplicated: false)
            turns.offered(
                TurnTable.Claim(execution: execution, round: round, accepted: now, subCall: subCall),
                as: TurnTable.ClaimKey(worker: peer, turnID: turnID, claimID: callID))
            return answer(.run)
        case .joined:
            noteSubCall(round: round, skill: skill, parameters: parameters, id: subCall, deduplicated: true)
            return announceDeduplicated(round, subCall, skill, finished: false)
        case .finished(let outcome):
            noteSubCall(round: round, skill: skill, parameters: parameters, id: subCall, deduplicated: true)
            noteSubCallDone(roundID: round, requestID: subCall, outcome)
            return answer(outcome.verdict) + announceDeduplicated(round, subCall, skill, finished: true)
        }
    }

    /// The holder of `round` reported a call of `skill`: the OFFERs waiting for the round that are identical to it
    /// are decided now; the others keep waiting, in the order they came. Only those of the same skill are looked
    /// at again (their parameters put in canonical form): another skill's cannot be identical.
    mutating func decideWaitingOffers(of round: [UInt8], skill: String, now: UInt64) -> [CoordinatorAction] {
        let key = ByteKey(round)
        var actions: [CoordinatorAction] = []
        for offer in turns.takeWaitingOffers(of: key) where turns.turn(offer.turnID, of: offer.worker) != nil {
            if offer.skill == skill {
                actions += noteOffer(
                    turnID: offer.turnID, callID: offer.callID, skill: offer.skill, parameters: offer.parameters,
                    from: offer.worker, now: now)
            } else {
                _ = turns.wait(offer, for: key)  // it was within the limit, and the round holds no more now
            }
        }
        return actions
    }

    /// OFFERs that waited for their round, in the order they came; one whose turn ended meanwhile is nobody's.
    mutating func decide(_ offers: [TurnTable.WaitingOffer], now: UInt64) -> [CoordinatorAction] {
        var actions: [CoordinatorAction] = []
        for offer in offers where turns.turn(offer.turnID, of: offer.worker) != nil {
            actions += noteOffer(
                turnID: offer.turnID, callID: offer.callID, skill: offer.skill, parameters: offer.parameters,
                from: offer.worker, now: now)
        }
        return actions
    }

    /// An offered call that joined another is announced as a deduplicated REQUEST is, named as a sub-call.
    private func announceDeduplicated(_ round: [UInt8], _ subCall: [UInt8], _ skill: String, finished: Bool)
        -> [CoordinatorAction]
    {
        guard publishesRequestEvents else { return [] }
        return [
            .publish(
                .requestDeduplicated(
                    round: String(decoding: round, as: UTF8.self), request: String(decoding: subCall, as: UTF8.self),
                    skill: skill, finished: finished))
        ]
    }

    /// How an offered call is named among its round's sub-calls: unique in the round, as a request id is.
    static func offerSubCallID(turnID: String, callID: String) -> [UInt8] { Array("\(turnID):\(callID)".utf8) }
}

extension Outcome {
    /// The outcome as the VERDICT that gives it to a turn whose call joined it.
    var verdict: OfferVerdict {
        .done(status: status, agent: String(decoding: agent, as: UTF8.self), payload: payload)
    }
}
