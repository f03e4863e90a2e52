/// Cancelling what the bus accepted and has not started (PROTOCOL §3.10): a ROUND that waits for the journal's
/// commit (§3.5.9), and a ROUND or REQUEST that waits in the startup grace for an agent (§4.17). Nothing of it
/// ran, so nothing is stopped: it leaves its wait, its clients are answered `cancelled`, and a round the
/// journal recorded is forgotten there. Without this, it would start when its wait ended.
extension CoordinatorState {
    /// Where an accepted round that has not started waits.
    enum UnstartedPlace {
        case journal(ByteKey)
        case grace(index: Int)
    }

    /// CANCEL naming `round`: its ROUND if it waits to start, and every REQUEST of it waiting in the grace.
    mutating func cancelUnstarted(
        round: [UInt8], _ error: SkillbusError, now: UInt64, _ tally: inout CancelTally
    ) -> [CoordinatorAction] {
        var actions: [CoordinatorAction] = []
        if let (accepted, place) = unstartedRound(where: { $0.request.$roundID == round }) {
            actions += dropUnstarted(accepted, at: place, error, &tally)
        }
        return actions + dropGraceRequests(error, now: now, &tally) { request, _ in request.$roundID == round }
    }

    /// CANCEL with `client`'s own request id: its REQUEST waiting in the grace (answered `requestError`), or its
    /// ROUND waiting to start. Nil when the bus holds neither.
    mutating func cancelUnstarted(
        client: PeerID, requestID: [UInt8], _ requestError: SkillbusError, now: UInt64, _ tally: inout CancelTally
    ) -> [CoordinatorAction]? {
        let requests = dropGraceRequests(requestError, now: now, &tally) { request, from in
            from == client && request.$requestID == requestID
        }
        if !requests.isEmpty { return requests }
        let isThisWait = { (wait: (client: PeerID, requestID: [UInt8])) in
            wait.client == client && wait.requestID == requestID
        }
        guard let (accepted, place) = unstartedRound(where: { $0.clients.contains(where: isThisWait) }) else {
            return nil
        }
        let round = accepted.request.roundID
        guard accepted.clients.count > 1 else {
            return dropUnstarted(accepted, at: place, Self.cancelledByItsClient(round: round), &tally)
        }
        // Others wait for the same round: it will start for them, and this client's wait ends here.
        switch place {
        case .journal(let key): journalPending[key]?.clients.removeAll(where: isThisWait)
        case .grace(let index):
            var parked = accepted
            parked.clients.removeAll(where: isThisWait)
            graceParked[index] = .round(parked)
        }
        let error = Self.stoppedWaiting(round: round, others: accepted.clients.count - 1)
        return refuseRound(accepted.request.$roundID, shape: accepted.spec.shape, error, to: [(client, requestID)])
    }

    private func unstartedRound(
        where matches: (AcceptedRound) -> Bool
    ) -> (round: AcceptedRound, place: UnstartedPlace)? {
        if let (key, accepted) = journalPending.first(where: { matches($0.value) }) {
            return (accepted, .journal(key))
        }
        for (index, item) in graceParked.enumerated() {
            if case .round(let accepted) = item, matches(accepted) { return (accepted, .grace(index: index)) }
        }
        return nil
    }

    /// The round leaves its wait for good, and each of its clients gets a document with `error`.
    private mutating func dropUnstarted(
        _ accepted: AcceptedRound, at place: UnstartedPlace, _ error: SkillbusError, _ tally: inout CancelTally
    ) -> [CoordinatorAction] {
        tally.rounds += 1
        var actions = refuseRound(accepted.request.$roundID, shape: accepted.spec.shape, error, to: accepted.clients)
        switch place {
        case .journal(let key):
            withdrawFromJournal(key)
        case .grace(let index):
            graceParked.remove(at: index)
            // With a journal it parked only after the journal had recorded it as running.
            if settings.journaled { actions.append(.journal(.forget(roundID: accepted.request.$roundID))) }
        }
        return actions
    }

    /// REQUESTs waiting in the grace that `matches` picks (by request and client): answered `error`, never run.
    private mutating func dropGraceRequests(
        _ error: SkillbusError, now: UInt64, _ tally: inout CancelTally,
        where matches: (InvokeRequest, PeerID) -> Bool
    ) -> [CoordinatorAction] {
        guard !graceParked.isEmpty else { return [] }
        let (gone, kept) = graceParked.split { item in
            guard case .invoke(let request, let client, _) = item else { return false }
            return matches(request, client)
        }
        guard !gone.isEmpty else { return [] }
        graceParked = kept
        tally.requests += gone.count
        return gone.flatMap { item -> [CoordinatorAction] in
            guard case .invoke(let request, let client, let arrived) = item else { return [] }
            return unrunReply(request, client: client, arrived: arrived, error, now: now)
        }
    }
}
