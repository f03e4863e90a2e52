/// The worker's execution path as a value of its own: takes an `Invocation` and produces what the
/// RESULT carries. It finds the skill, parses and validates the parameters (every problem at once),
/// runs the skill, and maps whatever it threw, or its cancellation, to a `SkillbusError`. No sockets and
/// no agent state: the worker hands in how to find a skill and who answers sub-calls.
struct InvocationRunner: Sendable {
    /// What the RESULT says, and why the agent failed when it did.
    struct Outcome: Sendable, Equatable {
        var status: ReplyStatus
        /// A `SkillResult`'s wire form when `status` is ok, a `SkillbusError`'s otherwise.
        var payload: [UInt8]
        /// For the agent's `failed` state: set when the skill ran and failed (or was cancelled); nil on
        /// success and when the invocation was refused before anything ran.
        var failure: String?

        /// An invocation refused before its skill ran (unknown skill, invalid parameters).
        static func refused(_ error: SkillbusError) -> Outcome {
            Outcome(status: .error, payload: error.json.serialized(), failure: nil)
        }
    }

    /// Where a skill is looked up: the skill with that identifier, or nil and the identifiers on offer.
    typealias Lookup = @Sendable (String) -> (skill: (any AgentSkill)?, offered: [String])

    let agentName: String
    let lookup: Lookup
    /// Answers the skill's sub-calls (`SkillExecutionContext.invoke`); nil refuses them.
    let caller: (any SkillCaller)?
    /// The agent's context: skills see it, and an invocation with a session is written into the
    /// session's history (the call, then its result). Nil on an agent that keeps none.
    let store: AgentStore?
    /// Where a skill's partial output goes, and its bounds; nil: `emit` goes nowhere.
    let output: SkillOutput.Route?

    init(
        agentName: String, caller: (any SkillCaller)?, store: AgentStore? = nil, output: SkillOutput.Route? = nil,
        lookup: @escaping Lookup
    ) {
        self.agentName = agentName
        self.caller = caller
        self.store = store
        self.output = output
        self.lookup = lookup
    }

    /// A runner over a fixed set of skills.
    init(
        agentName: String, skills: [String: any AgentSkill], caller: (any SkillCaller)? = nil,
        output: SkillOutput.Route? = nil
    ) {
        self.init(agentName: agentName, caller: caller, output: output) { identifier in
            (skills[identifier], skills[identifier] == nil ? skills.keys.sorted() : [])
        }
    }

    /// Runs `invocation` to its RESULT. `starting` hears the skill's identifier once the parameters are
    /// valid, just before it runs (the worker reports `executingSkill` then).
    func run(_ invocation: Invocation, starting: (String) -> Void = { _ in }) async -> Outcome {
        let started: Started
        do throws(SkillbusError) {
            let (skill, offered) = lookup(invocation.skill)
            guard let skill else { throw unknownSkill(invocation, offered: offered) }
            started = try begin(invocation, skill, starting)
        } catch {
            return .refused(error)
        }
        let result: Result<SkillResult, SkillbusError>
        do throws(SkillbusError) {
            result = .success(
                try await Self.run(started.skill, parameters: started.parameters, context: started.context))
        } catch {
            result = .failure(error)
        }
        return end(started, result, of: invocation)
    }

    /// `run` for a synchronous skill the caller has looked up, with no suspension: how a quick one runs
    /// inline on the agent's I/O thread. `listed` is the skill as the agent lists it (the same one, or
    /// the skill it runs under policies), when the caller has it.
    func runNow(
        _ invocation: Invocation, _ skill: any SynchronousSkill, listed: (any AgentSkill)? = nil,
        starting: (String) -> Void = { _ in }
    ) -> Outcome {
        let started: Started
        do throws(SkillbusError) {
            started = try begin(invocation, listed ?? skill, starting)
        } catch {
            return .refused(error)
        }
        let result: Result<SkillResult, SkillbusError>
        do {
            result = .success(try skill.executeNow(parameters: started.parameters, context: started.context))
        } catch {
            result = .failure(Self.skillError(error, of: skill))
        }
        return end(started, result, of: invocation)
    }

    /// An invocation whose parameters passed and whose skill is about to run.
    private struct Started {
        let skill: any AgentSkill
        let parameters: [String: JSONValue]
        let context: SkillExecutionContext
        let output: SkillOutput?
    }

    private func begin(
        _ invocation: Invocation, _ skill: any AgentSkill, _ starting: (String) -> Void
    ) throws(SkillbusError) -> Started {
        let parameters = try Self.parameters(of: invocation, for: skill)
        starting(skill.identifier)
        var context = SkillExecutionContext(
            roundID: invocation.roundID, sessionID: invocation.sessionID, agentName: agentName,
            invocationID: invocation.invocationID, deadline: .now + .milliseconds(invocation.deadlineMs),
            caller: caller, store: store)
        let output = self.output.map {
            SkillOutput(invocationID: invocation.invocationID, skill: skill.identifier, route: $0)
        }
        context.output = output
        record(.skillCall, ["skill": .string(skill.identifier), "params": .object(parameters)], of: invocation)
        return Started(skill: skill, parameters: parameters, context: context, output: output)
    }

    /// What the RESULT says once the skill returned or threw. The last batch of output goes before the
    /// RESULT; output that overflowed fails it, whatever the skill did.
    private func end(
        _ started: Started, _ result: Result<SkillResult, SkillbusError>, of invocation: Invocation
    ) -> Outcome {
        let identifier = started.skill.identifier
        do throws(SkillbusError) {
            let value: SkillResult
            do throws(SkillbusError) {
                value = try result.get()
            } catch {
                throw started.output?.close() ?? error
            }
            if let overflow = started.output?.close() { throw overflow }
            record(.skillResult, ["skill": .string(identifier), "status": "ok", "result": value.json], of: invocation)
            return Outcome(status: .ok, payload: value.serialized(), failure: nil)
        } catch {
            record(.skillResult, ["skill": .string(identifier), "status": "error", "error": error.json], of: invocation)
            return Outcome(
                status: .error, payload: error.json.serialized(),
                failure: error.code == .cancelled ? "cancelled" : error.message)
        }
    }

    /// Writes one message into the invocation's session, if it has one and the agent keeps context. A
    /// store that cannot take it now does not fail the invocation: the store reports the problem itself.
    /// The content is built only then: an invocation without a session makes no JSON tree for nothing.
    private func record(
        _ role: SessionMessage.Role, _ content: @autoclosure () -> JSONValue, of invocation: Invocation
    ) {
        guard let store, !invocation.$sessionID.isEmpty else { return }
        try? store.append(role, content(), session: invocation.sessionID, round: invocation.roundID)
    }

    private func unknownSkill(_ invocation: Invocation, offered: [String]) -> SkillbusError {
        SkillbusError(
            .unknownSkill,
            "agent '\(agentName)' does not offer '\(invocation.skill)' (offers: "
                + (offered.isEmpty ? "none" : offered.joined(separator: ", ")) + ")")
    }

    /// The invocation's parameters parsed and validated for `skill`, defaults applied; nothing runs when this
    /// throws. The checks and their order are those of PROTOCOL §4.10 (steps 3-6), the wording that of its
    /// error table.
    static func parameters(
        of invocation: Invocation, for skill: any AgentSkill
    ) throws(SkillbusError) -> [String: JSONValue] {
        let parsed: JSONValue
        do {
            parsed = try JSONValue(parsing: invocation.parameters)
        } catch {
            throw SkillbusError(.invalidParameters, "parameters of '\(invocation.skill)' are not valid JSON: \(error)")
        }
        return try validate(parsed, for: skill)
    }

    /// Runs a skill, turning whatever it throws into a `SkillbusError`.
    static func run(
        _ skill: any AgentSkill, parameters: [String: JSONValue], context: SkillExecutionContext
    ) async throws(SkillbusError) -> SkillResult {
        do {
            return try await skill.execute(parameters: parameters, context: context)
        } catch {
            throw skillError(error, of: skill)
        }
    }

    /// What a skill threw, as the RESULT reports it.
    static func skillError(_ error: any Error, of skill: any AgentSkill) -> SkillbusError {
        switch error {
        case let error as SkillbusError: error
        case is CancellationError: SkillbusError(.cancelled, "'\(skill.identifier)' was cancelled")
        default: SkillbusError(.skillFailed, "'\(skill.identifier)' failed: \(error)")
        }
    }

    /// Checks parameters against the skill's schema and returns them with defaults applied.
    static func validate(_ parameters: JSONValue, for skill: any AgentSkill) throws(SkillbusError) -> [String:
        JSONValue]
    {
        guard let object = parameters.objectValue else {
            throw SkillbusError(
                .invalidParameters,
                "parameters of '\(skill.identifier)' must be a JSON object, got \(parameters.typeName)")
        }
        return try skill.parameterSchema.validate(object, skill: skill.identifier)
    }
}
