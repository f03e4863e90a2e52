import Foundation
import Synchronization

/// The agent loop: a turn asks the planner for the next step with the session's history, the turn so far
/// and the registry's skills; runs the skill it chose (validated against its schema, through the bus, as
/// an invocation of the turn's round); and goes on until the planner replies, the turn runs out of steps,
/// or its time. Every state goes to the coordinator as it happens.
extension AgentWorker {
    func startTurn(_ turn: TurnRequest) {
        let refusal: SkillbusError? = state.withLock { state in
            if state.stopping { return SkillbusError(.agentLost, "agent '\(options.name)' is shutting down") }
            guard let planner = options.planner else {
                return SkillbusError(.unsupported, "agent '\(options.name)' has no planner: it takes no turns")
            }
            // Created under the lock so that the task cannot finish before it is recorded.
            let executor: (any TaskExecutor)? = planner.executionStyle == .quick ? socket.executor : nil
            if turn.leased {
                state.leases[turn.roundID] = turn.turnID
                state.leasedSince[turn.turnID] = .now
            }
            // The socket's thread cancels the turn when its deadline passes (expireTurns).
            let deadline = ContinuousClock.now + .milliseconds(turn.deadlineMs)
            state.turnDeadlines[turn.turnID] = deadline
            state.turns[turn.turnID] = Task(executorPreference: executor) {
                let (answer, handoff) = await self.take(turn, with: planner, until: deadline)
                self.state.withLock { state in
                    state.turns[turn.turnID] = nil
                    state.turnDeadlines[turn.turnID] = nil
                    state.leasedSince[turn.turnID] = nil
                    // TURNEND gives the round back.
                    if state.leases[turn.roundID] == turn.turnID { state.leases[turn.roundID] = nil }
                    // The turn's last state stands until the agent's own state is said again.
                    state.reported = nil
                    // What the turn has not sent yet the bus reads from its document. Under the lock, as
                    // flushTurnReports sends: TURNEND never overtakes a report of its turn.
                    state.turnReports.removeAll { $0.turnID == turn.turnID }
                    self.socket.send(WorkerMessage.turnEnd(turnID: turn.turnID, answer, handoff: handoff).encoded())
                }
                self.socket.wake()
            }
            return nil
        }
        if let refusal { socket.send(WorkerMessage.turnEnd(turnID: turn.turnID, .error(refusal)).encoded()) }
    }

    /// One turn, to its end: the turn document when the planner replied (or handed the session over: then
    /// with the handoff), an error (with the document in its details) when it did not. Cancelled at
    /// `deadline` (see `expireTurns`), it ends with `timeout`.
    func take(_ turn: TurnRequest, with planner: any Planner, until deadline: ContinuousClock.Instant) async
        -> (RelayedAnswer, HandoffRequest?)
    {
        var record = TurnRecord(turn: turn, agent: options.name, role: options.role)
        let ref = TurnRef(session: turn.sessionID, turn: turn.turnID)
        func enter(_ state: AgentState, parameters: [String: JSONValue]? = nil) {
            record.states.append((state, Date()))
            var ref = ref
            ref.parameters = parameters.map(JSONValue.object)
            queueReport(.turnState(state, ref), of: turn.turnID)
        }
        func ended(_ call: TurnCall) {
            record.calls.append(
                PlannerStep(skill: call.skill, parameters: call.parameters, outcome: call.outcome, asked: call.asked))
            record.ran.append(call)
            queueReport(.step(turnID: turn.turnID, call), of: turn.turnID)
        }
        func fail(_ error: SkillbusError) -> (RelayedAnswer, HandoffRequest?) {
            enter(.failed(error.message))
            let document = try? JSONValue(parsing: record.document(status: "error", error: error))
            return (.error(SkillbusError(error.code, error.message, details: document)), nil)
        }
        func outOfSteps() -> (RelayedAnswer, HandoffRequest?) {
            fail(
                SkillbusError(
                    .skillFailed, "the turn made \(record.calls.count) skill calls, its limit, without a reply"))
        }
        func stopped() -> SkillbusError { Self.stopped(deadline: deadline, calls: record.calls.count) }
        // Outcomes of the calls run on this agent under the turn's lease, by skill and parameters.
        var ranHere: [[UInt8]: Result<SkillResult, SkillbusError>] = [:]
        var history: [SessionMessage] = []
        if let store, !turn.sessionID.isEmpty {
            history = (try? await store.history(turn.sessionID)) ?? []
            try? store.append(.user, .string(turn.message), session: turn.sessionID, round: turn.roundID)
        }
        while true {
            enter(.thinking)
            guard !Task.isCancelled else { return fail(stopped()) }
            guard ContinuousClock.now < deadline else { return fail(stopped()) }
            let view = plannerView()
            let skills = view.skills
            let decision: PlannerDecision
            do {
                decision = try await planner.next(
                    PlannerInput(
                        message: turn.message, history: history, steps: record.calls, skills: skills,
                        agents: view.agents, team: turn.team))
            } catch {
                // A planner that was waiting for something when the turn was cancelled (or ran out of time)
                // fails for that reason.
                if Task.isCancelled { return fail(stopped()) }
                // A planner's own verdict (the rules planner's on a failed call) ends the turn as it is.
                if let verdict = error as? SkillbusError { return fail(verdict) }
                // An endpoint that cannot be reached says so: the bus then sends unnamed turns elsewhere.
                let down = (error as? ChatEndpointError)?.code == .unreachable
                return fail(SkillbusError(down ? .plannerUnavailable : .skillFailed, "the planner failed: \(error)"))
            }
            func finish(_ text: String) -> (RelayedAnswer, HandoffRequest?) {
                record.reply = text
                if !turn.sessionID.isEmpty {
                    try? store?.append(.agent, .string(text), session: turn.sessionID, round: turn.roundID)
                }
                enter(.completed)
                return (RelayedAnswer(status: .ok, body: record.document(status: "ok")), nil)
            }
            switch decision {
            case .reply(let text):
                enter(.streaming)
                return finish(text)
            case .streamedReply(let stream):
                enter(.streaming)
                do {
                    return finish(try await forward(stream, of: turn))
                } catch {
                    if Task.isCancelled { return fail(stopped()) }
                    return fail(SkillbusError(.skillFailed, "the planner's reply broke off: \(error)"))
                }
            case .ask(let target, let message):
                guard record.calls.count < options.turnStepLimit else { return outOfSteps() }
                enter(.delegating(target.text))
                ended(await delegate(message, to: target, in: turn, deadline: deadline))
            case .handoff(let target, let note):
                // The turn ends here; the bus gives the same message to the agent it names.
                record.handoff = HandoffRequest(to: target, note: note)
                enter(.completed)
                return (RelayedAnswer(status: .ok, body: record.document(status: "ok")), record.handoff)
            case .call(let skill, let parameters):
                guard record.calls.count < options.turnStepLimit else { return outOfSteps() }
                enter(.selectingSkill)
                ended(
                    await call(skill, parameters, in: turn, skills: skills, deadline: deadline, ranHere: &ranHere) {
                        enter(.executingSkill(skill), parameters: $0)
                    })
            case .invalidCall(let skill, let error):
                // Recorded like a call the loop refused, so the planner hears why; it counts as a call.
                guard record.calls.count < options.turnStepLimit else { return outOfSteps() }
                enter(.selectingSkill)
                ended(TurnCall(skill: skill, parameters: [:], agent: "", durationMs: 0, outcome: .failure(error)))
            }
        }
    }

    /// Sends a streamed reply on in batches, one every 25 ms at most (never one message per piece), and
    /// returns it whole.
    private func forward(_ reply: ReplyStream, of turn: TurnRequest) async throws -> String {
        let batch = Mutex("")
        let send = { @Sendable in
            let text = batch.withLock { batch in
                defer { batch = "" }
                return batch
            }
            guard !text.isEmpty else { return }
            self.sendAfterTurnReports(WorkerMessage.stream(turnID: turn.turnID, text: text).encoded())
        }
        let flusher = Task {
            while (try? await Task.sleep(for: .milliseconds(25))) != nil { send() }
        }
        var whole = ""
        do {
            for try await piece in reply.pieces {
                whole += piece
                batch.withLock { $0 += piece }
            }
        } catch {
            flusher.cancel()
            throw error
        }
        flusher.cancel()
        await flusher.value
        send()  // what came after the last batch
        return whole
    }

    /// Runs the planner's choice: refused before it runs when the registry knows the skill and the
    /// parameters do not fit its schema (the planner hears why and may choose again); else on this agent
    /// while the turn holds its round and the agent offers the skill, or through the bus. `starting`
    /// hears the parameters (as validated) just before it runs.
    private func call(
        _ skill: String, _ parameters: [String: JSONValue], in turn: TurnRequest, skills: [SkillDescriptor],
        deadline: ContinuousClock.Instant, ranHere: inout [[UInt8]: Result<SkillResult, SkillbusError>],
        starting: ([String: JSONValue]) -> Void
    ) async -> TurnCall {
        var validated = parameters
        if let descriptor = skills.first(where: { $0.identifier == skill }) {
            do throws(SkillbusError) {
                validated = try descriptor.parameters.validate(parameters, skill: skill)
            } catch {
                return TurnCall(
                    skill: skill, parameters: parameters, agent: "", durationMs: 0, outcome: .failure(error))
            }
        }
        starting(validated)
        let started = ContinuousClock.now
        func ended(_ outcome: Result<SkillResult, SkillbusError>, on agent: String) -> TurnCall {
            TurnCall(
                skill: skill, parameters: parameters, agent: agent,
                durationMs: (ContinuousClock.now - started) / .milliseconds(1), outcome: outcome)
        }
        let body = JSONValue.object(validated).serialized()
        if let outcome = await runHere(skill, body: body, in: turn, deadline: deadline, ranHere: &ranHere) {
            return ended(outcome, on: options.name)
        }
        if let offered = await offerHere(skill, body: body, in: turn, deadline: deadline) {
            return ended(offered.outcome, on: offered.agent)
        }
        giveBackRound(turn.roundID)
        do {
            let answer = try await client.invoke(
                skill, parameters: .object(parameters), roundID: turn.roundID, sessionID: turn.sessionID,
                timeout: max(deadline - .now, .milliseconds(1)))
            if let result = answer.result, answer.status == .ok { return ended(.success(result), on: answer.agent) }
            let error = answer.error ?? SkillbusError(.internalError, "'\(skill)' failed without an error")
            return ended(.failure(error), on: answer.agent)
        } catch {
            return ended(.failure(error), on: "")
        }
    }
}

/// What a turn did, for its document.
struct TurnRecord {
    let turn: TurnRequest
    let agent: String
    let role: String?
    var states: [(AgentState, Date)] = []
    /// The calls as the planner sees them, and as they ran (with agent and duration).
    var calls: [PlannerStep] = []
    var ran: [TurnCall] = []
    var reply: String?
    var handoff: HandoffRequest?

    init(turn: TurnRequest, agent: String, role: String?) {
        self.turn = turn
        self.agent = agent
        self.role = role
    }

    /// The turn document (PROTOCOL §5.18), written straight to bytes with its members in key order; `error`
    /// for a turn that failed.
    func document(status: String, error: SkillbusError? = nil) -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(512)
        var members = JSONMemberWriter()
        let team = turn.team
        out.append(UInt8(ascii: "{"))
        members.string("agent", agent, to: &out)
        members.key("calls", to: &out)
        out.append(UInt8(ascii: "["))
        for (index, call) in ran.enumerated() {
            if index > 0 { out.append(UInt8(ascii: ",")) }
            call.write(to: &out)
        }
        out.append(UInt8(ascii: "]"))
        if team?.parentTurnID != nil { members.number("depth", Double(team?.depth ?? 0), to: &out) }
        if let error { members.value("error", error.json, to: &out) }
        if let handedOver = team?.handoff {
            let by: JSONValue = [
                "agent": .string(handedOver.from), "note": .string(handedOver.note), "turn": handedOver.transcript,
            ]
            members.value("handedOverBy", by, to: &out)
        }
        if let handoff { members.value("handoff", handoff.json, to: &out) }
        if let parent = team?.parentTurnID { members.string("parent", parent, to: &out) }
        members.string("reply", reply, to: &out)
        if let role { members.string("role", role, to: &out) }
        members.string("round", turn.roundID, to: &out)
        members.string("session", turn.sessionID, to: &out)
        members.key("states", to: &out)
        out.append(UInt8(ascii: "["))
        for (index, (state, time)) in states.enumerated() {
            if index > 0 { out.append(UInt8(ascii: ",")) }
            state.write(in: nil, time: FeedEvent.timestamp(time), to: &out)
        }
        out.append(UInt8(ascii: "]"))
        members.string("status", status, to: &out)
        members.string("turn", turn.turnID, to: &out)
        out.append(UInt8(ascii: "}"))
        return out
    }
}
