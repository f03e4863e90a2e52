/// Retries (PROTOCOL §4.13). A failed attempt whose failure is retryable for its skill (§5.2.1) goes back
/// to the bus after a backoff — on another agent when one is free — while the skill's policy (or the
/// round's `retries`) allows more attempts and the deadline leaves time. Until the last attempt, nobody
/// waiting for it hears anything; single-flight keeps its joiners attached to it. A retryable failure is
/// never kept as the answer for identical invocations, even when it is the last one.
extension CoordinatorState {
    /// When the loop must call `fireTimers` next, besides its regular tick: the next retry due, or while
    /// requests wait, the next token of an empty rate-limit bucket (PROTOCOL §4.15). A mutating getter: the
    /// loop reads it twice a pass, and a plain getter of its `state` copied the whole state to do so (every
    /// table retained and released: 2% of the loop's time).
    public var nextTimer: UInt64? {
        mutating get {
            guard rateLimiter.isActive, requests.queuedCount > 0, let token = rateLimiter.nextToken else {
                return requests.nextDue
            }
            return min(requests.nextDue ?? token, token)
        }
    }

    /// Attempts whose backoff is over go on their way, and requests that waited for a rate limit's token.
    /// The loop calls it when `nextTimer` comes, so that neither is up to a tick late.
    public mutating func fireTimers(now: UInt64) -> [CoordinatorAction] {
        var actions = dispatchRateLimited(now: now)
        guard let due = requests.nextDue, due <= now else { return actions }
        for request in requests.removeDue(now: now) { actions += route(request, now: now) }
        return actions
    }

    /// The descriptor that decides about retries for `skill`, when it declares anything about them.
    /// A worker that is being removed has taken the skill out of the registry already: its own copy counts.
    func retryDescriptor(of skill: String) -> SkillDescriptor? {
        guard let descriptor = descriptors.descriptor(of: skill, in: ledger.registry),
            descriptor.idempotent || descriptor.retry != nil
        else { return nil }
        return descriptor
    }

    /// What `reply` does with an error outcome: `retry` the actions that queue the next attempt, or nil when
    /// this failure is the answer; `keep` whether single-flight may keep it for identical invocations.
    mutating func retryDecision(
        _ request: Request, agent: [UInt8], payload: [UInt8], now: UInt64
    ) -> (retry: [CoordinatorAction]?, keep: Bool) {
        guard let descriptor = retryDescriptor(of: request.skill) else { return (nil, true) }
        let error = SkillbusError(json: (try? JSONValue(parsing: payload)) ?? .null)
        guard descriptor.isRetryable(error.code.rawValue) else { return (nil, true) }
        return (retry(request, error, descriptor, agent: agent, now: now), false)
    }

    /// Queues the next attempt of `request`, or nil when none may follow.
    private mutating func retry(
        _ request: Request, _ error: SkillbusError, _ descriptor: SkillDescriptor, agent: [UInt8], now: UInt64
    ) -> [CoordinatorAction]? {
        let policy = descriptor.retry ?? RetryPolicy()
        let attempts: Int
        if let retries = request.retries {
            attempts = retries + 1
        } else {
            guard descriptor.retry != nil else { return nil }  // idempotent but not opted in
            attempts = policy.attempts
        }
        guard request.attempt < attempts else { return nil }
        var next = request
        if let target = request.target {
            if isFanout(request) {
                // A fan-out's invocation runs on its agent or nowhere.
                guard workers[target] != nil else { return nil }
            } else {
                next.target = nil  // the session's agent: routing looks again
            }
        }
        // Nobody to try again on: the failure stands, unless the skill retries that too.
        guard workers.offers(request.skill) || descriptor.isRetryable(SkillbusError.Code.unknownSkill.rawValue) else {
            return nil
        }
        let wait = policy.backoffNanos(retry: request.attempt, random: requests.nextJitter())
        let due = now &+ wait
        guard due < request.deadline else { return nil }
        next.attempt += 1
        next.attemptDeadline = 0
        let name = String(decoding: agent, as: UTF8.self)
        if !name.isEmpty, !next.avoid.contains(name) { next.avoid.append(name) }
        recordAttempt(request, status: .error, agent: agent, error: error, now: now)
        requests.backOff(next, until: due)
        return retryingEvent(request, agent: name, error: error, backoffMicros: Int(wait / 1000))
    }

    func isFanout(_ request: Request) -> Bool {
        guard case .step(let round, let index) = request.origin, let run = rounds[round],
            run.invocations.indices.contains(index)
        else { return false }
        return run.invocations[index].target != nil
    }

    func retryingEvent(
        _ request: Request, agent: String, error: SkillbusError, backoffMicros: Int
    ) -> [CoordinatorAction] {
        switch request.origin {
        case .step(let round, let index):
            guard let run = rounds[round], run.invocations.indices.contains(index) else { return [] }
            return [
                .publish(
                    .invocationRetrying(
                        round: run.roundText, invocation: run.invocations[index].id, skill: request.skill,
                        agent: agent, attempt: request.attempt, error: error, backoffMicros: backoffMicros))
            ]
        case .client:
            guard publishesRequestEvents else { return [] }
            return [
                .publish(
                    .requestRetrying(
                        round: request.roundText, request: request.requestText, skill: request.skill, agent: agent,
                        attempt: request.attempt, error: error, backoffMicros: backoffMicros))
            ]
        case .claim, .offer:
            return []
        }
    }

    /// Writes one attempt into the round document of the invocation (a step, or a sub-call REQUEST).
    mutating func recordAttempt(
        _ request: Request, status: InvocationStatus, agent: [UInt8], error: SkillbusError?, now: UInt64
    ) {
        guard rounds.runningCount > 0 else { return }
        let started = request.attemptStarted != 0 ? request.attemptStarted : request.accepted
        let attempt = RoundDocument.Attempt(
            agent: agent.isEmpty ? nil : String(decoding: agent, as: UTF8.self), status: status,
            durationMs: Double((now &- started) / 1000) / 1000, error: error)
        switch request.origin {
        case .step(let round, let index):
            rounds.update(round) { run in
                guard run.invocations.indices.contains(index), !run.invocations[index].status.isDone else { return }
                run.invocations[index].record.attempts.append(attempt)
            }
        case .client(_, let requestID):
            rounds.update(ByteKey(request.roundID)) { run in
                let index = run.invocations.firstIndex { $0.subCallRequest == requestID && !$0.status.isDone }
                if let index { run.invocations[index].record.attempts.append(attempt) }
            }
        case .claim, .offer:
            break
        }
    }

    /// The last attempt of a retried invocation, as it ended.
    mutating func recordLastAttempt(
        _ request: Request, status: ReplyStatus, agent: [UInt8], payload: [UInt8], now: UInt64
    ) {
        guard status == .error else { return recordAttempt(request, status: .ok, agent: agent, error: nil, now: now) }
        let error = SkillbusError(json: (try? JSONValue(parsing: payload)) ?? .null)
        recordAttempt(
            request, status: error.code == .cancelled ? .cancelled : .error, agent: agent, error: error, now: now)
    }
}
