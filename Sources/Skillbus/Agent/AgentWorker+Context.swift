/// The agent's context as others see it: QUERY answers about its sessions, history and memory.
extension AgentWorker {
    /// The answer to one QUERY.
    func answer(_ query: AgentQuery) async -> AgentAnswer {
        .error(SkillbusError(.unsupported, "agent '\(options.name)' keeps no context store"))
    }
}
