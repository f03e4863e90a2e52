/// A turn's deadline stops whatever the turn waits for when it passes, as a CANCEL does: a planner's HTTP
/// call to its endpoint, a reply still streaming in. Without it a turn would end only when that wait did
/// (an endpoint may stay silent for its whole `timeoutSeconds`), long after the client got `timeout`.
extension AgentWorker {
    /// Runs `turn` and cancels it when `deadline` passes before it ends; returns what it returned (a turn
    /// that sees its cancellation fails, saying it ran out of time, see `stopped`).
    static func cancelling<Answer: Sendable>(
        at deadline: ContinuousClock.Instant, _ turn: @escaping @Sendable () async -> Answer
    ) async -> Answer {
        // Each child ends with the turn's answer, or nil: the deadline passed.
        return await withTaskGroup(of: Answer?.self) { group in
            group.addTask { await turn() }
            group.addTask {
                // Cancelled once the turn has ended: then this ends at once, and ends nothing.
                try? await Task.sleep(until: deadline, clock: .continuous)
                return nil
            }
            while let ended = await group.next() {
                // The deadline came first: the turn is cancelled and ends soon, saying why.
                group.cancelAll()
                if let answer = ended { return answer }
            }
            preconditionFailure("a turn's task group ended without the turn's answer")
        }
    }

    /// Why a turn that saw its cancellation stops: its deadline, once that has passed (the cancel came
    /// from `cancelling(at:)`), or else a CANCEL.
    static func stopped(deadline: ContinuousClock.Instant, calls: Int) -> SkillbusError {
        guard ContinuousClock.now >= deadline else { return SkillbusError(.cancelled, "the turn was cancelled") }
        return SkillbusError(.timeout, "the turn ran out of time after \(calls) skill call(s)")
    }
}
