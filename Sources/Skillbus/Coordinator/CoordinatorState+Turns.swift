/// Turns through the bus: ASK handed to an agent with a planner (named, the session's, or the least
/// loaded), its states published as they happen, and its TURNEND relayed to the client that asked.
extension CoordinatorState {
    public mutating func handleAsk(_ request: AskRequest, from client: PeerID, now: UInt64) -> [CoordinatorAction] {
        func refuse(_ agent: String, _ error: SkillbusError) -> [CoordinatorAction] {
            [.toClient(client, .turn(requestID: request.requestID, agent: agent, .error(error)))]
        }
        let planners = workers.all.filter(\.registration.planner).map(\.peer)
        let session = Array(request.sessionID.utf8)
        let peer: PeerID
        if !request.agent.isEmpty {
            guard let named = workers.peer(named: request.agent) else {
                return refuse(
                    request.agent,
                    SkillbusError(
                        .unknownAgent, "no live agent is named '\(request.agent.prefix(128))'",
                        details: ["agent": .string(request.agent)]))
            }
            guard planners.contains(named) else {
                return refuse(
                    request.agent, SkillbusError(.unsupported, "agent '\(request.agent)' has no planner: it takes no turns"))
            }
            peer = named
        } else if !session.isEmpty, let holder = affinity.agent(of: session).flatMap(workers.peer(named:)),
            planners.contains(holder)
        {
            peer = holder
        } else if let chosen = workers.pickProvider(planners) ?? planners.first {
            peer = chosen
        } else {
            return refuse("", SkillbusError(.unknownAgent, "no live agent has a planner to take the turn"))
        }
        let agent = workers[peer]?.name ?? ""
        if !session.isEmpty { affinity.record(session, agent: agent) }
        noteServed(session, agent: agent, role: nil, now: now)
        let timeoutMs = request.timeoutMs ?? settings.defaultTimeoutMs
        let round = Array(request.roundID.utf8)
        let leased = mayLease(round)
        let turnID = turns.start(
            .init(
                client: client, requestID: request.requestID, worker: peer, agent: agent,
                deadline: now &+ UInt64(timeoutMs) * 1_000_000, round: round, session: request.sessionID,
                progress: request.progress), leasing: leased)
        return [
            .toWorker(
                peer,
                .turn(
                    TurnRequest(
                        turnID: turnID, roundID: request.roundID, sessionID: request.sessionID, deadlineMs: timeoutMs,
                        message: request.message, leased: leased)))
        ]
    }

    /// The client gave up on its ASK (Ctrl-C): the agent is told to stop the turn, and the turn's running
    /// invocations are cancelled (CANCEL to their workers) and answered `cancelled`. The agent's TURNEND
    /// still answers the client. An ASK the bus does not hold (already ended) is ignored.
    public mutating func handleCancel(requestID: String, from client: PeerID, now: UInt64) -> [CoordinatorAction] {
        guard let (turnID, entry) = turns.turn(client: client, requestID: requestID) else {
            // Not an ASK: a REQUEST or a ROUND of this client (CoordinatorState+Cancel).
            return cancelWait(requestID: Array(requestID.utf8), from: client, now: now)
        }
        return cancelTurn(turnID, entry, now: now)
    }

    /// The turn stops on its agent, and its round's running invocations are cancelled and answered.
    mutating func cancelTurn(_ turnID: String, _ entry: PendingQueries.Entry, now: UInt64) -> [CoordinatorAction] {
        // A call of the turn may still be on its way from the agent: it is refused when it comes.
        turns.markCancelled(round: entry.round)
        // The calls that waited for the round are the turn's own: refused now, as cancelled.
        var actions = endLease(of: entry.round, turnID: turnID, now: now)
        actions.append(.toWorker(entry.worker, .cancel(invocationID: turnID)))
        let cancelled = Self.cancelledError("the turn that made this call was cancelled", .client)
        for running in requests.answerRunning(where: { $0.roundID == entry.round }) {
            actions += sendCancel(running, reason: .client, now: now)
            actions += fail(running.request, cancelled, agent: workers[running.worker]?.name ?? "", now: now)
        }
        // Calls that wait for a slot or for their next attempt would otherwise still run.
        let round = entry.round
        for (_, request) in requests.removeUnstarted(where: { $0.phase.waitsToRun && $0.request.roundID == round }) {
            actions += cancelledEvent(request, agent: "", reason: .client)
            actions += fail(request, cancelled, agent: "", executed: false, now: now)
        }
        return actions
    }

    /// A turn's state: kept as the agent's state and published, every one (never coalesced); and to the
    /// client, when it follows the turn.
    mutating func noteTurnState(_ state: AgentState, _ turn: TurnRef, from peer: PeerID) -> [CoordinatorAction] {
        guard let agent = workers.update(peer, { worker -> String in
            worker.state = state
            return worker.name
        })
        else { return [] }
        var actions: [CoordinatorAction] = [.publish(.turnState(agent: agent, state: state, turn: turn))]
        if let entry = turns.turn(turn.turn, of: peer), entry.progress {
            actions.append(
                .toClient(entry.client, .progress(requestID: entry.requestID, agent: agent, .state(state, parameters: turn.parameters))))
        }
        return actions
    }

    /// STEP: a call of the turn ended; on the feed, and to the client when it follows the turn.
    func noteStep(_ turnID: String, _ call: TurnCall, from peer: PeerID) -> [CoordinatorAction] {
        guard let entry = turns.turn(turnID, of: peer) else { return [] }
        var actions: [CoordinatorAction] = [
            .publish(.turnCall(agent: entry.agent, turn: TurnRef(session: entry.session, turn: turnID), call: call))
        ]
        if entry.progress {
            actions.append(.toClient(entry.client, .progress(requestID: entry.requestID, agent: entry.agent, .call(call))))
        }
        return actions
    }

    /// A piece of a turn's reply: to the client that asked, and on the feed.
    func relayStream(_ turnID: String, _ text: String, from peer: PeerID) -> [CoordinatorAction] {
        guard let entry = turns.turn(turnID, of: peer) else { return [] }
        return [
            .toClient(entry.client, .stream(requestID: entry.requestID, text: text)),
            .publish(.turnStream(agent: entry.agent, turn: turnID, text: text)),
        ]
    }

    /// TURNEND: relayed to the client that asked; a late or foreign one is dropped.
    mutating func relayTurnEnd(
        _ turnID: String, _ answer: RelayedAnswer, from peer: PeerID, now: UInt64
    ) -> [CoordinatorAction] {
        guard let entry = turns.answered(turnID, by: peer) else { return [] }
        return [.toClient(entry.client, .relayedTurn(requestID: entry.requestID, agent: entry.agent, answer))]
            + turnEnded(turnID, entry, now: now)
    }

    /// Turns their agent will never end: it left, or their time ran out.
    mutating func failTurns(
        _ entries: [(id: String, entry: PendingQueries.Entry)], now: UInt64,
        _ error: (PendingQueries.Entry) -> SkillbusError
    ) -> [CoordinatorAction] {
        var actions: [CoordinatorAction] = []
        for (turnID, entry) in entries {
            actions.append(
                .toClient(entry.client, .turn(requestID: entry.requestID, agent: entry.agent, .error(error(entry)))))
            actions += turnEnded(turnID, entry, now: now)
        }
        return actions
    }

    /// What a turn held goes with it: its round, and calls it never reported ended.
    private mutating func turnEnded(_ turnID: String, _ entry: PendingQueries.Entry, now: UInt64) -> [CoordinatorAction] {
        turns.turnEnded(round: entry.round, now: now)
        let unreported = SkillbusError(.agentLost, "turn \(turnID) ended before it said how this call ended")
        return dropClaims(where: { $0.turnID == turnID && $0.worker == entry.worker }, unreported, now: now)
            + endLease(of: entry.round, turnID: turnID, now: now)
    }
}
