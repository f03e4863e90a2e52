/// Routing: where an invocation goes (its target, the least loaded provider with a free slot, the
/// bounded wait queue, or `busy`), what the worker is told, and how the outcome reaches whoever waits.
extension CoordinatorState {
    /// Sends a request to its target (a fan-out's agent), or to the least loaded provider with a free
    /// slot; else it waits in the bounded queue, or is answered `busy`.
    mutating func route(_ request: Request, now: UInt64) -> [CoordinatorAction] {
        if needsConfirmation(request) { return holdForConfirmation(request, now: now) }
        var request = request
        // A session's context lives on the agent that served it last: go back there while it is alive and
        // offers the skill, busy or not. A fan-out's own target wins.
        if request.target == nil, !request.sessionID.isEmpty, let name = affinity.agent(of: request.sessionID),
            request.avoid.isEmpty || !request.avoid.contains(name),
            let peer = workers.peer(named: name), workers[peer]?.skills[request.skill] != nil
        {
            request.target = peer
        }
        if let target = request.target {
            guard let free = workers.canRun(target, skill: request.skill) else {
                return fail(
                    request, SkillbusError(.agentLost, "the agent left before its invocation started"), agent: "",
                    executed: false, now: now)
            }
            let limited = rateLimiter.isActive && !rateLimiter.ready(request, now: now)
            if free, !limited { return dispatch(request, to: target, now: now) }
            let reason = limited ? rateLimitReason(request, now: now) : "agent '\(workers[target]?.name ?? "")' is at capacity"
            if let refusal = queueRefusal(request, reason, now: now) { return refusal }
            requests.queue(request)
            return queuedEvent(request, rateLimited: limited)
        }
        var candidates = workers.providers(of: request.skill)
        if !request.avoid.isEmpty {
            // A retry goes to an agent an earlier attempt did not fail on, when there is one.
            let others = candidates.filter { peer in !request.avoid.contains(workers[peer]?.name ?? "") }
            if !others.isEmpty { candidates = others }
        }
        guard !candidates.isEmpty else {
            let offered = workers.offeredSkills
            let list =
                offered.isEmpty ? "no skills are offered right now" : "offered: " + offered.joined(separator: ", ")
            let error = SkillbusError(
                .unknownSkill, "no agent offers skill '\(request.skill)'; \(list)",
                details: ["skill": .string(request.skill), "offered": .array(offered.map { .string($0) })])
            return fail(request, error, agent: "", executed: false, now: now)
        }
        let limited = rateLimiter.isActive && !rateReady(request, now: now)
        if !limited, let worker = workers.pickProvider(candidates, skill: request.skill) {
            return dispatch(request, to: worker, now: now)
        }
        let reason =
            limited
            ? rateLimitReason(request, now: now)
            : "all \(candidates.count) agent(s) offering '\(request.skill)' are at capacity"
        if let refusal = queueRefusal(request, reason, now: now) { return refusal }
        requests.queue(request)
        return queuedEvent(request, rateLimited: limited)
    }

    /// `request.queued` for a client's request or a round's invocation (named by its id in the round), saying
    /// what it waits for.
    private func queuedEvent(_ request: Request, rateLimited: Bool) -> [CoordinatorAction] {
        guard publishesRequestEvents, let id = eventID(of: request) else { return [] }
        return [
            .publish(
                .requestQueued(
                    round: request.roundText, request: id, skill: request.skill, waiting: requests.queuedCount,
                    waitingFor: rateLimited ? "rateLimit" : "capacity"))
        ]
    }

    /// How the feed names a request: a client's by its request id, a round's invocation by its id in the round;
    /// nil for a call a turn runs itself.
    func eventID(of request: Request) -> String? {
        switch request.origin {
        case .client: return request.requestText
        case .step(let round, let index):
            guard let run = rounds[round], run.invocations.indices.contains(index) else { return nil }
            return run.invocations[index].id
        case .claim, .offer: return nil
        }
    }

    /// Which rate limit holds `request` back, in words.
    func rateLimitReason(_ request: Request, now: UInt64) -> String {
        switch rateLimiter.holdingBack(request, now: now) {
        case .skill(let limit)?: "'\(request.skill)' is over its rate limit (\(limit))"
        case .client(let limit)?: "this client is over its rate limit (\(limit))"
        case nil: "'\(request.skill)' waits behind others for its rate limit"
        }
    }

    /// Whether a rate limit lets `request` go now: a token is there, and no request of a rate-limited skill
    /// waits for one before it (it would take the token they wait for).
    private func rateReady(_ request: Request, now: UInt64) -> Bool {
        guard rateLimiter.ready(request, now: now) else { return false }
        return !rateLimiter.hasLimit(skill: request.skill) || !requests.waiting.isWaiting(skill: request.skill)
    }

    /// `busy` when `request` may not wait: the queue is full, or its client holds its share of it already.
    private mutating func queueRefusal(_ request: Request, _ reason: String, now: UInt64) -> [CoordinatorAction]? {
        let message: String
        if requests.queuedCount >= settings.queueLimit {
            message = reason + " and the wait queue is full (\(settings.queueLimit) requests)"
        } else if let client = request.client, requests.waiting.count(of: client) >= settings.clientQueueLimit {
            message =
                reason + " and this client holds its share of the wait queue already (\(settings.clientQueueLimit) "
                + "of \(settings.queueLimit) requests)"
        } else {
            return nil
        }
        return fail(request, SkillbusError(.busy, message), agent: "", executed: false, now: now)
    }

    /// INVOKE to a worker with a free slot (the caller checked), and the feed event that says so.
    mutating func dispatch(_ request: Request, to peer: PeerID, now: UInt64) -> [CoordinatorAction] {
        var request = request
        request.attemptStarted = now
        request.attemptDeadline = attemptDeadline(of: request.skill, now: now)
        if rateLimiter.isActive { rateLimiter.take(request, now: now) }
        let invocationID = requests.startRunning(request, on: peer, workers: &workers)
        return invoke(request, invocationID, on: peer, now: now)
    }

    /// The same for a request the table holds queued.
    private mutating func dispatch(queued key: RequestTable.Key, to peer: PeerID, now: UInt64) -> [CoordinatorAction] {
        let attemptDeadline = attemptDeadline(of: requests[key].request.skill, now: now)
        let (invocationID, request) = requests.startRunning(
            key, on: peer, now: now, attemptDeadline: attemptDeadline, workers: &workers)
        if rateLimiter.isActive { rateLimiter.take(request, now: now) }
        return invoke(request, invocationID, on: peer, now: now)
    }

    /// When an attempt of `skill` starting now gives up by its own timeout (`attemptTimeoutMs`); 0: none.
    private func attemptDeadline(of skill: String, now: UInt64) -> UInt64 {
        guard let ms = descriptors.attemptTimeoutMs(of: skill) else { return 0 }
        return now &+ UInt64(ms) * 1_000_000
    }

    /// The INVOKE of a request that started running, and its feed event.
    private mutating func invoke(
        _ request: Request, _ invocationID: String, on peer: PeerID, now: UInt64
    ) -> [CoordinatorAction] {
        let agent = workers[peer]?.name ?? ""
        if !request.sessionID.isEmpty { affinity.record(request.sessionID, agent: agent) }
        noteServed(request.sessionID, agent: agent, role: nil, now: now)
        let ends = request.attemptEnds
        let remainingMs = ends > now ? Int((ends - now) / 1_000_000) : 0
        let invocation = Invocation(
            invocationID: invocationID, frames: request.roundID, request.sessionID, skill: request.skill,
            deadlineMs: max(1, remainingMs), parameters: request.parameters)
        if case .step(let roundKey, let index) = request.origin {
            guard publishesRoundEvents, let names = rounds.names(roundKey, invocation: index) else {
                return [.toWorker(peer, .invoke(invocation))]
            }
            return [
                .toWorker(peer, .invoke(invocation)),
                .publish(
                    .invocationDispatched(
                        round: names.round, invocation: names.invocation, skill: request.skill, agent: agent,
                        dispatch: invocationID)),
            ]
        }
        guard publishesRequestEvents else { return [.toWorker(peer, .invoke(invocation))] }
        return [
            .toWorker(peer, .invoke(invocation)),
            .publish(
                .requestDispatched(
                    round: request.roundText, request: request.requestText, skill: request.skill, agent: agent,
                    invocation: invocationID)),
        ]
    }

    /// Gives a worker with free slots the oldest requests waiting for it or for any of its skills.
    mutating func dispatchWaiting(to peer: PeerID, now: UInt64) -> [CoordinatorAction] {
        // Called after every RESULT: with nothing waiting, look no further.
        guard requests.queuedCount > 0 else { return [] }
        var actions: [CoordinatorAction] = []
        let promotion = UInt64(settings.priorityPromotionMs) * 1_000_000
        while let worker = workers[peer], worker.hasFreeSlot, let key = nextWaiting(for: worker, now: now, promotion) {
            // Its client has given up (the deadline the request carried passed while it waited): it never runs.
            guard requests[key].request.deadline > now else {
                let request = requests.remove(key)
                let error = SkillbusError(
                    .timeout, "'\(request.skill)' waited for a free slot past its \(request.timeoutMs) ms deadline")
                actions += fail(request, error, agent: "", executed: false, now: now)
                continue
            }
            actions += dispatch(queued: key, to: peer, now: now)
        }
        return actions
    }

    /// The queued request `worker` takes next; under rate limits, only one whose buckets hold a token.
    private func nextWaiting(for worker: Worker, now: UInt64, _ promotion: UInt64) -> RequestTable.Key? {
        guard rateLimiter.isActive else {
            return requests.nextQueued(for: worker, now: now, promotionNanos: promotion) { _ in true }
        }
        return requests.nextQueued(for: worker, now: now, promotionNanos: promotion) { rateLimiter.ready($0, now: now) }
    }

    /// Requests that waited for a rate limit's token go to every worker with a free slot.
    mutating func dispatchRateLimited(now: UInt64) -> [CoordinatorAction] {
        guard rateLimiter.isActive else { return [] }
        rateLimiter.refill(now: now)
        guard requests.queuedCount > 0 else { return [] }
        var actions: [CoordinatorAction] = []
        for worker in workers.all where worker.hasFreeSlot { actions += dispatchWaiting(to: worker.peer, now: now) }
        return actions
    }

    /// RESULT from a worker. An `ok` whose payload is no result form (PROTOCOL §5.5) is answered as the
    /// error `malformed_result`: the caller must never take garbage for a result.
    mutating func finish(
        _ invocationID: String, status: ReplyStatus, payload: [UInt8], from peer: PeerID, now: UInt64
    ) -> [CoordinatorAction] {
        // A result for an unknown or foreign invocation is late or bogus: drop it, keep serving.
        guard let entry = requests.finish(invocationID, from: peer, workers: &workers) else { return [] }
        var actions: [CoordinatorAction] = []
        let malformed = status == .ok ? SkillResult.problem(in: payload) : nil
        workers.update(peer) { worker in
            worker.results[entry.request.skill, default: ResultCounts()].record(malformed == nil ? status : .error)
        }
        if !entry.answered {
            let agent = workers[peer]?.nameFrame ?? []
            if let problem = malformed {
                let name = String(decoding: agent, as: UTF8.self)
                let error = SkillbusError(
                    .malformedResult,
                    "agent '\(name)' answered '\(entry.request.skill)' with an ok RESULT that is not a result form: "
                        + problem,
                    details: ["agent": .string(name)])
                actions = fail(entry.request, error, agent: name, now: now)
            } else {
                actions = reply(entry.request, status: status, agent: agent, payload: payload, now: now)
            }
        }
        actions += dispatchWaiting(to: peer, now: now)
        return actions
    }

    /// `executed`: whether the invocation reached an agent. Only then is the outcome kept for identical
    /// invocations of the round; one that never ran (unknown skill, busy) may be tried again.
    mutating func fail(
        _ request: Request, _ error: SkillbusError, agent: String, executed: Bool = true, now: UInt64
    ) -> [CoordinatorAction] {
        reply(
            request, status: .error, agent: Array(agent.utf8), payload: error.json.serialized(), executed: executed,
            now: now)
    }

    /// The outcome goes to the request's origin and to every identical invocation that joined it.
    mutating func reply(
        _ request: Request, status: ReplyStatus, agent: [UInt8], payload: [UInt8], executed: Bool = true, now: UInt64
    ) -> [CoordinatorAction] {
        var keep = executed
        if status == .error {
            // A retryable failure may be tried again (then nobody hears of it yet), and is never kept.
            let decision = retryDecision(request, agent: agent, payload: payload, now: now)
            if let retrying = decision.retry { return retrying }
            keep = keep && decision.keep
        }
        if request.attempt > 1 { recordLastAttempt(request, status: status, agent: agent, payload: payload, now: now) }
        let micros = Int((now &- request.accepted) / 1000)
        let outcome = Outcome(status: status, agent: agent, payload: payload, durationMicros: micros)
        if status == .ok, let key = request.cacheKey { storeInCache(key, request.skill, outcome, now: now) }
        let joiners = request.shared.map { singleFlight.finish($0, outcome: keep ? outcome : nil, now: now) } ?? []
        // A client that gave up was answered when it did (CoordinatorState+Cancel).
        let originWithdrawn = requests.waiters.hasWithdrawn(request.origin)
        var actions: [CoordinatorAction] = []
        deliver(outcome, to: request.origin, roundID: request.roundID, origin: request.origin, now: now, into: &actions)
        for joiner in joiners {
            deliver(outcome, to: joiner, roundID: request.roundID, origin: request.origin, now: now, into: &actions)
        }
        guard publishesRequestEvents, !originWithdrawn, case .client = request.origin else { return actions }
        actions.append(
            .publish(
                .requestDone(
                    round: request.roundText, request: request.requestText, skill: request.skill,
                    agent: String(decoding: agent, as: UTF8.self), status: status, durationMicros: micros,
                    payload: status == .error ? payload : [])))
        return actions
    }

    /// Hands an outcome to everyone who waits for it: a client gets REPLY, a round's step moves on.
    mutating func deliver(
        _ outcome: Outcome, to waiters: [Waiter], roundID: [UInt8], origin: Waiter, now: UInt64
    ) -> [CoordinatorAction] {
        var actions: [CoordinatorAction] = []
        for waiter in waiters {
            deliver(outcome, to: waiter, roundID: roundID, origin: origin, now: now, into: &actions)
        }
        return actions
    }

    /// The same for one waiter (a plain request's only one needs no array of waiters).
    mutating func deliver(
        _ outcome: Outcome, to waiter: Waiter, roundID: [UInt8], origin: Waiter, now: UInt64,
        into actions: inout [CoordinatorAction]
    ) {
        if requests.waiters.passBy(waiter) { return }
        switch waiter {
        case .client(let client, let requestID):
            requests.waiters.answered(waiter)
            actions.append(.toClient(client, outcome.reply(requestID: requestID, roundID: roundID)))
            if rounds.runningCount > 0 { noteSubCallDone(roundID: roundID, requestID: requestID, outcome) }
        case .step(let round, let index):
            actions.absorb(stepDone(round, index, outcome, deduplicated: waiter != origin, now: now))
        case .claim:
            break  // the agent that ran it has its outcome already
        case .offer(let worker, let turnID, let callID):
            actions.append(.toWorker(worker, .verdict(callID: callID, outcome.verdict)))
            if rounds.runningCount > 0 {
                noteSubCallDone(
                    roundID: roundID, requestID: Self.offerSubCallID(turnID: turnID, callID: callID), outcome)
            }
        }
    }

    /// An invocation identical to one of its round is not executed: a finished outcome is answered at
    /// once; a running one will answer it with the rest.
    func deduplicated(
        _ request: InvokeRequest, finished: (client: PeerID, outcome: Outcome)?
    ) -> [CoordinatorAction] {
        var actions: [CoordinatorAction] = []
        if let (client, outcome) = finished {
            actions.append(.toClient(client, outcome.reply(requestID: request.$requestID, roundID: request.$roundID)))
        }
        guard publishesRequestEvents else { return actions }
        actions.append(
            .publish(
                .requestDeduplicated(
                    round: request.roundID, request: request.requestID, skill: request.skill,
                    finished: finished != nil)))
        return actions
    }
}
