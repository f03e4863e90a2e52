import Foundation

/// Moving to another coordinator of a group (PROTOCOL §4.4): after a `not_leader` refusal, to the leader it names
/// (else the next endpoint); after the coordinator's silence, to the next endpoint. The worker drops what it ran for
/// the coordinator left, and registers again where it arrives (READY, after the move's back-off).
extension AgentWorker {
    /// A move decided on the DEALER's thread (a refusal): the new DEALER is opened there.
    func moveNow(_ move: CoordinatorChoice.Move) {
        leave(for: move)
        do {
            try socket.perform(move)
        } catch {
            logger.error("cannot connect to the coordinator at \(move.to): \(error)")
        }
        arrive(move)
    }

    /// A move decided by `run` (silence), from async code.
    func moveAsync(_ move: CoordinatorChoice.Move) async {
        leave(for: move)
        do {
            try await socket.performAsync(move)
        } catch {
            logger.error("cannot connect to the coordinator at \(move.to): \(error)")
        }
        arrive(move)
    }

    /// Logs the move once; cancels the invocations and turns of the coordinator left (their RESULTs are not sent:
    /// the new coordinator never dispatched them, §4.3); drops the registry replica, so that the next WELCOME starts
    /// one on the new coordinator's feed; and `arrive` schedules the READY for the end of the back-off.
    private func leave(for move: CoordinatorChoice.Move) {
        if move.to == move.from {
            logger.warning("coordinator \(move.from) does not serve (\(move.reason)); registering there again")
        } else {
            logger.warning("moving from coordinator \(move.from) to \(move.to): \(move.from) \(move.reason)")
        }
        let (orphans, replica) = state.withLock { state -> ([Task<Void, Never>], RegistryReplica?) in
            state.registered = false
            state.retryDelayMs = 1000
            state.movedAt = now()
            state.abandoned.formUnion(state.running.keys)
            let replica = state.replica
            state.replica = nil
            return (Array(state.running.values) + Array(state.turns.values), replica)
        }
        for task in orphans { task.cancel() }
        replica?.close()
    }

    /// The own DEALER's connection to the coordinator broke (its process died, say: `wasOpen`) or could not be
    /// made (nobody listens there). A group's worker then moves at its DEALER's next turn rather than after 3
    /// silent heartbeats; one coordinator is waited for, as before groups.
    func connectionLost(on generation: Int, wasOpen: Bool) {
        guard socket.isCurrent(generation), socket.isGroup else { return }
        state.withLock { $0.connectionLost = wasOpen ? "its connection closed" : "no connection could be made" }
    }

    /// On the DEALER's thread before it waits: the move `connectionLost` asked for.
    func moveIfConnectionLost() {
        let reason = state.withLock { state -> String? in
            defer { state.connectionLost = nil }
            return state.stopping ? nil : state.connectionLost
        }
        guard let reason, let move = socket.silent(reason: reason) else { return }
        moveNow(move)
    }

    /// The new DEALER is in place (only now: its thread's first turn would otherwise send READY on the old one).
    private func arrive(_ move: CoordinatorChoice.Move) {
        state.withLock { $0.readyAt = move.at }
        socket.wake()
    }

    /// On the DEALER's thread before it waits: the READY of a move, once its back-off has passed. Returns how
    /// long until then, while it waits.
    func readyIfDue() -> Duration? {
        let due = state.withLock { state -> Duration? in
            guard let at = state.readyAt, !state.stopping else { return nil }
            let now = ContinuousClock.now
            guard at <= now else { return at - now }
            state.readyAt = nil
            return .zero
        }
        guard due == .zero else { return due }
        register()
        return nil
    }
}
