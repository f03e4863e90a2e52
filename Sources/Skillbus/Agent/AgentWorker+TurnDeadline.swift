/// A turn's deadline stops whatever the turn waits for when it passes, as a CANCEL does: a planner's HTTP
/// call to its endpoint, a reply still streaming in. Without it a turn would end only when that wait did
/// (an endpoint may stay silent for its whole `timeoutSeconds`), long after the client got `timeout`.
///
/// The socket's thread keeps the deadlines, as it keeps the heartbeat's: before it waits it cancels the
/// turns whose deadline has passed, and waits no longer than until the next one. A timer task per turn
/// cost a Dispatch timer, two child tasks and a few turns of the loop before each TURNEND.
extension AgentWorker {
    /// Cancels the tasks of the turns whose deadline has passed (a turn that sees its cancellation fails,
    /// saying it ran out of time, see `stopped`); returns how long until the next deadline, nil when no
    /// turn is running. On the socket's thread, before it waits.
    func expireTurns() -> Duration? {
        let now = ContinuousClock.now
        let (expired, next) = state.withLock { state -> ([Task<Void, Never>], ContinuousClock.Instant?) in
            guard !state.turnDeadlines.isEmpty else { return ([], nil) }
            var expired: [Task<Void, Never>] = []
            var next: ContinuousClock.Instant?
            for (turnID, deadline) in state.turnDeadlines {
                guard deadline <= now else {
                    next = min(next ?? deadline, deadline)
                    continue
                }
                state.turnDeadlines[turnID] = nil
                if let task = state.turns[turnID] { expired.append(task) }
            }
            return (expired, next)
        }
        for task in expired { task.cancel() }
        return next.map { $0 - now }
    }

    /// Why a turn that saw its cancellation stops: its deadline, once that has passed (the cancel came
    /// from `expireTurns`), or else a CANCEL.
    static func stopped(deadline: ContinuousClock.Instant, calls: Int) -> SkillbusError {
        guard ContinuousClock.now >= deadline else { return SkillbusError(.cancelled, "the turn was cancelled") }
        return SkillbusError(.timeout, "the turn ran out of time after \(calls) skill call(s)")
    }
}
