import SkillbusZMQ

/// The skills an agent offers, changed at run time (PROTOCOL §4.11): the bus hears every change.
extension AgentWorker {
    public var registration: Registration { state.withLock { registration(of: $0.skills) } }

    func registration(of skills: [String: any AgentSkill]) -> Registration {
        Registration(
            name: options.name, capacity: options.capacity, heartbeatMs: options.heartbeatMs,
            skills: skills.values.map(\.descriptor).sorted { $0.identifier < $1.identifier },
            profile: AgentProfile(planner: options.planner != nil, role: options.role, description: options.description))
    }

    func skillsMessage(_ skills: [String: any AgentSkill]) -> Multipart {
        WorkerMessage.skills(.array(registration(of: skills).skills.map(\.json))).encoded()
    }

    /// This agent's copy of the whole registry; nil until the coordinator first welcomed it.
    public var replica: RegistryReplica? { state.withLock { $0.replica } }

    /// Offers a skill from now on (replacing one with the same identifier). The coordinator gets the new
    /// list at once; it shows in the registry as one update.
    public func addSkill(_ skill: any AgentSkill) {
        changeSkills { $0[skill.identifier] = skill }
    }

    /// Stops offering a skill; invocations of it that already run finish.
    public func removeSkill(_ identifier: String) {
        changeSkills { $0[identifier] = nil }
    }

    /// Replaces the whole skill list (what a config reload does).
    public func setSkills(_ skills: [any AgentSkill]) {
        changeSkills { $0 = Dictionary(skills.map { ($0.identifier, $0) }, uniquingKeysWith: { first, _ in first }) }
    }

    /// Replaces the skills whose identifiers start with `prefix` (a mounted MCP server's `<server>.`) with
    /// `skills`, leaving the others as they are: one update on the bus.
    public func replaceSkills(withPrefix prefix: String, by skills: [any AgentSkill]) {
        changeSkills { current in
            current = current.filter { !$0.key.hasPrefix(prefix) }
            for skill in skills { current[skill.identifier] = skill }
        }
    }

    /// Replaces the whole skill list but the skills under `prefixes`, which stay (a config reload keeps what
    /// the mounted MCP servers offer).
    public func setSkills(_ skills: [any AgentSkill], keepingPrefixes prefixes: [String]) {
        changeSkills { current in
            let kept = current.filter { entry in prefixes.contains { entry.key.hasPrefix($0) } }
            current = Dictionary(skills.map { ($0.identifier, $0) }, uniquingKeysWith: { first, _ in first })
            current.merge(kept) { _, mounted in mounted }
        }
    }

    /// Changes the skills and tells the bus. The message is built and queued under the lock (`send` takes
    /// only the outbox's own lock and never blocks), so lists reach the bus in the order the changes
    /// happened and the last one sent is the list as it now is.
    func changeSkills(_ change: (inout [String: any AgentSkill]) -> Void) {
        state.withLock { state in
            change(&state.skills)
            if state.registered {
                socket.send(skillsMessage(state.skills))
            } else {
                // The next READY carries the new list; a WELCOME to an earlier READY is followed by SKILLS.
                state.skillsChangedSinceReady = true
            }
        }
    }
}
