import Dispatch
import Foundation

/// Running an INVOKE: refused, run at once on the socket's thread (a quick skill), or as a task; cancelled; and its
/// RESULT when it ends.
extension AgentWorker {
    func start(_ invocation: Invocation) {
        enum Start {
            case refused(SkillbusError)
            case task
            /// A quick synchronous skill: it runs here, on the socket's thread, with no task. The skill as
            /// listed comes along: making it from the synchronous one would box a copy of it.
            case now(any SynchronousSkill, listed: any AgentSkill)
        }
        let start = state.withLock { state -> Start in
            if state.stopping { return .refused(SkillbusError(.agentLost, "agent '\(options.name)' is shutting down")) }
            if state.running.count >= options.capacity {
                return .refused(SkillbusError(.busy, "agent '\(options.name)' is at capacity (\(options.capacity))"))
            }
            let skill = state.skills[invocation.skill]
            // The limit holds whoever sends the INVOKE: a bus that does not know it gets `busy`.
            if let limit = skill?.concurrencyLimit {
                guard state.limitedRunning[invocation.skill, default: 0] < limit else {
                    return .refused(
                        SkillbusError(
                            .busy,
                            "agent '\(options.name)' is at the concurrency limit of '\(invocation.skill)' (\(limit))"))
                }
                state.limitedRunning[invocation.skill, default: 0] += 1
            }
            guard let skill, skill.executionStyle == .quick else {
                // Created under the lock so that the task cannot finish before it is recorded.
                state.running[invocation.invocationID] = Task { await self.execute(invocation) }
                return .task
            }
            if let synchronous = state.synchronousSkills[invocation.skill] { return .now(synchronous, listed: skill) }
            state.running[invocation.invocationID] = Task(executorPreference: socket.executor) {
                await self.execute(invocation)
            }
            return .task
        }
        switch start {
        case .task:
            break
        case .now(let skill, let listed):
            finished(invocation, runner.runNow(invocation, skill, listed: listed) { report(.executingSkill($0)) })
        case .refused(let refusal):
            socket.send(
                WorkerMessage.result(
                    invocationID: invocation.invocationID, status: .error, payload: refusal.json.serialized()
                ).encoded())
        }
    }

    /// The execution path, over this agent's skills as they are when an invocation looks its skill up.
    /// Cancels a running invocation (its output overflowed); one that has ended is left alone.
    func cancelInvocation(_ id: String) { state.withLock { $0.running[id] }?.cancel() }

    var runner: InvocationRunner {
        InvocationRunner(agentName: options.name, caller: self, store: store, output: outputRoute) { identifier in
            self.state.withLock { state in
                (state.skills[identifier], state.skills[identifier] == nil ? state.skills.keys.sorted() : [])
            }
        }
    }

    func execute(_ invocation: Invocation) async {
        finished(invocation, await runner.run(invocation) { report(.executingSkill($0)) })
    }

    func finished(_ invocation: Invocation, _ outcome: InvocationRunner.Outcome) {
        // Free the slot before the coordinator can hear of it, or its next dispatch could find us "full".
        let (idle, abandoned) = state.withLock { state -> (Bool, Bool) in
            state.running[invocation.invocationID] = nil
            if let count = state.limitedRunning[invocation.skill] {
                state.limitedRunning[invocation.skill] = count > 1 ? count - 1 : nil
            }
            return (state.running.isEmpty, state.abandoned.remove(invocation.invocationID) != nil)
        }
        if abandoned {
            if idle { report(.idle) }
            return
        }
        socket.send(
            WorkerMessage.result(
                invocationID: invocation.invocationID, status: outcome.status, payload: outcome.payload
            ).encoded())
        if let failure = outcome.failure { report(.failed(failure)) }
        if idle { report(.idle) }
    }
}
