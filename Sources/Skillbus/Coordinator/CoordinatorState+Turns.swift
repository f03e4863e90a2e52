/// Turns through the bus: ASK handed to an agent with a planner (named, the session's, or the least
/// loaded), its states published as they happen, and its TURNEND relayed to the client that asked.
extension CoordinatorState {
    public mutating func handleAsk(_ request: AskRequest, from client: PeerID, now: UInt64) -> [CoordinatorAction] {
        func refuse(_ error: SkillbusError) -> [CoordinatorAction] {
            [.toClient(client, .turn(requestID: request.requestID, agent: request.agent, .error(error)))]
        }
        let session = Array(request.sessionID.utf8)
        let peer: PeerID
        switch turnTaker(for: AgentTarget(request.agent), session: session, now: now) {
        case .success(let taker): peer = taker
        case .failure(let error): return refuse(error)
        }
        let agent = workers[peer]?.name ?? ""
        let role = workers[peer]?.registration.profile.role
        let round = Array(request.roundID.utf8)
        let timeoutMs = request.timeoutMs ?? settings.defaultTimeoutMs
        var deadline = now &+ UInt64(timeoutMs) * 1_000_000
        var standing = TurnTable.Standing(agent: agent, message: request.message, parent: nil, depth: 0)
        if !request.parentTurnID.isEmpty {
            switch nesting(
                under: request.parentTurnID, agent: agent, message: request.message, round: round,
                session: request.sessionID)
            {
            case .success(let nested):
                standing = nested.standing
                deadline = min(deadline, nested.deadline)
            case .failure(let error):
                return refuse(error)
            }
        }
        recordTurn(session, agent: agent, role: role, nested: standing.parent != nil, now: now)
        return startTurn(
            .init(
                client: client, requestID: request.requestID, worker: peer, agent: agent, deadline: deadline,
                round: round, session: request.sessionID, progress: request.progress),
            standing: standing, message: request.message, now: now
        ).actions
    }

    /// Sends the turn to its agent; a nested one is announced on the feed as its parent's delegation.
    mutating func startTurn(
        _ entry: PendingQueries.Entry, standing: TurnTable.Standing, message: String, handoff: TeamContext.Handoff? = nil,
        leasing: Bool? = nil, now: UInt64
    ) -> (turnID: String, actions: [CoordinatorAction]) {
        let leased = leasing ?? mayLease(entry.round)
        let turnID = turns.start(entry, leasing: leased, standing: standing)
        var team: TeamContext?
        if standing.parent != nil || handoff != nil {
            team = TeamContext(
                parentTurnID: standing.parent, caller: standing.parent.flatMap { turns.standing(of: $0)?.agent },
                depth: standing.depth, handoff: handoff)
        }
        let deadlineMs = Int(max(1, (entry.deadline &- min(now, entry.deadline)) / 1_000_000))
        var actions: [CoordinatorAction] = [
            .toWorker(
                entry.worker,
                .turn(
                    TurnRequest(
                        turnID: turnID, roundID: String(decoding: entry.round, as: UTF8.self), sessionID: entry.session,
                        deadlineMs: deadlineMs, message: message, leased: leased, team: team)))
        ]
        if handoff == nil, let parent = standing.parent, let caller = turns.standing(of: parent) {
            actions.append(
                .publish(
                    .turnDelegated(
                        agent: caller.agent, turn: TurnRef(session: entry.session, turn: parent),
                        round: String(decoding: entry.round, as: UTF8.self), to: entry.agent,
                        role: workers[entry.worker]?.registration.profile.role, message: message, child: turnID)))
        }
        return (turnID, actions)
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
        // Every turn nested under it stops too; each one's TURNEND still answers the agent that asked for it.
        var actions: [CoordinatorAction] = turns.descendants(of: turnID).compactMap { nested in
            turns.turn(nested).map { .toWorker($0.worker, .cancel(invocationID: nested)) }
        }
        // A nested turn shares its round with the turns around it: only it stops (its agent cancels its calls).
        if turns.standing(of: turnID)?.parent != nil {
            return actions + [.toWorker(entry.worker, .cancel(invocationID: turnID))]
        }
        // A call of the turn may still be on its way from the agent: it is refused when it comes.
        turns.markCancelled(round: entry.round)
        // The calls that waited for the round are the turn's own: refused now, as cancelled.
        actions += endLease(of: entry.round, turnID: turnID, now: now)
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
        turns.countReport(of: turn.turn, from: peer, step: false)
        var turn = turn
        if let standing = turns.reporting(turn.turn, of: peer)?.standing, let parent = standing.parent {
            turn.parent = parent
            turn.depth = standing.depth
        }
        var actions: [CoordinatorAction] = [.publish(.turnState(agent: agent, state: state, turn: turn))]
        if let follower = follower(of: turn.turn, on: peer) {
            let progress = TurnProgress.state(state, parameters: turn.parameters)
            actions.append(
                .toClient(
                    follower.client,
                    .progress(
                        requestID: follower.requestID, agent: agent,
                        follower.depth > 0 ? .nested(depth: follower.depth, progress) : progress)))
        }
        return actions
    }

    /// Who follows turn `turnID` as it runs: the client of its ASK when it asked for progress, or, for a nested
    /// turn, the client of the outermost turn above it when that one did (and the depth to show it at).
    func follower(of turnID: String, on peer: PeerID) -> (client: PeerID, requestID: String, depth: Int)? {
        guard let entry = turns.turn(turnID, of: peer) else { return nil }
        guard let standing = turns.standing(of: turnID), standing.parent != nil else {
            return entry.progress ? (entry.client, entry.requestID, 0) : nil
        }
        guard let outermost = turns.ancestry(of: turnID).last, let root = turns.turn(outermost.id), root.progress,
            root.roundStep == nil
        else { return nil }
        return (root.client, root.requestID, standing.depth)
    }

    /// STEP: a call of the turn ended; on the feed, and to the client when it follows the turn.
    mutating func noteStep(_ turnID: String, _ call: TurnCall, from peer: PeerID) -> [CoordinatorAction] {
        guard let entry = turns.reporting(turnID, of: peer)?.entry else { return [] }
        turns.countReport(of: turnID, from: peer, step: true)
        var actions: [CoordinatorAction] = [
            .publish(.turnCall(agent: entry.agent, turn: TurnRef(session: entry.session, turn: turnID), call: call))
        ]
        if let follower = follower(of: turnID, on: peer) {
            let progress = TurnProgress.call(call)
            actions.append(
                .toClient(
                    follower.client,
                    .progress(
                        requestID: follower.requestID, agent: entry.agent,
                        follower.depth > 0 ? .nested(depth: follower.depth, progress) : progress)))
        }
        return actions
    }

    /// A piece of a turn's reply: to the client that asked, and on the feed.
    func relayStream(_ turnID: String, _ text: String, from peer: PeerID) -> [CoordinatorAction] {
        guard let entry = turns.turn(turnID, of: peer) else { return [] }
        // A team round's turn has no client to stream to (CoordinatorState+TeamRounds).
        let toClient: [CoordinatorAction] =
            entry.roundStep == nil ? [.toClient(entry.client, .stream(requestID: entry.requestID, text: text))] : []
        return toClient + [.publish(.turnStream(agent: entry.agent, turn: turnID, text: text))]
    }

    /// TURNEND: relayed to the client that asked; a late or foreign one is dropped.
    mutating func relayTurnEnd(
        _ turnID: String, _ answer: RelayedAnswer, from peer: PeerID, now: UInt64
    ) -> [CoordinatorAction] {
        guard let entry = turns.answered(turnID, by: peer) else { return [] }
        if answer.status == .error, (try? JSONValue(parsing: answer.body))?["code"] == "planner_unavailable" {
            turns.plannerDown(peer, now: now)
        }
        if entry.roundStep != nil { return turnEnded(turnID, entry, now: now) + askEnded(entry, answer, now: now) }
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
            if entry.roundStep != nil {
                actions += turnEnded(turnID, entry, now: now) + askEnded(entry, .error(error(entry)), now: now)
                continue
            }
            actions.append(
                .toClient(entry.client, .turn(requestID: entry.requestID, agent: entry.agent, .error(error(entry)))))
            actions += turnEnded(turnID, entry, now: now)
        }
        return actions
    }

    /// What a turn held goes with it: its round, and calls it never reported ended.
    mutating func turnEnded(_ turnID: String, _ entry: PendingQueries.Entry, now: UInt64) -> [CoordinatorAction] {
        turns.turnEnded(round: entry.round, now: now)
        let unreported = SkillbusError(.agentLost, "turn \(turnID) ended before it said how this call ended")
        return dropClaims(where: { $0.turnID == turnID && $0.worker == entry.worker }, unreported, now: now)
            + endLease(of: entry.round, turnID: turnID, now: now)
    }
}
