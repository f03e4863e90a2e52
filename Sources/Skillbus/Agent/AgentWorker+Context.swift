/// The agent's context as others see it: QUERY answers about its sessions, history and memory, and the
/// CONTEXT reports that tell the coordinator how many sessions it holds and whether its store writes.
extension AgentWorker {
    /// The answer to one QUERY.
    func answer(_ query: AgentQuery) async -> AgentAnswer {
        guard let store else {
            return .error(SkillbusError(.unsupported, "agent '\(options.name)' keeps no context store"))
        }
        switch query {
        case .sessions:
            return .ok(["sessions": .array(store.sessions().map(\.json))])
        case .history(let session):
            do throws(SkillbusError) {
                guard let messages = try await store.history(session) else {
                    return .error(
                        SkillbusError(
                            .unknownSession, "agent '\(options.name)' holds no session '\(session.prefix(128))'",
                            details: ["session": .string(session)]))
                }
                return .ok(["session": .string(session), "messages": .array(messages.map(\.json))])
            } catch {
                return .error(error)
            }
        case .memory(let scope):
            var answer: [String: JSONValue] = [
                "memory": .array(store.memory(prefix: "", scope: scope).map { ["key": .string($0.key), "value": $0.value] })
            ]
            switch scope {
            case .agent: answer["scope"] = "agent"
            case .session(let session):
                answer["scope"] = "session"
                answer["session"] = .string(session)
            }
            return .ok(.object(answer))
        case .roster:
            // The bus answers it and never forwards it: a bus that did is not one this worker understands.
            return .error(SkillbusError(.unsupported, "a roster query is answered by the bus, not by an agent"))
        }
    }

    /// The CONTEXT to send when it differs from the one last sent (checked whenever the socket's thread
    /// is about to wait); nil when nothing changed or the agent keeps no context.
    func contextChange() -> AgentContextStatus? {
        guard let store else { return nil }
        let current = AgentContextStatus(sessions: store.sessionCount, storageProblem: store.storageProblem)
        return state.withLock { state in
            guard state.registered, state.reportedContext != current else { return nil }
            state.reportedContext = current
            return current
        }
    }
}
