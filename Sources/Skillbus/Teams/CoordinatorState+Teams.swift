/// Teams on the bus (PROTOCOL §3.7.1, §3.7.2): which agent takes a turn — named, by role, the session's, the
/// default — and the checks a turn asked for by another agent's turn must pass (depth, no circle).
extension CoordinatorState {
    /// The agent with a planner that takes a turn for `target` in `session`. A role goes to the agent that played
    /// it in this session while it lives, else to the least loaded agent of that role; no target to the
    /// session's current agent, else the default agent, else the least loaded agent with a planner.
    mutating func turnTaker(for target: AgentTarget?, session: [UInt8], now: UInt64) -> Result<PeerID, SkillbusError> {
        switch target {
        case .agent(let name):
            guard let peer = workers.peer(named: name) else {
                let live = workers.all.filter(\.registration.planner).map(\.name).sorted()
                return .failure(
                    SkillbusError(
                        .unknownAgent, "no live agent is named '\(name.prefix(128))'"
                            + (live.isEmpty ? "" : " (live agents with a planner: \(live.joined(separator: ", ")))"),
                        details: ["agent": .string(name)]))
            }
            guard workers[peer]?.registration.planner == true else {
                return .failure(SkillbusError(.unsupported, "agent '\(name)' has no planner: it takes no turns"))
            }
            return .success(peer)
        case .role(let role):
            let players = workers.all.filter { $0.registration.planner && $0.registration.profile.role == role }
            if !session.isEmpty, let holder = affinity.agent(of: Self.roleKey(session, role)).flatMap(workers.peer(named:)),
                players.contains(where: { $0.peer == holder })
            {
                return .success(holder)
            }
            guard let peer = leastLoadedTaker(players) else {
                let roles = Set(workers.all.filter(\.registration.planner).compactMap(\.registration.profile.role)).sorted()
                return .failure(
                    SkillbusError(
                        .unknownAgent, "no live agent with a planner plays the role '\(role.prefix(128))'"
                            + (roles.isEmpty ? "" : " (roles: \(roles.joined(separator: ", ")))"),
                        details: ["role": .string(role)]))
            }
            return .success(peer)
        case nil:
            if !session.isEmpty, let holder = affinity.agent(of: Self.turnKey(session)).flatMap(workers.peer(named:)),
                workers[holder]?.registration.planner == true
            {
                return .success(holder)
            }
            if let configured = AgentTarget(settings.defaultAgent),
                case .success(let peer) = turnTaker(for: configured, session: session, now: now)
            {
                return .success(peer)
            }
            // Never silently to an agent whose planner cannot answer now, while another can.
            let planners = workers.all.filter(\.registration.planner)
            let answering = planners.filter { !turns.isPlannerDown($0.peer, now: now) }
            guard let peer = leastLoadedTaker(answering.isEmpty ? planners : answering) else {
                return .failure(SkillbusError(.unknownAgent, "no live agent has a planner to take the turn"))
            }
            return .success(peer)
        }
    }

    /// The candidate with the fewest invocations and turns running; ties go round.
    private mutating func leastLoadedTaker(_ candidates: [WorkerTable.Worker]) -> PeerID? {
        guard !candidates.isEmpty else { return nil }
        let turnsRunning = turns.runningCounts()
        let ordered = candidates.sorted { $0.name < $1.name }
        let start = turns.nextRotation() % ordered.count
        var best: (peer: PeerID, load: Int)?
        for offset in 0..<ordered.count {
            let worker = ordered[(start + offset) % ordered.count]
            let load = worker.inFlight + turnsRunning[worker.peer, default: 0]
            if load < best?.load ?? .max { best = (worker.peer, load) }
        }
        return best?.peer
    }

    /// The session's turn went to `agent` (playing `role`): its next turn, and its next turn for that role, go
    /// there too, and the roster notes it. A nested turn does not move the session's current agent.
    mutating func recordTurn(_ session: [UInt8], agent: String, role: String?, nested: Bool, now: UInt64) {
        guard !session.isEmpty else { return }
        noteServed(session, agent: agent, role: role, now: now)
        if !nested { affinity.record(Self.turnKey(session), agent: agent) }
        if let role { affinity.record(Self.roleKey(session, role), agent: agent) }
    }

    // Affinity keys of their own, apart from the session's invocations' (0xFF never occurs in UTF-8 text).
    static func turnKey(_ session: [UInt8]) -> [UInt8] { session + [0xFF] }
    static func roleKey(_ session: [UInt8], _ role: String) -> [UInt8] { session + [0xFF] + Array(role.utf8) }

    /// Where a turn asked for by `parentTurnID`'s agent would stand, or why it may not run: the parent must be
    /// running in the same round and session, no turn above it may be the same agent asked the same message (a
    /// circle, the more telling refusal, checked first), and the nesting not deeper than the limit.
    func nesting(
        under parentTurnID: String, agent: String, message: String, round: [UInt8], session: String
    ) -> Result<(standing: TurnTable.Standing, deadline: UInt64), SkillbusError> {
        guard let parent = turns.turn(parentTurnID), let parentStanding = turns.standing(of: parentTurnID) else {
            return .failure(
                SkillbusError(.invalidParameters, "the parent turn '\(parentTurnID.prefix(128))' is not running"))
        }
        guard parent.round == round, parent.session == session else {
            return .failure(
                SkillbusError(
                    .invalidParameters, "a nested turn runs in its parent turn's round and session (\(parentTurnID))"))
        }
        let chain = turns.ancestry(of: parentTurnID)
        if let circle = chain.first(where: { $0.standing.agent == agent && $0.standing.message == message }) {
            let path = (chain.reversed().map(\.standing.agent) + [agent]).joined(separator: " → ")
            return .failure(
                SkillbusError(
                    .delegationRefused,
                    "asking agent '\(agent)' the same message again would go round in a circle (\(path)); turn "
                        + "\(circle.id) already has it",
                    details: ["reason": "cycle", "agents": .array((chain.reversed().map(\.standing.agent) + [agent]).map { .string($0) })]))
        }
        let depth = parentStanding.depth + 1
        guard depth <= settings.delegationDepthLimit else {
            return .failure(
                SkillbusError(
                    .delegationRefused,
                    "asking agent '\(agent)' would nest turns \(depth) deep, past the limit of \(settings.delegationDepthLimit)",
                    details: ["reason": "depth", "limit": .number(Double(settings.delegationDepthLimit))]))
        }
        return .success(
            (TurnTable.Standing(agent: agent, message: message, parent: parentTurnID, depth: depth), parent.deadline))
    }
}

extension CoordinatorState {
    /// TURNEND with a handoff (§3.7.2): the turn ends, the session's current agent becomes the one it names, and
    /// that agent takes the same message as a turn of its own — with the note and the handing turn's document —
    /// for the same client and ASK, within the same deadline. The client hears only the last agent's TURN.
    mutating func handOff(
        _ turnID: String, _ answer: RelayedAnswer, _ handoff: HandoffRequest, from peer: PeerID, now: UInt64
    ) -> [CoordinatorAction] {
        guard let standing = turns.standing(of: turnID), let entry = turns.answered(turnID, by: peer) else { return [] }
        var actions = turnEnded(turnID, entry, now: now)
        let transcript = (try? JSONValue(parsing: answer.body)) ?? .null
        func fail(_ error: SkillbusError) -> [CoordinatorAction] {
            var details = error.details?.objectValue ?? [:]
            details["turn"] = transcript
            let failure = SkillbusError(error.code, error.message, details: .object(details))
            if entry.roundStep != nil { return actions + askEnded(entry, .error(failure), now: now) }
            return actions + [.toClient(entry.client, .turn(requestID: entry.requestID, agent: entry.agent, .error(failure)))]
        }
        guard standing.handoffs < settings.delegationDepthLimit else {
            return fail(
                SkillbusError(
                    .delegationRefused,
                    "agent '\(entry.agent)' would hand the turn over a \(standing.handoffs + 1)th time, past the limit of "
                        + "\(settings.delegationDepthLimit)", details: ["reason": "handoffs"]))
        }
        let next: PeerID
        switch turnTaker(for: handoff.to, session: Array(entry.session.utf8), now: now) {
        case .success(let taker): next = taker
        case .failure(let error):
            return fail(SkillbusError(error.code, "agent '\(entry.agent)' handed the turn over, but \(error.message)"))
        }
        guard next != peer else {
            return fail(
                SkillbusError(.delegationRefused, "agent '\(entry.agent)' handed the turn over to itself (\(handoff.to))"))
        }
        let agent = workers[next]?.name ?? ""
        recordTurn(
            Array(entry.session.utf8), agent: agent, role: workers[next]?.registration.profile.role,
            nested: standing.parent != nil, now: now)
        var moved = entry
        moved.worker = next
        moved.agent = agent
        var nextStanding = TurnTable.Standing(
            agent: agent, message: standing.message, parent: standing.parent, depth: standing.depth)
        nextStanding.handoffs = standing.handoffs + 1
        let started = startTurn(
            moved, standing: nextStanding, message: standing.message,
            handoff: TeamContext.Handoff(from: entry.agent, note: handoff.note, transcript: transcript), now: now)
        actions.append(
            .publish(
                .turnHandoff(
                    agent: entry.agent, turn: TurnRef(session: entry.session, turn: turnID), to: agent, note: handoff.note,
                    next: started.turnID)))
        return actions + started.actions
    }
}
