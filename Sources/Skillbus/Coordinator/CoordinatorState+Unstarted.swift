/// Cancelling what the bus accepted and has not started (PROTOCOL §3.10): what waits in `ParkedRequests` — a ROUND
/// that waits for the journal's commit (§3.5.9), a ROUND or REQUEST that waits in the startup grace for an agent
/// (§4.17), a REQUEST behind a turn's lease on its round (§3.7). Nothing of it ran, so nothing is stopped: it
/// leaves its wait, its clients are answered `cancelled`, and a round the journal recorded is forgotten there.
/// Without this, it would start when its wait ended.
extension CoordinatorState {
    /// CANCEL naming `round`: its ROUND if it waits to start, and every REQUEST of it waiting in the grace.
    mutating func cancelUnstarted(
        round: [UInt8], _ error: SkillbusError, now: UInt64, _ tally: inout CancelTally
    ) -> [CoordinatorAction] {
        var actions: [CoordinatorAction] = []
        let key = ByteKey(round)
        for wait in [ParkedRequests.Wait.journal, .grace] {
            if let accepted = parked.round(key, in: wait) {
                actions += dropUnstarted(accepted, from: wait, error, &tally)
                break
            }
        }
        return actions + dropParked(error, now: now, &tally) { $0.wait == .grace && $0.request.$roundID == round }
    }

    /// CANCEL with `client`'s own request id: its REQUEST waiting in the grace (answered `requestError`), or its
    /// ROUND waiting to start. Nil when the bus holds neither.
    mutating func cancelUnstarted(
        client: PeerID, requestID: [UInt8], _ requestError: SkillbusError, now: UInt64, _ tally: inout CancelTally
    ) -> [CoordinatorAction]? {
        let requests = dropParked(requestError, now: now, &tally) { parked in
            parked.wait == .grace && parked.client == client && parked.request.$requestID == requestID
        }
        if !requests.isEmpty { return requests }
        let isThisWait = { (wait: (client: PeerID, requestID: [UInt8])) in
            wait.client == client && wait.requestID == requestID
        }
        guard let (accepted, wait) = parked.round(where: { $0.clients.contains(where: isThisWait) }) else {
            return nil
        }
        let round = accepted.request.roundID
        guard accepted.clients.count > 1 else {
            return dropUnstarted(accepted, from: wait, Self.cancelledByItsClient(round: round), &tally)
        }
        // Others wait for the same round: it will start for them, and this client's wait ends here.
        parked.updateRound(ByteKey(accepted.request.$roundID), in: wait) { $0.clients.removeAll(where: isThisWait) }
        let error = Self.stoppedWaiting(round: round, others: accepted.clients.count - 1)
        return refuseRound(accepted.request.$roundID, shape: accepted.spec.shape, error, to: [(client, requestID)])
    }

    /// The round leaves its wait for good, and each of its clients gets a document with `error`.
    private mutating func dropUnstarted(
        _ accepted: AcceptedRound, from wait: ParkedRequests.Wait, _ error: SkillbusError, _ tally: inout CancelTally
    ) -> [CoordinatorAction] {
        tally.rounds += 1
        var actions = refuseRound(accepted.request.$roundID, shape: accepted.spec.shape, error, to: accepted.clients)
        // The journal's answer to its accept, when it comes, is its own (CoordinatorState+Journal).
        parked.removeRound(ByteKey(accepted.request.$roundID), from: wait)
        // With a journal it parked in the grace only after the journal had recorded it as running.
        if wait == .grace, settings.journaled { actions.append(.journal(.forget(roundID: accepted.request.$roundID))) }
        return actions
    }

    /// Parked REQUESTs that `matches` picks (by where they wait, request and client): answered `error`, never run.
    mutating func dropParked(
        _ error: SkillbusError, now: UInt64, _ tally: inout CancelTally,
        where matches: (ParkedRequests.ParkedInvoke) -> Bool
    ) -> [CoordinatorAction] {
        guard !parked.isEmpty else { return [] }
        let gone = parked.removeRequests(where: matches)
        tally.requests += gone.count
        return gone.flatMap { unrunReply($0.request, client: $0.client, arrived: $0.arrived, error, now: now) }
    }
}
