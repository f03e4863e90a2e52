/// Rounds and the journal (PROTOCOL §3.5.9): with a data directory, a new round id is journaled as accepted
/// before anything of it runs (unless every skill of it is idempotent: CoordinatorState+EarlyRounds), and the
/// journal's answer decides what happens: it starts, or the id is one the journal knows (finished before, perhaps
/// before a restart; or interrupted by one) and the client gets that.
extension CoordinatorState {
    /// Hands a new round to the journal; it starts when the journal answers (`journalAnswered`), or at once when
    /// every skill of it is idempotent (`startEarly`).
    mutating func journal(_ accepted: AcceptedRound, _ roundKey: ByteKey, now: UInt64) -> [CoordinatorAction] {
        if earlyRounds[roundKey] != nil { return joinEarly(accepted, roundKey) }
        switch parked.join(accepted, in: .journal) {
        case false?: return refuseConflict(accepted.request, accepted.spec, to: accepted.clients)
        case true?: return []
        case nil: break
        }
        // The accept of a round cancelled while it waited is still with the journal: one accept of an id at a
        // time, so this one goes when that answer comes.
        let outstanding = parked.isAcceptOutstanding(roundKey)
        let entry = acceptEntry(accepted)
        if !outstanding, let started = startEarly(accepted, roundKey, entry, now: now) { return started }
        journalIDs.insert(roundKey)
        parked.park(accepted, .journal)
        if outstanding { return [] }
        return [.journal(entry)]
    }

    func acceptEntry(_ accepted: AcceptedRound) -> JournalEntry {
        // A turn is not idempotent: a team round cut off by a restart is `interrupted`, never run again.
        let idempotent =
            !accepted.spec.asksAgents
            && accepted.spec.skills.allSatisfy { ledger.registry.skills[$0]?.descriptor.idempotent ?? false }
        return .accept(roundID: accepted.request.$roundID, body: accepted.body, idempotent: idempotent)
    }

    /// The answer to the accept of a round cancelled before it came (CoordinatorState+Unstarted): a row the
    /// journal recorded as running for it is deleted, and the same round sent again since then (`resent`) is handed
    /// to the journal now.
    private func answeredCancelled(_ answer: JournalAnswer, resent: AcceptedRound?) -> [CoordinatorAction] {
        var actions: [CoordinatorAction] = []
        if case .accepted = answer { actions.append(.journal(.forget(roundID: answer.roundID))) }
        if let resent { actions.append(.journal(acceptEntry(resent))) }
        return actions
    }

    /// The journal opened (or was opened by a new leader): the ids it holds.
    public mutating func journalOpened(holding ids: [[UInt8]]) { journalIDs = JournalIDs(ids) }

    /// The journal's retention sweep deleted these rounds.
    public mutating func journalDeleted(_ ids: [[UInt8]]) { journalIDs.remove(ids) }

    /// The journal committed a batch: each round it accepted starts; the others are answered from the journal.
    public mutating func journalAnswered(_ answers: [JournalAnswer], now: UInt64) -> [CoordinatorAction] {
        var actions: [CoordinatorAction] = []
        for answer in answers {
            let roundKey = ByteKey(answer.roundID)
            if earlyRounds[roundKey] != nil {
                actions += earlyAnswered(answer, roundKey, now: now)
                continue
            }
            let accepted: AcceptedRound
            switch parked.journalAnswered(roundKey) {
            case nil: continue
            case .cancelled(let resent)?:
                actions += answeredCancelled(answer, resent: resent)
                continue
            case .pending(let round)?: accepted = round
            }
            let request = accepted.request
            switch answer {
            case .accepted:
                actions += startRound(accepted, roundKey, now: now)
            case .stored(let roundID, let document):
                let document = RoundDocument.markedStored(document)
                actions += accepted.clients.map {
                    .toClient($0.client, .round(requestID: $0.requestID, roundID: roundID, document: document))
                }
            case .interrupted:
                let error = Self.interruptedError(request.roundID)
                actions += refuseRound(request.$roundID, shape: accepted.spec.shape, error, to: accepted.clients)
            case .conflict:
                actions += refuseConflict(request, accepted.spec, to: accepted.clients)
            case .failed(_, let error):
                actions += refuseRound(request.$roundID, shape: accepted.spec.shape, error, to: accepted.clients)
            }
        }
        return actions
    }
}

/// A round the bus accepted and that waits to start: for the journal's answer, or, in the startup grace, for
/// an agent that offers its skills.
struct AcceptedRound: Sendable {
    let request: RoundRequest
    let spec: RoundSpec
    /// The canonical body.
    let body: [UInt8]
    /// The parameters as sent, serialized once with the body: an invoke's or fan-out's, or each plan step's.
    var parameterBytes: SentParameters? = nil
    let retries: Int?
    let priority: InvocationPriority
    let noCache: Bool
    var clients: [(client: PeerID, requestID: [UInt8])]
    /// When the bus first received it: its timeout counts from here.
    let arrived: UInt64
}
