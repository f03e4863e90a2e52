/// The result cache across rounds (PROTOCOL §4.16): an invocation of a pure skill with a cache lifetime is
/// answered from the cache when an identical one (same skill, canonical parameters) ended `ok` within that
/// lifetime, in any round; else it runs, and its `ok` outcome is stored. Checked before single-flight.
extension CoordinatorState {
    /// A REQUEST answered from the cache, or nil: then `pending` carries the key its outcome is stored under.
    mutating func answerFromCache(
        _ request: InvokeRequest, _ pending: inout Request, lifetimeMs: Int, client: PeerID, inRound: Bool,
        now: UInt64
    ) -> [CoordinatorAction]? {
        guard settings.cacheBytesLimit > 0,
            let key = SingleFlight.canonicalKey(
                skill: request.skill, parameters: request.parameters,
                schema: { ledger.registry.skills[$0]?.descriptor.parameters })
        else { return nil }
        pending.cacheKey = key
        guard let stored = cache.lookup(key, now: now) else { return nil }
        let outcome = Outcome(status: .ok, agent: stored.agent, payload: stored.payload, durationMicros: 0)
        if inRound {
            noteSubCall(request, deduplicated: false)
            noteSubCallDone(roundID: request.$roundID, requestID: request.$requestID, outcome)
        }
        var actions: [CoordinatorAction] = [
            .toClient(client, outcome.reply(requestID: request.$requestID, roundID: request.$roundID))
        ]
        if publishesRequestEvents {
            actions.append(
                .publish(
                    .requestCached(
                        round: request.roundID, request: request.requestID, skill: request.skill,
                        agent: String(decoding: stored.agent, as: UTF8.self))))
        }
        return actions
    }

    /// A round's invocation answered from the cache, or nil (a miss, or `noCache`): then `request` carries
    /// the key its outcome is stored under. A fan-out's invocations (bound to their agents) never are.
    mutating func answerStepFromCache(
        _ roundKey: ByteKey, _ index: Int, _ request: inout Request, key: ByteKey?, noCache: Bool, now: UInt64
    ) -> [CoordinatorAction]? {
        guard descriptors.hasCacheLifetimes, settings.cacheBytesLimit > 0, request.target == nil,
            descriptors.cacheLifetimeMs(of: request.skill) != nil, let key
        else { return nil }
        request.cacheKey = key
        guard !noCache, let stored = cache.lookup(key, now: now) else { return nil }
        let outcome = Outcome(status: .ok, agent: stored.agent, payload: stored.payload, durationMicros: 0)
        let run = rounds.updateRunning(roundKey) { run in
            run.invocations[index].record.cached = true
            return run
        }
        let invocation = run.invocations[index]
        let event = FeedEvent.invocationCached(
            round: run.roundText, invocation: invocation.id, skill: invocation.skill,
            agent: String(decoding: stored.agent, as: UTF8.self))
        return [.publish(event)] + stepDone(roundKey, index, outcome, deduplicated: false, now: now)
    }

    /// Keeps an `ok` outcome for its skill's lifetime (the skill's current descriptor decides).
    mutating func storeInCache(_ key: ByteKey, _ skill: String, _ outcome: Outcome, now: UInt64) {
        guard let lifetime = descriptors.cacheLifetimeMs(of: skill) else { return }
        cache.store(key, outcome, lifetimeMs: lifetime, now: now)
    }
}
