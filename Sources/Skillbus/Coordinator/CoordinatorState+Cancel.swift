/// Cancellation (PROTOCOL §3.10). A client gives up on one of its REQUESTs or ROUNDs (CANCEL with its
/// request id; an ASK is CoordinatorState+Turns), or on everything of a round (CANCEL with a round id).
/// Whoever gives up is answered `cancelled` at once. An execution that identical invocations share
/// (single-flight) is stopped only when none of them still wants it: until then the ones that gave up are
/// `withdrawn`, and its outcome passes them by. Stopping means CANCEL to its agent, or out of its queue;
/// a stopped execution's outcome is not kept, so an identical invocation later runs again.
extension CoordinatorState {
    /// Why the bus stopped an invocation, as the feed and the error's `details.reason` say.
    enum CancelReason: String, Sendable {
        case client
        case deadline
        case lostRace = "lost race"
    }

    /// What a CANCEL naming a round stopped: the CANCELLED answer.
    struct CancelTally {
        var requests = 0
        var rounds = 0
        var turns = 0
        /// Executions stopped: CANCEL sent to their agent, or taken out of a queue.
        var stopped = 0

        func json(round: String) -> JSONValue {
            [
                "round": .string(round), "requests": .number(Double(requests)), "rounds": .number(Double(rounds)),
                "turns": .number(Double(turns)), "stopped": .number(Double(stopped)),
            ]
        }
    }

    static func cancelledError(_ message: String, _ reason: CancelReason) -> SkillbusError {
        SkillbusError(.cancelled, message, details: ["reason": .string(reason.rawValue)])
    }

    static func cancelledByItsClient(round: String) -> SkillbusError {
        cancelledError("round '\(round)' was cancelled by its client", .client)
    }

    /// To a client that gives up on a round others still wait for.
    static func stoppedWaiting(round: String, others: Int) -> SkillbusError {
        cancelledError("this client stopped waiting; round '\(round)' goes on for \(others) other(s)", .client)
    }

    // MARK: Clients

    /// CANCEL with a request id that is no ASK: the client's REQUEST, or its ROUND.
    mutating func cancelWait(requestID: [UInt8], from client: PeerID, now: UInt64) -> [CoordinatorAction] {
        var tally = CancelTally()
        let text = String(decoding: requestID, as: UTF8.self)
        let error = Self.cancelledError("request '\(text)' was cancelled by its client", .client)
        if let actions = withdraw(.client(client, requestID: requestID), error, reason: .client, now: now, &tally) {
            return actions
        }
        if let actions = cancelUnstarted(client: client, requestID: requestID, error, now: now, &tally) {
            return actions
        }
        guard let key = rounds.running(client: client, requestID: requestID), let run = rounds[key] else { return [] }
        guard run.clients.count > 1 else {
            return cancelRun(key, Self.cancelledByItsClient(round: run.roundText), now: now, &tally)
        }
        // Others wait for the same round: it goes on for them, and this client's wait ends here.
        rounds.update(key) { $0.clients.removeAll { $0.client == client && $0.requestID == requestID } }
        var document = roundDocument(run, now: now)
        document.status = .error
        document.error = Self.stoppedWaiting(round: run.roundText, others: run.clients.count - 1)
        return [.toClient(client, .round(requestID: requestID, roundID: run.id, document: document.serialized()))]
    }

    /// CANCEL with a round id: the ROUND, every REQUEST and the turn of that round, whoever sent them.
    public mutating func handleCancelRound(
        requestID: String, roundID: String, from client: PeerID, now: UInt64
    ) -> [CoordinatorAction] {
        let round = Array(roundID.utf8)
        let key = ByteKey(round)
        var tally = CancelTally()
        let error = Self.cancelledError("round '\(roundID)' was cancelled by a client", .client)
        // The ROUND first: stopped, so that nothing of it starts while the rest goes.
        var actions = rounds.isRunning(key) ? cancelRun(key, error, now: now, &tally) : []
        // One that has not started yet (it waits for the journal, or in the startup grace) never will.
        actions += cancelUnstarted(round: round, error, now: now, &tally)
        var waiters: [Waiter] = []
        for key in requests.keys(where: { $0.isAwaited && $0.request.roundID == round }) {
            let origin = requests[key].request.origin
            if case .client = origin, !waiters.contains(origin) { waiters.append(origin) }
        }
        waiters += requests.waiters.joined(round: round)
        for waiter in waiters {
            actions += withdraw(waiter, error, reason: .client, now: now, &tally) ?? []
        }
        // REQUESTs of the round parked behind a turn's lease on it.
        actions += dropParked(error, now: now, &tally) { $0.wait.isLease && $0.request.$roundID == round }
        // A team round's turns stopped with it (cancelRun); a client's turn in the round stops here.
        if let (turnID, entry) = turns.turn(inRound: round), entry.roundStep == nil {
            tally.turns += 1
            actions += cancelTurn(turnID, entry, now: now)
        }
        actions.append(.toClient(client, .cancelled(requestID: requestID, summary: tally.json(round: roundID))))
        return actions
    }

    // MARK: One waiter

    /// `waiter` gives up: it is answered with `error` now, and the execution it waits for is stopped unless
    /// another waiter still wants it. Nil when the bus holds nothing `waiter` waits for.
    mutating func withdraw(
        _ waiter: Waiter, _ error: SkillbusError, reason: CancelReason, now: UInt64, _ tally: inout CancelTally
    ) -> [CoordinatorAction]? {
        let started = requests.key(origin: waiter)
        if case .client = waiter, started != nil || requests.waiters.joined(waiter) != nil {
            tally.requests += 1
        }
        // It started an execution: running, waiting for a slot or its next attempt, or for an approval.
        if let key = started {
            let request = requests[key].request
            let agent = agentName(of: key)
            if let id = request.shared, isWanted(id, besides: waiter) {
                let actions = answerCancelled(waiter, request, error, agent: agent, now: now)
                requests.waiters.withdraw(waiter)
                return actions
            }
            // Stopped first, so that the feed reads: cancelled, then done.
            return stop(key, reason: reason, now: now, &tally)
                + answerCancelled(waiter, request, error, agent: agent, now: now)
        }
        // It joined an identical execution.
        if let id = joinedExecution(of: waiter) {
            guard let key = requests.key(execution: id) else {
                // A call a turn runs itself (CLAIM): the bus cannot stop it, but this waiter is done with it.
                guard case .client(let client, let requestID) = waiter, let joined = requests.waiters.joined(waiter)
                else { return nil }
                requests.waiters.answered(waiter)
                requests.waiters.withdraw(waiter)
                let outcome = Outcome(status: .error, agent: [], payload: error.json.serialized(), durationMicros: 0)
                return [.toClient(client, outcome.reply(requestID: requestID, roundID: joined.round))]
            }
            let request = requests[key].request
            var actions = answerCancelled(waiter, request, error, agent: agentName(of: key), now: now)
            requests.waiters.withdraw(waiter)
            if !requests.waiters.hasWithdrawn(request.origin) || isWanted(id, besides: waiter) { return actions }
            requests.waiters.forget(request.origin)
            actions += stop(key, reason: reason, now: now, &tally)
            return actions
        }
        // It waits behind a turn's lease on its round.
        guard case .client = waiter else { return nil }
        let parked = dropParked(error, now: now, &tally) { parked in
            parked.wait.isLease && .client(parked.client, requestID: parked.request.$requestID) == waiter
        }
        return parked.isEmpty ? nil : parked
    }

    /// Whether a waiter of execution `id` other than `waiter` has not given up.
    func isWanted(_ id: SingleFlight.ExecutionID, besides waiter: Waiter) -> Bool {
        singleFlight.joiners(of: id).contains { $0 != waiter && !requests.waiters.hasWithdrawn($0) }
    }

    func joinedExecution(of waiter: Waiter) -> SingleFlight.ExecutionID? {
        switch waiter {
        case .client: return requests.waiters.joined(waiter)?.execution
        case .step(let round, let index):
            guard let run = rounds[round], run.invocations.indices.contains(index),
                run.invocations[index].status == .running
            else { return nil }
            return run.invocations[index].joined
        case .claim, .offer: return nil
        }
    }

    /// The agent running the entry, if it runs.
    func agentName(of key: RequestTable.Key) -> [UInt8] {
        guard case .running(_, let worker, _, _) = requests[key].phase else { return [] }
        return workers[worker]?.nameFrame ?? []
    }

    /// The cancelled outcome, to `waiter` alone: a REPLY (and `request.done`), or its round's step ends.
    mutating func answerCancelled(
        _ waiter: Waiter, _ request: Request, _ error: SkillbusError, agent: [UInt8], now: UInt64
    ) -> [CoordinatorAction] {
        let outcome = Outcome(
            status: .error, agent: agent, payload: error.json.serialized(),
            durationMicros: Int((now &- request.accepted) / 1000))
        var actions = deliver(outcome, to: [waiter], roundID: request.roundID, origin: waiter, now: now)
        if publishesRequestEvents, case .client(_, let requestID) = waiter {
            actions.append(
                .publish(
                    .requestDone(
                        round: request.roundText, request: String(decoding: requestID, as: UTF8.self),
                        skill: request.skill, agent: String(decoding: agent, as: UTF8.self), status: .error,
                        durationMicros: outcome.durationMicros, payload: outcome.payload)))
        }
        return actions
    }

    /// Stops an execution nobody wants any more. Its outcome is not kept; whoever had joined it gave up
    /// already and was answered then.
    mutating func stop(
        _ key: RequestTable.Key, reason: CancelReason, now: UInt64, _ tally: inout CancelTally
    ) -> [CoordinatorAction] {
        var actions: [CoordinatorAction] = []
        let request: Request
        switch requests[key].phase {
        case .running:
            guard let running = requests.answer(key) else {
                preconditionFailure("a running entry found by its waiter was answered: answered ones are not found")
            }
            request = running.request
            actions += sendCancel(running, reason: reason, now: now)
        case .confirming(let number, _, _):
            request = requests.remove(key)
            let id = RequestTable.confirmationID(number)
            actions.append(.publish(.confirmationDone(confirmation: id, approved: false)))
        case .queued, .backingOff:
            request = requests.remove(key)
            actions += cancelledEvent(request, agent: "", reason: reason)
        }
        tally.stopped += 1
        guard let id = request.shared else { return actions }
        let outcome = Outcome(
            status: .error, agent: [], payload: Self.cancelledError("stopped", reason).json.serialized(),
            durationMicros: Int((now &- request.accepted) / 1000))
        // Everyone who joined has given up; should one not have, it is answered like the others.
        actions += deliver(
            outcome, to: singleFlight.finish(id, outcome: nil, now: now), roundID: request.roundID,
            origin: request.origin, now: now)
        return actions
    }

    /// CANCEL to the agent running `entry` (already answered), announced on the feed and watched: an agent
    /// that does not report within the grace period is said to ignore it.
    mutating func sendCancel(
        _ running: RequestTable.Running, reason: CancelReason, now: UInt64
    ) -> [CoordinatorAction] {
        requests.watchCancel(running, at: now)
        return [.toWorker(running.worker, .cancel(invocationID: running.invocationID))]
            + cancelledEvent(running.request, agent: workers[running.worker]?.name ?? "", reason: reason)
    }

    func cancelledEvent(_ request: Request, agent: String, reason: CancelReason) -> [CoordinatorAction] {
        switch request.origin {
        case .step(let round, let index):
            guard let run = rounds[round], run.invocations.indices.contains(index) else { return [] }
            return [
                .publish(
                    .invocationCancelled(
                        round: run.roundText, invocation: run.invocations[index].id, agent: agent,
                        reason: reason.rawValue))
            ]
        case .client:
            guard publishesRequestEvents else { return [] }
            return [
                .publish(
                    .requestCancelled(
                        round: request.roundText, request: request.requestText, skill: request.skill, agent: agent,
                        reason: reason.rawValue))
            ]
        case .claim, .offer:
            return []
        }
    }

    /// CANCELs the grace period has passed for whose RESULT has not come: reported once each.
    mutating func reportIgnoredCancels(now: UInt64) -> [CoordinatorAction] {
        let grace = UInt64(settings.cancelGraceMs) * 1_000_000
        var actions: [CoordinatorAction] = []
        for (entry, at) in requests.removeIgnoredCancels(now: now, grace: grace) {
            let request = entry.request
            var id = request.requestText
            if case .step(let round, let index) = request.origin, let run = rounds[round],
                run.invocations.indices.contains(index)
            {
                id = run.invocations[index].id
            }
            actions.append(
                .publish(
                    .cancelIgnored(
                        round: request.roundText, request: id, skill: request.skill,
                        agent: workers[entry.worker]?.name ?? "", invocation: entry.invocationID,
                        waitedMs: Int((now &- at) / 1_000_000))))
        }
        return actions
    }

    // MARK: Rounds and leases

    /// A ROUND stops: no step starts any more, and each running one gives up (its execution stops unless an
    /// identical REQUEST still wants it). The document says `cancelled` and is not kept.
    mutating func cancelRun(
        _ key: ByteKey, _ error: SkillbusError, now: UInt64, _ tally: inout CancelTally
    ) -> [CoordinatorAction] {
        guard let run = rounds[key] else { return [] }
        rounds.updateRunning(key) { run in
            run.stopped = true
            run.cancelled = error
        }
        tally.rounds += 1
        let reason = (error.details?["reason"]?.stringValue).flatMap(CancelReason.init(rawValue:)) ?? .client
        let stepError = Self.cancelledError("the round was cancelled", reason)
        var actions: [CoordinatorAction] = []
        for index in run.invocations.indices where run.invocations[index].subCallRequest == nil {
            guard rounds[key]?.invocations[index].status == .running else { continue }
            // An ask of a team round is a turn: it stops on its agent.
            if run.invocations[index].ask != nil {
                tally.turns += 1
                actions += stopAsk(key, index, stepError, now: now)
                continue
            }
            actions += withdraw(.step(round: key, index: index), stepError, reason: reason, now: now, &tally) ?? []
        }
        return actions + advance(key, now: now)
    }
}
