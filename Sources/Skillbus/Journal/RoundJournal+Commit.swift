import Foundation

/// Writing one batch of the journal: a run of accepts, or of finishes, in one call to the store; what an accept of a
/// round id the journal holds answers; what a failed transaction answers.
extension RoundJournal {
    /// Writes one batch in one transaction and answers its `accept`s (all but the first `answering` entries',
    /// answered before); when the transaction fails, every `accept` of it is answered `failed` (those rounds do
    /// not run) and its other entries are lost — but when a group's database went away (the connection is lost),
    /// the entries wait in `waiting` for it to come back, and the accepts are answered as `answersWhileAway` says.
    /// A transaction that found another coordinator leading (fencing) is the last: `onFenced`.
    func commit(
        _ entries: [JournalEntry], _ store: any JournalStore, waiting: inout [JournalEntry], answering skip: Int = 0
    ) -> [JournalAnswer] {
        let nowMs = Self.nowMs()
        var added = 0
        var finished: [[UInt8]] = []
        do {
            let answers = try store.transaction { () throws(SkillbusError) -> [JournalAnswer] in
                var answers: [JournalAnswer] = []
                var index = 0
                while index < entries.count {
                    // A run of accepts, or of finishes, is one call to the store (one statement in PostgreSQL).
                    var rounds: [NewRound] = []
                    while index + rounds.count < entries.count,
                        case .accept(let id, let body, let idempotent) = entries[index + rounds.count]
                    {
                        rounds.append(NewRound(id: id, body: body, idempotent: idempotent))
                    }
                    if !rounds.isEmpty {
                        var inserted = try store.insertRunning(rounds, nowMs: nowMs)
                        for (offset, round) in rounds.enumerated() {
                            let answer: JournalAnswer
                            if inserted.remove(round.id) != nil {
                                added += round.body.count
                                answer = .accepted(roundID: round.id)
                            } else {
                                answer = try journaled(round, nowMs: nowMs, store)
                            }
                            if index + offset >= skip { answers.append(answer) }
                        }
                        index += rounds.count
                        continue
                    }
                    var documents: [FinishedRow] = []
                    while index + documents.count < entries.count,
                        case .finish(let id, let body, let document) = entries[index + documents.count]
                    {
                        documents.append(FinishedRow(id: id, body: body, document: document))
                    }
                    if !documents.isEmpty {
                        try store.finish(documents, nowMs: nowMs)
                        added += documents.reduce(0) { $0 + $1.document.count }
                        if hooks.onCommitted != nil { finished += documents.map(\.id) }
                        index += documents.count
                        continue
                    }
                    switch entries[index] {
                    case .accept, .finish:
                        break
                    case .forget(let id):
                        added -= try store.bytes(of: id) ?? 0
                        try store.delete(id)
                    case .member(let row):
                        try store.upsertMember(row)
                    case .forgetSession(let session):
                        try store.deleteSession(session)
                    }
                    index += 1
                }
                return answers
            }
            storedBytes.add(added, ordering: .relaxed)
            if !finished.isEmpty { hooks.onCommitted?(finished) }
            return answers
        } catch {
            if error.code == .notLeader {
                logger.error("the journal wrote nothing: \(error.message)")
                fenced.withLock { $0 = error }
                hooks.onFenced?(error)
                return failedAccepts(entries.dropFirst(skip), error)
            }
            if !store.isConnected && store.waitsForDatabase {
                logger.warning(
                    "the journal's database went away (\(error.message)); serving from memory, "
                        + "\(entries.count) entries wait for it")
                waiting = entries
                noteBacklog(waiting)
                return answersWhileAway(Array(entries.dropFirst(skip)))
            }
            logger.error("the journal could not commit \(entries.count) entries: \(error.message)")
            return failedAccepts(entries.dropFirst(skip), error)
        }
    }

    func failedAccepts(_ entries: ArraySlice<JournalEntry>, _ error: SkillbusError) -> [JournalAnswer] {
        entries.compactMap { entry in
            guard case .accept(let id, _, _) = entry else { return nil }
            return .failed(roundID: id, error)
        }
    }

    /// The answer to an accept whose round id the journal holds already (most rounds are new: their insert is
    /// all, and this read happens only for the others).
    func journaled(_ round: NewRound, nowMs: Int64, _ store: any JournalStore) throws(SkillbusError)
        -> JournalAnswer
    {
        let (id, body) = (round.id, round.body)
        guard let stored = try store.stored(id) else {
            throw SkillbusError(
                .internalError, "round '\(String(decoding: id, as: UTF8.self))' is neither new nor in the journal")
        }
        guard stored.body == body else { return .conflict(roundID: id) }
        switch stored.state {
        case "done":
            return .stored(roundID: id, document: stored.document ?? [])
        case "interrupted" where stored.idempotent:
            try store.rerun(id, nowMs: nowMs)
            return .accepted(roundID: id)
        case "interrupted":
            return .interrupted(roundID: id)
        default:
            // Running under this coordinator: the state machine holds it, so this is a second accept by mistake.
            return .failed(
                roundID: id,
                SkillbusError(.internalError, "round '\(String(decoding: id, as: UTF8.self))' is journaled as running"))
        }
    }
}
