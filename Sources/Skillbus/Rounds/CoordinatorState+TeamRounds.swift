import Foundation

/// Team rounds (PROTOCOL §3.5.10): an ask of a round is a turn the bus starts itself, for the round rather than
/// for a client. The turn runs in the round's id and session, so every skill call of every agent of the round
/// is a REQUEST of that round (listed as a sub-call, deduplicated with the round's other invocations); it gets
/// the round's deadline and no lease. Its TURNEND (or its end by deadline or a lost agent) ends the ask.
extension CoordinatorState {
    /// Why no agent could take a turn for `target` now; nil when one can.
    mutating func askProblem(_ target: AgentTarget) -> SkillbusError? {
        // A named agent or role: the time plays no part (it does only for a turn that names none).
        if case .failure(let error) = turnTaker(for: target, session: [], now: 0) { return error }
        return nil
    }

    /// The agents an `asks` body names, each live with a planner: in the order given, or sorted by name.
    mutating func askedAgents(_ group: AgentGroup) throws(SkillbusError) -> [String] {
        let planners = workers.all.filter(\.registration.planner)
        switch group {
        case .agents(let names):
            try Self.throwAll(names.compactMap { askProblem(.agent($0)) }, in: "the asks body")
            return names
        case .role(let role):
            if let problem = askProblem(.role(role)) { throw problem }
            return planners.filter { $0.registration.profile.role == role }.map(\.name).sorted()
        case .all:
            guard !planners.isEmpty else {
                throw SkillbusError(.unknownAgent, "no live agent has a planner to take the turn")
            }
            return planners.map(\.name).sorted()
        }
    }

    /// Starts the turn of an ask: its message resolved against the steps before it, its agent chosen (a role's
    /// player in the round's session, else the least loaded), and a TURN sent for the round.
    mutating func startAsk(_ roundKey: ByteKey, _ index: Int, _ ask: AskStep, now: UInt64) -> [CoordinatorAction] {
        let (round, session, deadline, results, stepID) = rounds.updateRunning(roundKey) { run in
            run.invocations[index].record.status = .running
            run.invocations[index].started = now
            return (run.id, run.session, run.deadline, run.results, run.invocations[index].id)
        }
        func failed(_ error: SkillbusError) -> [CoordinatorAction] {
            let failure = SkillbusError(error.code, "step '\(stepID)': \(error.message)", details: error.details)
            let outcome = Outcome(status: .error, agent: [], payload: failure.json.serialized(), durationMicros: 0)
            return stepDone(roundKey, index, outcome, deduplicated: false, now: now)
        }
        let message: String
        switch ask.message.resolve(results) {
        case .success(let text): message = text
        case .failure(let error): return failed(error)
        }
        rounds.updateRunning(roundKey) { $0.invocations[index].record.message = message }
        let peer: PeerID
        switch turnTaker(for: ask.target, session: session, now: now) {
        case .success(let taker): peer = taker
        case .failure(let error): return failed(error)
        }
        let agent = workers[peer]?.name ?? ""
        // The role's player in this session stays the same; the session's current agent (for ASK) does not move.
        recordTurn(session, agent: agent, role: workers[peer]?.registration.profile.role, nested: true, now: now)
        var entry = PendingQueries.Entry(
            client: [], requestID: "", worker: peer, agent: agent, deadline: deadline, round: round,
            session: String(decoding: session, as: UTF8.self))
        entry.roundStep = index
        let standing = TurnTable.Standing(agent: agent, message: message, parent: nil, depth: 0)
        return startTurn(entry, standing: standing, message: message, leasing: mayLeaseAsk(roundKey, round: round), now: now).actions
    }

    /// Whether the turn of an ask starting now may hold its round (PROTOCOL §3.5.10): the round asks agents and
    /// runs no skill step of its own (those the round engine decides, which a lease would not stop), nothing
    /// ran or runs in it, and no other turn holds it. The other turns' calls then wait for it (their OFFERs) as
    /// REQUESTs do, and the holder's calls run on its agent without asking first.
    mutating func mayLeaseAsk(_ roundKey: ByteKey, round: [UInt8]) -> Bool {
        guard settings.deduplication, turns.lease(of: roundKey) == nil, !singleFlight.knows(round: round) else {
            return false
        }
        let asksOnly = rounds.update(roundKey) { run in
            run.invocations.allSatisfy { $0.ask != nil || $0.subCallRequest != nil }
        }
        return asksOnly == true
    }

    /// The turn of an ask ended (TURNEND, or the bus gave up on it): the step ends with the reply as a text
    /// result, or the turn's error; the turn document goes into the round document either way. An ask that
    /// already ended (it was cancelled) is left as it is.
    mutating func askEnded(_ entry: PendingQueries.Entry, _ answer: RelayedAnswer, now: UInt64) -> [CoordinatorAction] {
        guard let index = entry.roundStep else { return [] }
        let roundKey = ByteKey(entry.round)
        let started = rounds.update(roundKey) { run -> UInt64? in
            guard run.invocations.indices.contains(index), run.invocations[index].status == .running else { return nil }
            return run.invocations[index].started
        }
        guard let started = started ?? nil else { return [] }
        // The document goes into the round's as the agent wrote it: only its reply is read out of it.
        let document = DocumentJSON(payload: answer.body)
        let agent = Array(entry.agent.utf8)
        let micros = Int((now &- started) / 1000)
        let outcome: Outcome
        var turn: DocumentJSON?
        if answer.status == .ok {
            turn = document
            let reply = SkillResult.text(document.member("reply")?.stringValue ?? "")
            outcome = Outcome(status: .ok, agent: agent, payload: reply.json.serialized(), durationMicros: micros)
        } else {
            var error = SkillbusError(json: document.value)
            // A turn that failed on its agent carries its document as the details (a failed handoff, under
            // "turn"): it goes to the invocation's `turn`, not twice into the document.
            if var details = error.details?.objectValue {
                if details["states"] != nil {
                    turn = .value(.object(details))
                    details = [:]
                } else if let handing = details.removeValue(forKey: "turn") {
                    turn = .value(handing)
                }
                error = SkillbusError(error.code, error.message, details: details.isEmpty ? nil : .object(details))
            }
            outcome = Outcome(status: .error, agent: agent, payload: error.json.serialized(), durationMicros: micros)
        }
        rounds.updateRunning(roundKey) { $0.invocations[index].record.turnJSON = turn }
        return stepDone(roundKey, index, outcome, deduplicated: false, now: now)
    }

    /// Stops a running ask (its round was cancelled, or another agent answered first): CANCEL to the agent for
    /// its turn and the turns nested under it, and the step ends `cancelled` now. The turn's own TURNEND, when
    /// it comes, finds the step ended.
    mutating func stopAsk(_ roundKey: ByteKey, _ index: Int, _ error: SkillbusError, now: UInt64) -> [CoordinatorAction] {
        guard let (round, invocation) = rounds.update(roundKey, { ($0.id, $0.invocations[index]) }),
            invocation.ask != nil, invocation.status == .running
        else { return [] }
        var actions: [CoordinatorAction] = []
        var agent = ""
        if let (turnID, entry) = turns.turn(answering: round, step: index) {
            agent = entry.agent
            for id in turns.descendants(of: turnID) + [turnID] {
                if let turn = turns.turn(id) { actions.append(.toWorker(turn.worker, .cancel(invocationID: id))) }
            }
            let reason = error.details?["reason"]?.stringValue ?? CancelReason.client.rawValue
            actions.append(
                .publish(
                    .invocationCancelled(
                        round: String(decoding: round, as: UTF8.self), invocation: invocation.id, agent: agent,
                        reason: reason)))
        }
        let outcome = Outcome(
            status: .error, agent: Array(agent.utf8), payload: error.json.serialized(),
            durationMicros: Int((now &- invocation.started) / 1000))
        return actions + stepDone(roundKey, index, outcome, deduplicated: false, now: now)
    }

    /// Every ask of the round still running stops (as `stopAsk`).
    mutating func stopAsks(_ roundKey: ByteKey, _ error: SkillbusError, now: UInt64) -> [CoordinatorAction] {
        guard let count = rounds.update(roundKey, { $0.invocations.count }) else { return [] }
        var actions: [CoordinatorAction] = []
        for index in 0..<count { actions += stopAsk(roundKey, index, error, now: now) }
        return actions
    }

    /// What `majority` compares of an ask's result: its reply, trimmed of white space and lower-cased.
    static func replyKey(_ invocation: RoundDocument.Invocation) -> [UInt8] {
        let reply = invocation.result?["text"]?.stringValue ?? ""
        return Array(reply.trimmingCharacters(in: .whitespacesAndNewlines).lowercased().utf8)
    }
}
