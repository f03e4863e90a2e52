/// An agent's context seen through the bus: QUERY relayed to the agent that holds it (by name, or by the
/// session's affinity) and its ANSWER relayed back, or a `roster` QUERY answered by the bus itself; CONTEXT
/// reports kept for AGENTS and the feed.
extension CoordinatorState {
    public mutating func handleQuery(_ request: QueryRequest, from client: PeerID, now: UInt64) -> [CoordinatorAction] {
        func answer(_ agent: String, _ error: SkillbusError) -> [CoordinatorAction] {
            [.toClient(client, .answer(requestID: request.requestID, agent: agent, .error(error)))]
        }
        if case .roster(let session, let limit) = request.query {
            return [.toClient(client, .answer(requestID: request.requestID, agent: "", rosterAnswer(session: session, limit: limit)))]
        }
        var name = request.agent
        if name.isEmpty {
            guard let session = request.query.session else {
                return answer("", SkillbusError(.unknownAgent, "this query needs an agent name (it names no session)"))
            }
            guard let holder = affinity.agent(of: Array(session.utf8)) else {
                return answer(
                    "",
                    SkillbusError(
                        .unknownSession,
                        "the bus knows no agent that served session '\(session.prefix(128))'; name the agent",
                        details: ["session": .string(session)]))
            }
            name = holder
        }
        // A role: the agent that plays it in the query's session, else its least loaded player (§3.7).
        if case .role(let role)? = AgentTarget(name) {
            switch turnTaker(for: .role(role), session: Array((request.query.session ?? "").utf8), now: now) {
            case .success(let peer): name = workers[peer]?.name ?? name
            case .failure(let error): return answer(name, error)
            }
        }
        guard let peer = workers.peer(named: name) else {
            let live = workers.all.map(\.name).sorted().joined(separator: ", ")
            return answer(
                name,
                SkillbusError(
                    .unknownAgent, "no live agent is named '\(name.prefix(128))' (live: \(live.isEmpty ? "none" : live))",
                    details: ["agent": .string(name)]))
        }
        let timeoutMs = request.timeoutMs ?? settings.defaultTimeoutMs
        let queryID = queries.add(
            .init(
                client: client, requestID: request.requestID, worker: peer, agent: name,
                deadline: now &+ UInt64(timeoutMs) * 1_000_000))
        return [.toWorker(peer, .query(queryID: queryID, request.query))]
    }

    /// ANSWER from a worker: relayed to the client that asked; a late or foreign one is dropped.
    mutating func relayAnswer(_ queryID: String, _ answer: AgentAnswer, from peer: PeerID) -> [CoordinatorAction] {
        guard let entry = queries.answered(queryID, by: peer) else { return [] }
        return [.toClient(entry.client, .answer(requestID: entry.requestID, agent: entry.agent, answer))]
    }

    /// CONTEXT from a worker: kept for AGENTS; a change in whether its store takes writes goes on the feed.
    mutating func noteContext(_ status: AgentContextStatus, from peer: PeerID) -> [CoordinatorAction] {
        let change = workers.update(peer) { worker -> (String, SkillbusError?)? in
            let before = worker.context?.storageProblem
            worker.context = status
            return before == status.storageProblem ? nil : (worker.name, status.storageProblem)
        }
        guard let (agent, problem) = change ?? nil else { return [] }
        return [.publish(.agentStorage(agent: agent, problem: problem))]
    }

    /// Queries a worker will never answer: it left, or their time ran out.
    func failQueries(
        _ entries: [(id: String, entry: PendingQueries.Entry)], _ error: (PendingQueries.Entry) -> SkillbusError
    ) -> [CoordinatorAction] {
        entries.map { _, entry in
            .toClient(entry.client, .answer(requestID: entry.requestID, agent: entry.agent, .error(error(entry))))
        }
    }
}
