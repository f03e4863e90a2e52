/// What clients can ask the bus about: the skill catalog (SKILLS), the registry snapshot (SNAPSHOT) and
/// the live agents (AGENTS).
extension CoordinatorState {
    /// Every skill on offer with its descriptor and providers, each with capacity and current load.
    public func catalog() -> SkillCatalog {
        SkillCatalog(registry: ledger.registry) { name in
            workers.peer(named: name).flatMap { workers[$0] }.map {
                SkillCatalog.Provider(agent: $0.name, capacity: $0.capacity, inFlight: $0.inFlight)
            }
        }
    }

    /// The answer to SNAPSHOT: one ENTRY per agent, sorted by name, then the summary with the sequence.
    public func snapshot(requestID: String, for client: PeerID) -> [CoordinatorAction] {
        let entries = ledger.serializedEntries.sorted { $0.key < $1.key }
        var actions = entries.map { _, entry in CoordinatorAction.toClient(client, .entry(requestID: requestID, entry: entry)) }
        let summary: JSONValue = [
            "epoch": .string(ledger.epoch), "seq": .number(Double(ledger.sequence)),
            "agents": .number(Double(entries.count)), "heartbeatMs": .number(Double(settings.heartbeatMs)),
        ]
        actions.append(.toClient(client, .snapshot(requestID: requestID, summary: summary)))
        return actions
    }

    /// Live agents with their skills, capacity, load, state, heartbeat age and replica position.
    public mutating func agentsListing(now: UInt64) -> JSONValue {
        let position = ledger.position()
        let running = requests.runningSkills()
        let agents = workers.all.sorted { $0.name < $1.name }.map { worker -> JSONValue in
            let ageMs = now > worker.lastHeard ? Double((now - worker.lastHeard) / 1_000_000) : 0
            var entry: [String: JSONValue] = [
                "agent": .string(worker.name), "capacity": .number(Double(worker.capacity)),
                "inFlight": .number(Double(worker.inFlight)), "state": worker.state.json,
                // What its slots run now; `state` names only the skill the worker started last.
                "running": .object((running[worker.peer] ?? [:]).mapValues { .number(Double($0)) }),
                "skills": .array(worker.skills.keys.sorted().map { .string($0) }),
                // Any message from the worker is a sign of life, not only HEARTBEAT.
                "heartbeatMs": .number(Double(worker.heartbeatMs)), "lastHeartbeatAgeMs": .number(ageMs),
                "registry": worker.registryPosition?.json ?? .null,
            ]
            if let replica = worker.registryPosition {
                entry["registryInSync"] = .bool(replica == position)
            }
            worker.registration.profile.write(into: &entry)
            entry["results"] = worker.results.values.reduce(ResultCounts(), +).json
            if let context = worker.context {
                entry["sessions"] = .number(Double(context.sessions))
                entry["storage"] = context.storageProblem?.json ?? "ok"
            }
            return .object(entry)
        }
        var listing: [String: JSONValue] = [
            "agents": .array(agents), "registry": position.json, "waiting": .number(Double(requests.queuedCount)),
            "cache": cache.json, "bySkill": skillActivity(),
        ]
        if let group { listing["group"] = group.json }
        return .object(listing)
    }

    /// Per skill on offer or waited for: the RESULTs its live providers returned and the requests waiting
    /// for it (by skill or for one agent).
    private func skillActivity() -> JSONValue {
        var results: [String: ResultCounts] = [:]
        for worker in workers.all {
            for skill in worker.skills.keys where results[skill] == nil { results[skill] = ResultCounts() }
            for (skill, counts) in worker.results { results[skill, default: ResultCounts()] += counts }
        }
        var queued: [String: Int] = [:]
        requests.forEachQueued { queued[$0.skill, default: 0] += 1 }
        var activity: [String: JSONValue] = [:]
        for skill in Set(results.keys).union(queued.keys) {
            var entry = (results[skill] ?? ResultCounts()).json.objectValue ?? [:]
            entry["waiting"] = .number(Double(queued[skill] ?? 0))
            activity[skill] = .object(entry)
        }
        return .object(activity)
    }
}
