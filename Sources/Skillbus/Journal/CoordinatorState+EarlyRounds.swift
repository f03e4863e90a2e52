/// Journaled rounds whose every skill is idempotent start at once, while the journal commits their accept, instead
/// of after it (PROTOCOL §3.5.9): running one again does no harm, so nothing is lost when the coordinator stops
/// before the accept is on disk — the same round sent again runs again, as an `interrupted` idempotent round would.
/// What the journal answers still decides what the round's clients get: a round id the journal holds already
/// answers with its stored document, a conflict or an error, as for any round; the round's own document is given
/// (and journaled) only when the journal accepted it.
extension CoordinatorState {
    /// Starts the round now when every skill of it is idempotent and its invocations can be planned; nil: it waits
    /// for the journal, as every other round. A round id the journal cannot hold (`journalIDs`) needs no row
    /// before it ends, nor the journal's answer: the round runs as any unjournaled one, and its end writes its row
    /// whole. Otherwise the journal is asked, and answers, as for any round.
    mutating func startEarly(
        _ accepted: AcceptedRound, _ roundKey: ByteKey, _ entry: JournalEntry, now: UInt64
    ) -> [CoordinatorAction]? {
        guard case .accept(_, _, true) = entry,
            let planned = try? plannedInvocations(accepted.spec, parameterBytes: accepted.parameterBytes)
        else { return nil }
        guard journalIDs.mayHold(roundKey) else { return startRound(accepted, roundKey, now: now, planned: planned) }
        earlyRounds[roundKey] = EarlyRound()
        return [.journal(entry)] + startRound(accepted, roundKey, now: now, planned: planned)
    }

    /// The same round sent again after it ended and before the journal answered: answered with it.
    mutating func joinEarly(_ accepted: AcceptedRound, _ roundKey: ByteKey) -> [CoordinatorAction] {
        guard earlyRounds[roundKey]?.ended?.run.body == accepted.body else {
            return refuseConflict(accepted.request, accepted.spec, to: accepted.clients)
        }
        earlyRounds[roundKey]?.ended?.run.clients += accepted.clients
        return []
    }

    /// The round ended: answered now when the journal accepted it already, else when it does.
    mutating func earlyEnded(_ ended: EndedRound, _ roundKey: ByteKey, now: UInt64) -> [CoordinatorAction] {
        guard let verdict = earlyRounds[roundKey]?.verdict else {
            earlyRounds[roundKey]?.ended = ended
            return []
        }
        earlyRounds[roundKey] = nil
        return settle(ended, verdict, roundKey, now: now)
    }

    /// The journal answered the accept of a round that started early.
    mutating func earlyAnswered(_ answer: JournalAnswer, _ roundKey: ByteKey, now: UInt64) -> [CoordinatorAction] {
        guard let ended = earlyRounds[roundKey]?.ended else {
            // Still running: an accepted round goes on as any other; any other answer waits for its end.
            if case .accepted = answer { earlyRounds[roundKey] = nil } else { earlyRounds[roundKey]?.verdict = answer }
            return []
        }
        earlyRounds[roundKey] = nil
        return settle(ended, answer, roundKey, now: now)
    }

    /// What the clients of an early round get, by the journal's answer.
    private mutating func settle(_ ended: EndedRound, _ verdict: JournalAnswer, _ roundKey: ByteKey, now: UInt64)
        -> [CoordinatorAction]
    {
        let run = ended.run
        switch verdict {
        case .accepted:
            return answer(ended, roundKey, now: now)
        case .stored(_, let document):
            // The journal compared the bodies: the stored document is this round's.
            rounds.remember(run, key: roundKey, document: document, now: now)
            let stored = RoundDocument.markedStored(document)
            return run.clients.map {
                .toClient($0.client, .round(requestID: $0.requestID, roundID: run.id, document: stored))
            }
        case .conflict:
            return refuseRound(run.id, shape: run.spec.shape, Self.conflictError(run.roundText), to: run.clients)
        case .interrupted:
            return refuseRound(run.id, shape: run.spec.shape, Self.interruptedError(run.roundText), to: run.clients)
        case .failed(_, let error):
            return refuseRound(run.id, shape: run.spec.shape, error, to: run.clients)
        }
    }
}

/// A round that started before the journal answered its accept.
struct EarlyRound: Sendable {
    /// The journal's answer, when it came while the round still ran and was not `accepted`.
    var verdict: JournalAnswer?
    /// The round, when it ended before the journal answered.
    var ended: EndedRound?
}

/// A round that ended: its run, its document, and whether it is kept for the same round id sent again.
struct EndedRound: Sendable {
    var run: RoundRun
    let document: [UInt8]
    let keep: Bool
}
