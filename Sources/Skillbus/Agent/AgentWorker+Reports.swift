import SkillbusZMQ

/// What the agent tells the coordinator beyond RESULTs: its state (coalesced per I/O batch) and its
/// context, and the registry replica it follows once welcomed.
extension AgentWorker {
    /// Follows the registry from the feed WELCOME named, or the one the options name.
    func startReplica(welcomeFeed: String?) {
        guard let feed = options.feed ?? welcomeFeed.map({ Endpoint.reachable($0, via: socket.endpoint) }),
            !feed.isEmpty
        else {
            logger.warning("the coordinator named no feed endpoint; this agent holds no registry replica")
            return
        }
        do {
            let replica = try RegistryReplica(client: client, feedEndpoint: feed, context: context, logger: logger)
            let kept = state.withLock { state -> Bool in
                guard state.replica == nil, !state.stopping else { return false }
                state.replica = replica
                return true
            }
            if kept { logger.info("following the registry on \(feed)") } else { replica.close() }
        } catch {
            logger.warning("cannot follow the registry on \(feed): \(error)")
        }
    }

    /// Records a state change; `flushState` sends it. From another thread, wakes the I/O thread to do so.
    func report(_ newState: AgentState) {
        state.withLock { state in
            if case .failed = newState {
                if state.failures.count < 16 { state.failures.append(newState) }
            } else {
                state.current = newState
            }
        }
        socket.wake()
    }

    /// Runs on the I/O thread before it waits: sends the state if it differs from the one last sent.
    /// Sends HEARTBEAT when one is due, on the socket's thread: skills that keep every thread of the pool
    /// busy cannot delay it, so the bus never takes a busy agent for a dead one. Returns how long until the
    /// next one; nil while not registered (the WELCOME that registers wakes the loop).
    func heartbeatIfDue() -> Duration? {
        let now = now()
        let interval = UInt64(options.heartbeatMs) * 1_000_000
        let plan = state.withLock { state -> (send: Bool, next: UInt64)? in
            guard state.registered, !state.stopping else { return nil }
            let send = now &- state.lastHeartbeatSent >= interval
            if send { state.lastHeartbeatSent = now }
            return (send, state.lastHeartbeatSent &+ interval)
        }
        guard let plan else { return nil }
        if plan.send {
            let position = state.withLock { $0.replica }?.position
            socket.send(WorkerMessage.heartbeat(intervalMs: options.heartbeatMs, registry: position).encoded())
        }
        return .nanoseconds(Int64(plan.next &- now))
    }

    /// Queues a turn's STATE or STEP for the I/O thread, which sends it before it next waits: a turn that runs
    /// within one pass of the loop (the rules planner, quick skills) sends its TURNEND alone.
    func queueReport(_ message: WorkerMessage, of turnID: String) {
        state.withLock { $0.turnReports.append((turnID, message)) }
        socket.wake()
    }

    /// Runs on the I/O thread before it waits: the turns' reports still queued go out, in order.
    func flushTurnReports() { state.withLock { sendTurnReports(&$0) } }

    /// Sends `message` after the reports queued before it: what a turn sends that makes the bus act for it (an
    /// ASK, an OFFER, a STREAM) keeps its place among the turn's STATEs.
    func sendAfterTurnReports(_ message: Multipart) {
        state.withLock { state in
            sendTurnReports(&state)
            socket.send(message)
        }
    }

    /// The caller holds the lock, so that nothing of a turn passes its queued reports.
    func sendTurnReports(_ state: inout State) {
        guard !state.turnReports.isEmpty else { return }
        for report in state.turnReports { socket.send(report.message.encoded()) }
        state.turnReports.removeAll(keepingCapacity: true)
    }

    func flushState() {
        let changes = state.withLock { state -> [AgentState] in
            var changes = state.failures
            state.failures.removeAll()
            if let last = changes.last { state.reported = last }
            if state.reported != state.current {
                state.reported = state.current
                changes.append(state.current)
            }
            return changes
        }
        for change in changes { socket.send(WorkerMessage.state(change).encoded()) }
        if let context = contextChange() { socket.send(WorkerMessage.context(context).encoded()) }
    }
}
