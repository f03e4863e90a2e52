/// Rounds the bus runs for clients (ROUND): accepted after checks, advanced as their invocations end,
/// finished with one document. A round's invocations go through the same single-flight and routing as
/// REQUESTs.
extension CoordinatorState {
    public mutating func handleRound(_ request: RoundRequest, from client: PeerID, now: UInt64) -> [CoordinatorAction] {
        let roundKey = ByteKey(request.$roundID)
        let clients = [(client: client, requestID: request.$requestID)]
        let spec: RoundSpec
        let retries: Int?
        let priority: InvocationPriority
        let noCache: Bool
        // The canonical body, and its parameters as sent (an invoke's or fan-out's, or each plan step's).
        let (body, parameterBytes): ([UInt8], SentParameters?)
        do throws(SkillbusError) {
            if let canonical = CanonicalRoundBody(request.body, stepLimit: settings.planStepLimit) {
                spec = canonical.spec
                (retries, priority, noCache) = (nil, .normal, false)
                (body, parameterBytes) = (request.body, canonical.parameterBytes)
            } else {
                let json: JSONValue
                do {
                    json = try JSONValue(parsing: request.body)
                } catch {
                    throw SkillbusError(.invalidRound, "the round body is not JSON: \(error)")
                }
                spec = try RoundSpec(json: json, stepLimit: settings.planStepLimit)
                retries = try RoundSpec.retries(in: json)
                priority = try RoundSpec.priority(in: json)
                noCache = try RoundSpec.noCache(in: json)
                let canonical = spec.canonicalForm
                (body, parameterBytes) = (canonical.body, canonical.parameterBytes.map { .shared($0) })
            }
            guard !request.$roundID.isEmpty else { throw SkillbusError(.invalidRound, "a round needs a round id") }
        } catch {
            return refuseRound(request.$roundID, shape: nil, error, to: clients)
        }
        if turns.lease(of: roundKey) != nil {
            let error = SkillbusError(
                .roundConflict, "round '\(request.roundID)' belongs to a running turn; use a new round id")
            return refuseRound(request.$roundID, shape: spec.shape, error, to: clients)
        }
        if let existing = rounds.finishedRound(roundKey) {
            guard existing.body == body else { return refuseConflict(request, spec, to: clients) }
            let document = RoundDocument.markedStored(existing.document)
            return [
                .toClient(client, .round(requestID: request.$requestID, roundID: request.$roundID, document: document))
            ]
        }
        if let existing = rounds[roundKey] {
            guard existing.body == body else { return refuseConflict(request, spec, to: clients) }
            _ = rounds.join(roundKey, client: client, requestID: request.$requestID)
            return []
        }
        let accepted = AcceptedRound(
            request: request, spec: spec, body: body, parameterBytes: parameterBytes, retries: retries,
            priority: priority, noCache: noCache,
            clients: clients, arrived: now)
        if parked.hasGraceItems, let joined = joinParkedRound(accepted) { return joined }
        if settings.journaled { return journal(accepted, roundKey, now: now) }
        return startRound(accepted, roundKey, now: now)
    }

    /// Checks the round against the registry and starts it. During the startup grace, a round with a skill
    /// nobody offers yet waits for it instead (CoordinatorState+Grace).
    mutating func startRound(
        _ accepted: AcceptedRound, _ roundKey: ByteKey, now: UInt64, planned: [RoundInvocation]? = nil
    ) -> [CoordinatorAction] {
        let request = accepted.request
        let spec = accepted.spec
        let invocations: [RoundInvocation]
        do throws(SkillbusError) {
            if let planned {
                invocations = planned
            } else {
                invocations = try plannedInvocations(spec, parameterBytes: accepted.parameterBytes)
            }
        } catch {
            if error.code == .unknownSkill, inStartupGrace(now: now) {
                parked.park(accepted, .grace)
                return []
            }
            var actions = refuseRound(request.$roundID, shape: spec.shape, error, to: accepted.clients)
            if settings.journaled { actions.append(.journal(.forget(roundID: request.$roundID))) }
            return actions
        }
        let timeoutMs = request.timeoutMs ?? defaultTimeoutMs(skill: spec.skill)
        var actions: [CoordinatorAction] = []
        if publishesRoundEvents {
            actions.append(
                .publish(.roundAccepted(round: request.roundID, shape: spec.shape, invocations: invocations.map(\.id))))
        }
        // Consumed, so that the table holds the only reference to the invocations: the first change to them
        // would otherwise copy them all.
        var run = RoundRun(
            id: request.$roundID, session: request.$sessionID, spec: spec, body: accepted.body,
            accepted: accepted.arrived,
            deadline: accepted.arrived &+ UInt64(timeoutMs) * 1_000_000, clients: accepted.clients,
            invocations: consume invocations)
        run.retries = accepted.retries
        run.priority = accepted.priority
        run.noCache = accepted.noCache
        if case .plan(let steps, _) = spec { run.hasReferences = steps.contains { !$0.references.isEmpty } }
        rounds.start(consume run, key: roundKey)
        // An invoke's one invocation waits for nothing: it starts now (and its end ends the round, stepDone).
        if case .invoke = spec {
            actions.absorb(start(roundKey, 0, now: now))
        } else {
            actions.absorb(advance(roundKey, now: now))
        }
        return actions
    }

    /// Starts every invocation that can start; finishes the round when nothing runs or can start.
    mutating func advance(_ roundKey: ByteKey, now: UInt64) -> [CoordinatorAction] {
        var actions: [CoordinatorAction] = []
        var started = true
        while started {
            started = false
            // Read in place: a copy of the invocations would make each start below copy them all again.
            guard let next = rounds.update(roundKey, { $0.nextSteps() }) else { return actions }
            for (index, failedStep) in next {
                // A start that ended at once (a cache hit, a reused outcome) advanced the round itself: what
                // this pass read may have started since, or the round stopped.
                guard let (status, stopped) = rounds.update(roundKey, { ($0.invocations[index].status, $0.stopped) }),
                    status == .waiting
                else { continue }
                if stopped || failedStep != nil {
                    actions += skip(roundKey, index, because: stopped ? nil : failedStep)
                } else {
                    actions.absorb(start(roundKey, index, now: now))
                }
                started = true
            }
        }
        let ended = rounds.update(roundKey) { $0.ownInvocationsEnded }
        if ended == true { actions += finishRound(roundKey, now: now) }
        return actions
    }

    /// An invocation that will not run: the round stopped, or a step it depends on did not succeed.
    mutating func skip(_ roundKey: ByteKey, _ index: Int, because failedStep: String?) -> [CoordinatorAction] {
        let (round, invocation) = rounds.updateRunning(roundKey) { run in
            run.invocations[index].record.status = .skipped
            if let failedStep {
                run.invocations[index].record.error = SkillbusError(
                    .skillFailed, "skipped: step '\(failedStep)' did not succeed")
            }
            return (run.roundText, run.invocations[index])
        }
        return [
            .publish(
                .invocationDone(
                    round: round, invocation: invocation.id, skill: invocation.skill, agent: "", status: .skipped,
                    durationMicros: 0, deduplicated: false))
        ]
    }

    /// Sends one invocation of a round on its way: shared with an identical one, or dispatched.
    mutating func start(_ roundKey: ByteKey, _ index: Int, now: UInt64) -> [CoordinatorAction] {
        if let ask = rounds.updateRunning(roundKey, { $0.invocations[index].ask }) {
            return startAsk(roundKey, index, ask, now: now)
        }
        // The members it needs, read in place: a copy of the whole invocation retained and released each of them.
        let (invocation, resolution, run) = rounds.updateRunning(roundKey) { run in
            run.invocations[index].record.status = .running
            let invocation = (
                id: run.invocations[index].id, skill: run.invocations[index].skill,
                target: run.invocations[index].target
            )
            let resolution =
                run.invocations[index].serializedParameters.map { Result.success($0) }
                ?? run.invocations[index].parameters.resolvingReferences(run.results).map { $0.serialized() }
            return (invocation, resolution, StepContext(run))
        }
        let bytes: [UInt8]
        switch resolution {
        case .success(let resolved): bytes = resolved
        case .failure(let error):
            let message = "step '\(invocation.id)': \(error.message)"
            return stepDone(
                roundKey, index,
                Outcome(
                    status: .error, agent: [],
                    payload: SkillbusError(error.code, message, details: error.details).json.serialized(),
                    durationMicros: 0), deduplicated: false, now: now)
        }
        // A fan-out's invocations are told apart by their agent: "skill@agent" cannot be a skill identifier, and a
        // fan-out's agents are distinct, so no other call of the round can ever share one of them: single-flight
        // is left out for them.
        let keySkill = invocation.target.map { invocation.skill + "@" + $0 } ?? invocation.skill
        let shareable = invocation.target == nil
        let schema = schema(of: invocation.skill)
        // An invoke's one invocation needs its canonical key only for the cache: single-flight puts it in
        // canonical form when another invocation of the round must be compared with it. A round's parameters are
        // in canonical form already (read so from its body, or written by the bus).
        let needsKey = (!run.isInvoke && shareable) || descriptors.cacheLifetimeMs(of: invocation.skill) != nil
        let key =
            needsKey ? SingleFlight.canonicalKey(skill: keySkill, canonicalParameters: bytes, schema: schema) : nil
        // Whom an identical invocation would reuse: the first of the round with this key. A fan-out's
        // invocations each name their own agent, so no other invocation of the round has their key.
        let reusable: String? = (shareable ? key : nil).flatMap { key in
            rounds.updateRunning(roundKey) { run in
                if let first = run.firstByKey[key] { return first }
                run.firstByKey[key] = invocation.id
                return nil
            }
        }
        var request = Request(
            origin: .step(round: roundKey, index: index), requestID: Array(invocation.id.utf8), roundID: run.id,
            sessionID: run.session, skill: invocation.skill, parameters: bytes, accepted: now, deadline: run.deadline)
        if let target = invocation.target { request.target = workers.peer(named: target) }
        request.retries = run.retries
        request.priority = run.priority
        request.client = run.clients.first?.0
        if let answer = answerStepFromCache(roundKey, index, &request, key: key, noCache: run.noCache, now: now) {
            return answer
        }
        if settings.deduplication, shareable {
            let admission = singleFlight.admit(
                round: run.id, skill: keySkill, parameters: bytes, key: key, waiter: request.origin,
                schema: { _ in schema })
            // Built only when it is published, and only for an invocation that reuses another.
            var reused: [CoordinatorAction] {
                guard publishesRoundEvents else { return [] }
                return [
                    .publish(
                        .invocationDeduplicated(
                            round: run.roundText, invocation: invocation.id, reusing: reusable ?? ""))
                ]
            }
            switch admission {
            case .first(let execution): request.shared = execution
            case .joined(let execution):
                rounds.updateRunning(roundKey) { run in
                    run.invocations[index].record.deduplicated = true
                    run.invocations[index].record.reusedFrom = reusable
                    run.invocations[index].joined = execution
                }
                return reused
            case .finished(let outcome):
                rounds.updateRunning(roundKey) { $0.invocations[index].record.reusedFrom = reusable }
                return reused + stepDone(roundKey, index, outcome, deduplicated: true, now: now)
            case .unshared: break
            }
        }
        return route(request, now: now)
    }

    /// One invocation of a round ended (or was answered from an identical one).
    mutating func stepDone(
        _ roundKey: ByteKey, _ index: Int, _ outcome: Outcome, deduplicated: Bool, now: UInt64
    ) -> [CoordinatorAction] {
        let publishing = publishesRoundEvents
        // What the round does next, and its event, read in place: a copy of the invocation's record or of the
        // round's spec retained and released each of their members.
        let ended = rounds.update(roundKey) { run -> (StepEnd, FeedEvent?)? in
            guard run.invocations.indices.contains(index), !run.invocations[index].status.isDone else { return nil }
            run.invocations[index].record.deduplicated = deduplicated || run.invocations[index].record.deduplicated
            if !run.invocations[index].record.deduplicated { run.invocations[index].record.reusedFrom = nil }
            run.invocations[index].end(with: outcome)
            // Only a plan's steps refer to each other's results (`$ref`), and only some plans do.
            if run.hasReferences, let result = run.invocations[index].record.result {
                run.results[run.invocations[index].id] = result
            }
            let status = run.invocations[index].record.status
            let next: StepEnd =
                switch run.spec {
                case .plan(_, let continueOnFailure): status != .ok && !continueOnFailure ? .stop : .advance
                case .fanout(_, _, _, .first), .asks(_, _, .first): status == .ok ? .won : .advance
                case .invoke: .finish
                default: .advance
                }
            guard publishing else { return (next, nil) }
            let record = run.invocations[index].record
            return (
                next,
                .invocationDone(
                    round: run.roundText, invocation: record.id, skill: record.skill, agent: record.agent ?? "",
                    status: record.status, durationMicros: outcome.durationMicros, deduplicated: record.deduplicated)
            )
        }
        guard let (next, event) = ended ?? nil else { return [] }
        var actions: [CoordinatorAction] = []
        if let event { actions.append(.publish(event)) }
        switch next {
        case .stop:
            rounds.updateRunning(roundKey) { $0.stopped = true }
        case .won:
            rounds.updateRunning(roundKey) { $0.stopped = true }
            actions += cancelLosers(roundKey, now: now)
        case .finish:
            // An invoke's one invocation ended (sub-calls never hold a round open): nothing else can start.
            actions.absorb(finishRound(roundKey, now: now))
            return actions
        case .advance:
            break
        }
        actions.absorb(advance(roundKey, now: now))
        return actions
    }

    /// What a round does once one of its invocations ended.
    enum StepEnd {
        /// Start what can start; finish when nothing runs.
        case advance
        /// A plan step failed: nothing new starts.
        case stop
        /// The first success of a fan-out or asks round whose first answer wins: the others are cancelled.
        case won
        /// An invoke's one invocation: the round is done.
        case finish
    }

    /// A REQUEST inside a running round (a skill's sub-call) is listed in the round's document.
    mutating func noteSubCall(_ request: InvokeRequest, deduplicated: Bool) {
        noteSubCall(
            round: request.$roundID, skill: request.skill, parameters: request.parameters, id: request.$requestID,
            deduplicated: deduplicated)
    }

    /// A call of a running round made by a REQUEST or an OFFER (`id`: its request id, or the offer's name).
    mutating func noteSubCall(round: [UInt8], skill: String, parameters: [UInt8], id: [UInt8], deduplicated: Bool) {
        let roundKey = ByteKey(round)
        // Most REQUESTs are no sub-call: look before parsing their parameters.
        guard rounds.isRunning(roundKey) else { return }
        let key = SingleFlight.canonicalKey(
            skill: skill, parameters: parameters, schema: { ledger.registry.skills[$0]?.descriptor.parameters })
        rounds.updateRunning(roundKey) { run in
            run.subCalls += 1
            var invocation = RoundInvocation(
                id: "sub-\(run.subCalls)", skill: skill, target: nil, parameters: .null, after: [])
            invocation.record.status = .running
            invocation.subCallRequest = id
            invocation.record.deduplicated = deduplicated
            if let key {
                if let first = run.firstByKey[key] {
                    if deduplicated { invocation.record.reusedFrom = first }
                } else {
                    run.firstByKey[key] = invocation.id
                }
            }
            run.invocations.append(invocation)
        }
    }

    /// The REPLY to a sub-call went out: record it in its round's document.
    mutating func noteSubCallDone(roundID: [UInt8], requestID: [UInt8], _ outcome: Outcome) {
        rounds.update(ByteKey(roundID)) { run in
            guard
                let index = run.invocations.firstIndex(where: {
                    $0.subCallRequest == requestID && !$0.status.isDone
                })
            else { return }
            run.invocations[index].end(with: outcome)
        }
    }
}
