/// How a round the bus runs ends: a fan-out's or asks round's losers cancelled once one answered first, the
/// document built and sent to every waiting client, kept for the same round id sent again, and journaled.
extension CoordinatorState {
    /// `first`: the others are cancelled, running or still waiting for a slot.
    mutating func cancelLosers(_ roundKey: ByteKey, now: UInt64) -> [CoordinatorAction] {
        guard let run = rounds[roundKey] else { return [] }
        let cancelled = Self.cancelledError("another agent answered first", .lostRace)
        // An asks body's losers are turns.
        var actions = stopAsks(roundKey, cancelled, now: now)
        for running in requests.answerRunning(where: { $0.isStep(of: roundKey) }) {
            // Announced before its outcome, so the feed reads: cancelled, then done, then the round.
            actions += sendCancel(running, reason: .lostRace, now: now)
            actions += fail(running.request, cancelled, agent: workers[running.worker]?.name ?? "", now: now)
        }
        // A loser waiting out a retry's backoff never runs.
        let backingOff = requests.removeUnstarted { $0.phase.isBackingOff && $0.request.isStep(of: roundKey) }
        for (_, request) in backingOff {
            actions += cancelledEvent(request, agent: "", reason: .lostRace)
            actions += fail(request, cancelled, agent: "", executed: false, now: now)
        }
        let queued = requests.removeUnstarted {
            $0.phase == .queued && $0.request.target != nil && $0.request.isStep(of: roundKey)
        }
        for (_, request) in queued {
            if case .step(_, let index) = request.origin, let target = request.target {
                actions.append(
                    .publish(
                        .invocationCancelled(
                            round: run.roundText, invocation: run.invocations[index].id,
                            agent: workers[target]?.name ?? "", reason: CancelReason.lostRace.rawValue)))
            }
            actions += fail(request, cancelled, agent: "", executed: false, now: now)
        }
        return actions
    }

    /// Builds the document, answers every waiting client, and keeps it for the same round id sent again.
    mutating func finishRound(_ roundKey: ByteKey, now: UInt64) -> [CoordinatorAction] {
        guard rounds.isRunning(roundKey) else { return [] }
        let run = rounds.end(roundKey)
        let document = roundDocument(run, now: now)
        let bytes = document.serialized()
        // A cancelled round, or one that failed in a way that may be tried again, is no answer to keep: the
        // same round sent again runs (what succeeded is reused through single-flight).
        let retryable = run.invocations.indices.contains { index in
            guard run.invocations[index].subCallRequest == nil, run.invocations[index].record.status == .error,
                let error = run.invocations[index].record.error
            else { return false }
            return retryDescriptor(of: run.invocations[index].skill)?.isRetryable(error.code.rawValue) ?? false
        }
        let forgotten = run.cancelled != nil || retryable
        // Built before `run` moves into `ended`, and only when somebody watches.
        let done =
            publishesRoundEvents
            ? FeedEvent.roundDone(round: run.roundText, status: document.status, summary: document.summary) : nil
        let ended = EndedRound(run: run, document: bytes, keep: !forgotten)
        let early = !earlyRounds.isEmpty && earlyRounds[roundKey] != nil
        var actions = early ? earlyEnded(ended, roundKey, now: now) : answer(ended, roundKey, now: now)
        if let done { actions.append(.publish(done)) }
        return actions
    }

    /// Answers every client of an ended round with its document, keeps it for the same round id sent again unless
    /// it is not to be kept, and journals it.
    mutating func answer(_ ended: EndedRound, _ roundKey: ByteKey, now: UInt64) -> [CoordinatorAction] {
        let run = ended.run
        if ended.keep { rounds.remember(run, key: roundKey, document: ended.document, now: now) }
        var actions = run.clients.map { waiter in
            CoordinatorAction.toClient(
                waiter.client, .round(requestID: waiter.requestID, roundID: run.id, document: ended.document))
        }
        if settings.journaled {
            if ended.keep {
                journalIDs.insert(roundKey)
                actions.append(.journal(.finish(roundID: run.id, body: run.body, document: ended.document)))
            } else {
                journalIDs.remove(roundKey)
                actions.append(.journal(.forget(roundID: run.id)))
            }
        }
        return actions
    }
}
