/// The startup grace (PROTOCOL §4.17): for `startupGraceMs` after the coordinator starts, a REQUEST or ROUND
/// for a skill nobody offers yet waits for an agent to register it, instead of failing `unknown_skill`: after
/// a restart, workers need a moment to come back. It waits until it can run, until its own deadline
/// (`timeout`), or until the grace ends (`unknown_skill`, as it would have got at once). It waits in
/// `ParkedRequests`, in the phase `parked(grace)`.
extension CoordinatorState {
    /// Starts the grace at `now` (the coordinator calls it once, when it starts serving).
    public mutating func beginStartupGrace(now: UInt64) {
        parked.beginGrace(until: now &+ UInt64(settings.startupGraceMs) * 1_000_000)
    }

    func inStartupGrace(now: UInt64) -> Bool { parked.inGrace(now: now) }

    /// A REQUEST for a skill nobody offers, during the grace: it waits.
    mutating func parkInGrace(_ request: InvokeRequest, from client: PeerID, now: UInt64) -> Bool {
        guard inStartupGrace(now: now), !workers.offers(request.skill) else { return false }
        parked.park(request, client: client, arrived: now, .grace)
        return true
    }

    /// The same round sent again while it waits in the grace joins it ([]), or is refused when its body
    /// differs; nil when it does not wait there.
    mutating func joinParkedRound(_ accepted: AcceptedRound) -> [CoordinatorAction]? {
        switch parked.join(accepted, in: .grace) {
        case nil: return nil
        case false?: return refuseConflict(accepted.request, accepted.spec, to: accepted.clients)
        case true?: return []
        }
    }

    /// The registry changed (or the grace or a deadline ended): everything parked is tried again. What still
    /// lacks its skill parks again while the grace lasts, and fails as it would have without one afterwards.
    mutating func retryGraceParked(now: UInt64) -> [CoordinatorAction] {
        guard parked.hasGraceItems else { return [] }
        var actions: [CoordinatorAction] = []
        for item in parked.takeGrace() {
            switch item {
            case .invoke(let request, let client, let arrived):
                let timeoutMs = request.timeoutMs ?? defaultTimeoutMs(skill: request.skill)
                guard arrived &+ UInt64(timeoutMs) * 1_000_000 > now else {
                    actions += timedOutInGrace(request, client: client, timeoutMs: timeoutMs, arrived: arrived, now: now)
                    continue
                }
                if parkInGrace(request, from: client, now: now) { continue }
                actions += acceptInvoke(request, from: client, accepted: arrived, now: now)
            case .round(let accepted):
                let timeoutMs = accepted.request.timeoutMs ?? defaultTimeoutMs(skill: accepted.spec.skill)
                guard accepted.arrived &+ UInt64(timeoutMs) * 1_000_000 > now else {
                    let error = SkillbusError(
                        .timeout, "no agent offered the round's skills within its \(timeoutMs) ms (startup grace)")
                    actions += refuseRound(accepted.request.$roundID, shape: accepted.spec.shape, error, to: accepted.clients)
                    if settings.journaled { actions.append(.journal(.forget(roundID: accepted.request.$roundID))) }
                    continue
                }
                actions += startRound(accepted, ByteKey(accepted.request.$roundID), now: now)
            }
        }
        return actions
    }

    /// At each tick: the parked ones whose deadline passed, or all of them once the grace is over.
    mutating func expireGraceParked(now: UInt64) -> [CoordinatorAction] {
        guard parked.hasGraceItems else { return [] }
        let due = !inStartupGrace(now: now) || parked.graceContains { item in
            switch item {
            case .invoke(let request, _, let arrived):
                arrived &+ UInt64(request.timeoutMs ?? defaultTimeoutMs(skill: request.skill)) * 1_000_000 <= now
            case .round(let accepted):
                accepted.arrived &+ UInt64(accepted.request.timeoutMs ?? defaultTimeoutMs(skill: accepted.spec.skill))
                    * 1_000_000 <= now
            }
        }
        return due ? retryGraceParked(now: now) : []
    }

    private func timedOutInGrace(
        _ request: InvokeRequest, client: PeerID, timeoutMs: Int, arrived: UInt64, now: UInt64
    ) -> [CoordinatorAction] {
        let error = SkillbusError(
            .timeout, "no agent offered '\(request.skill)' within \(timeoutMs) ms (startup grace)",
            details: ["skill": .string(request.skill)])
        return unrunReply(request, client: client, arrived: arrived, error, now: now)
    }

    /// The REPLY `error` to a REQUEST that waited (in the grace, or behind a turn's lease) and will not run
    /// (timed out, cancelled), and `request.done`, as for every REPLY.
    func unrunReply(
        _ request: InvokeRequest, client: PeerID, arrived: UInt64, _ error: SkillbusError, now: UInt64
    ) -> [CoordinatorAction] {
        let outcome = Outcome(
            status: .error, agent: [], payload: error.json.serialized(), durationMicros: Int((now &- arrived) / 1000))
        var actions: [CoordinatorAction] = [
            .toClient(client, outcome.reply(requestID: request.$requestID, roundID: request.$roundID))
        ]
        if publishesRequestEvents {
            actions.append(
                .publish(
                    .requestDone(
                        round: request.roundID, request: request.requestID, skill: request.skill, agent: "",
                        status: .error, durationMicros: outcome.durationMicros, payload: outcome.payload)))
        }
        return actions
    }
}
