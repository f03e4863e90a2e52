/// A round the bus runs for a client (ROUND): its invocations, their outcomes, and the document that
/// answers it. Identical invocations go through the same single-flight as REQUESTs (`SingleFlight`).
struct RoundRun: Sendable {
    let id: [UInt8]
    let session: [UInt8]
    let spec: RoundSpec
    /// The canonical body: the same round id with another body is refused.
    let body: [UInt8]
    let accepted: UInt64
    let deadline: UInt64
    /// Clients waiting for the document (the same round sent again while it runs joins).
    var clients: [(client: PeerID, requestID: [UInt8])]
    var invocations: [RoundInvocation]
    /// The first invocation of the round with a given canonical key: whom an identical one reuses.
    var firstByKey: [ByteKey: String] = [:]
    /// Result forms of finished plan steps, by step id, for `$ref`.
    var results: [String: JSONValue] = [:]
    /// No new invocation starts (a plan stopped at a failure, or a fan-out's first success won).
    var stopped = false
    var document: [UInt8]?
    var finishedAt: UInt64 = 0
    var subCalls = 0

    var isFinished: Bool { document != nil }
}

struct RoundInvocation: Sendable {
    enum State: Sendable, Equatable { case waiting, running, done }

    let id: String
    let skill: String
    /// Fan-out: the agent it must run on.
    let target: String?
    let parameters: JSONValue
    let after: [String]
    var state: State = .waiting
    var status = "pending"
    var agent = ""
    var durationMicros = 0
    var deduplicated = false
    var reusedFrom: String?
    var result: JSONValue?
    var error: JSONValue?
    /// A client REQUEST made inside the round (a skill's sub-call), answered to that request id.
    var subCallRequest: [UInt8]?

    /// Done, with how it ended: `ok` with its result, `cancelled`, or `error` with the error.
    mutating func record(_ outcome: Outcome) {
        state = .done
        agent = String(decoding: outcome.agent, as: UTF8.self)
        durationMicros = outcome.durationMicros
        let payload = (try? JSONValue(parsing: outcome.payload)) ?? .null
        if outcome.status == .ok {
            status = "ok"
            result = payload
        } else {
            status = payload["code"]?.stringValue == SkillbusError.Code.cancelled.rawValue ? "cancelled" : "error"
            error = payload
        }
    }

    var json: JSONValue {
        [
            "id": .string(id), "skill": .string(skill), "agent": agent.isEmpty ? .null : .string(agent),
            "status": .string(status), "durationMs": .number(Double(durationMicros) / 1000),
            "deduplicated": .bool(deduplicated), "reusedFrom": reusedFrom.map { .string($0) } ?? .null,
            "result": result ?? .null, "error": error ?? .null,
        ]
    }
}

extension CoordinatorState {
    // MARK: ROUND from a client

    public mutating func handleRound(_ request: RoundRequest, from client: PeerID, now: UInt64) -> [CoordinatorAction] {
        let roundKey = ByteKey(request.$roundID)
        let bodyJSON: JSONValue
        let spec: RoundSpec
        do throws(SkillbusError) {
            do {
                bodyJSON = try JSONValue(parsing: request.body)
            } catch {
                throw SkillbusError(.invalidRound, "the round body is not JSON: \(error)")
            }
            spec = try RoundSpec(json: bodyJSON, stepLimit: settings.planStepLimit)
            guard !request.$roundID.isEmpty else { throw SkillbusError(.invalidRound, "a round needs a round id") }
        } catch {
            return [roundReply(client, request.$requestID, request.$roundID, refusal: error, shape: nil)]
        }
        let body = spec.json.serialized()
        if var existing = roundRuns[roundKey] {
            guard existing.body == body else {
                let error = SkillbusError(
                    .roundConflict,
                    "round '\(request.roundID)' was already sent with a different body; use a new round id")
                return [roundReply(client, request.$requestID, request.$roundID, refusal: error, shape: spec.shape)]
            }
            if let document = existing.document {
                return [
                    .toClient(
                        client, .round(requestID: request.$requestID, roundID: request.$roundID, document: document))
                ]
            }
            existing.clients.append((client, request.$requestID))
            roundRuns[roundKey] = existing
            return []
        }
        let invocations: [RoundInvocation]
        do throws(SkillbusError) {
            invocations = try plannedInvocations(spec)
        } catch {
            return [roundReply(client, request.$requestID, request.$roundID, refusal: error, shape: spec.shape)]
        }
        let timeoutMs = request.timeoutMs ?? defaultTimeoutMs(skill: spec.skill)
        roundRuns[roundKey] = RoundRun(
            id: request.$roundID, session: request.$sessionID, spec: spec, body: body, accepted: now,
            deadline: now &+ UInt64(timeoutMs) * 1_000_000, clients: [(client, request.$requestID)],
            invocations: invocations)
        runningRounds += 1
        var actions: [CoordinatorAction] = [
            .publish(
                .roundAccepted(round: request.roundID, shape: spec.shape, invocations: invocations.map(\.id)))
        ]
        actions += advance(roundKey, now: now)
        return actions
    }

    /// The invocations a round will make, checked against the registry: nothing runs if one is impossible.
    func plannedInvocations(_ spec: RoundSpec) throws(SkillbusError) -> [RoundInvocation] {
        func offered(_ skill: String) throws(SkillbusError) {
            guard providers[skill]?.isEmpty == false else {
                let list = providers.keys.sorted().joined(separator: ", ")
                throw SkillbusError(
                    .unknownSkill, "no agent offers skill '\(skill)'; offered: \(list.isEmpty ? "none" : list)",
                    details: ["skill": .string(skill)])
            }
        }
        switch spec {
        case .invoke(let skill, let parameters):
            try offered(skill)
            return [RoundInvocation(id: skill, skill: skill, target: nil, parameters: parameters, after: [])]
        case .fanout(let skill, let parameters, let agents, _):
            try offered(skill)
            let names = agents ?? (providers[skill] ?? []).compactMap { workers[$0]?.name }.sorted()
            for name in names {
                guard let peer = peerByName[name], workers[peer]?.skills[skill] != nil else {
                    throw SkillbusError(
                        .unknownSkill, "agent '\(name)' is not registered or does not offer '\(skill)'",
                        details: ["agent": .string(name), "skill": .string(skill)])
                }
            }
            return names.map { RoundInvocation(id: $0, skill: skill, target: $0, parameters: parameters, after: []) }
        case .plan(let steps, _):
            for step in steps { try offered(step.skill) }
            return steps.map {
                RoundInvocation(
                    id: $0.id, skill: $0.skill, target: nil, parameters: $0.parameters, after: $0.dependencies)
            }
        }
    }

    /// Starts every invocation that can start; finishes the round when nothing runs or can start.
    mutating func advance(_ roundKey: ByteKey, now: UInt64) -> [CoordinatorAction] {
        var actions: [CoordinatorAction] = []
        var started = true
        while started {
            started = false
            guard let run = roundRuns[roundKey], !run.isFinished else { return actions }
            for index in run.invocations.indices where run.invocations[index].state == .waiting {
                let invocation = run.invocations[index]
                if run.stopped {
                    actions += skip(roundKey, index, because: nil)
                    started = true
                    continue
                }
                let dependencies = invocation.after.compactMap { id in run.invocations.first { $0.id == id } }
                guard dependencies.allSatisfy({ $0.state == .done }) else { continue }
                if let failed = dependencies.first(where: { $0.status != "ok" }) {
                    actions += skip(roundKey, index, because: failed.id)
                    started = true
                    continue
                }
                actions += start(roundKey, index, now: now)
                started = true
            }
        }
        if let run = roundRuns[roundKey], !run.isFinished,
            run.invocations.allSatisfy({ $0.state == .done || $0.subCallRequest != nil })
        {
            actions += finishRound(roundKey, now: now)
        }
        return actions
    }

    /// An invocation that will not run: the round stopped, or a step it depends on did not succeed.
    mutating func skip(_ roundKey: ByteKey, _ index: Int, because failedStep: String?) -> [CoordinatorAction] {
        roundRuns[roundKey]!.invocations[index].state = .done
        roundRuns[roundKey]!.invocations[index].status = "skipped"
        if let failedStep {
            roundRuns[roundKey]!.invocations[index].error =
                SkillbusError(.skillFailed, "skipped: step '\(failedStep)' did not succeed").json
        }
        let invocation = roundRuns[roundKey]!.invocations[index]
        return [
            .publish(
                .invocationDone(
                    round: roundRuns[roundKey]!.roundText, invocation: invocation.id, skill: invocation.skill,
                    agent: "", status: "skipped", durationMicros: 0, deduplicated: false))
        ]
    }

    /// Sends one invocation of a round on its way: shared with an identical one, or dispatched.
    mutating func start(_ roundKey: ByteKey, _ index: Int, now: UInt64) -> [CoordinatorAction] {
        let run = roundRuns[roundKey]!
        let invocation = run.invocations[index]
        roundRuns[roundKey]!.invocations[index].state = .running
        let parameters: JSONValue
        switch invocation.parameters.resolvingReferences(run.results) {
        case .success(let resolved): parameters = resolved
        case .failure(let error):
            let message = "step '\(invocation.id)': \(error.message)"
            return stepDone(
                roundKey, index,
                Outcome(
                    status: .error, agent: [],
                    payload: SkillbusError(error.code, message, details: error.details).json.serialized(),
                    durationMicros: 0), deduplicated: false, now: now)
        }
        let bytes = parameters.serialized()
        // A fan-out's invocations are told apart by their agent: "skill@agent" cannot be a skill identifier.
        let keySkill = invocation.target.map { invocation.skill + "@" + $0 } ?? invocation.skill
        let schema = ledger.registry.skills[invocation.skill]?.descriptor.parameters
        let key = SingleFlight.canonicalKey(skill: keySkill, parameters: bytes, schema: { _ in schema })
        if let key {
            if let first = run.firstByKey[key] {
                roundRuns[roundKey]!.invocations[index].reusedFrom = first
            } else {
                roundRuns[roundKey]!.firstByKey[key] = invocation.id
            }
        }
        var request = Request(
            origin: .step(round: roundKey, index: index), requestID: Array(invocation.id.utf8), roundID: run.id,
            sessionID: run.session, skill: invocation.skill, parameters: bytes, accepted: now, deadline: run.deadline)
        if let target = invocation.target { request.target = peerByName[target] }
        if settings.deduplication {
            let admission = singleFlight.admit(
                round: run.id, skill: keySkill, parameters: bytes, key: key, waiter: request.origin,
                schema: { _ in schema })
            switch admission {
            case .first(let execution): request.shared = execution
            case .joined:
                roundRuns[roundKey]!.invocations[index].deduplicated = true
                return [
                    .publish(
                        .invocationDeduplicated(
                            round: run.roundText, invocation: invocation.id,
                            reusing: roundRuns[roundKey]!.invocations[index].reusedFrom ?? ""))
                ]
            case .finished(let outcome):
                return [
                    .publish(
                        .invocationDeduplicated(
                            round: run.roundText, invocation: invocation.id,
                            reusing: roundRuns[roundKey]!.invocations[index].reusedFrom ?? ""))
                ]
                    + stepDone(roundKey, index, outcome, deduplicated: true, now: now)
            case .unshared: break
            }
        }
        roundRuns[roundKey]!.invocations[index].reusedFrom = nil
        return route(request, now: now)
    }

    /// Sends a request to its target (a fan-out's agent), or to the least loaded provider with a free
    /// slot; else it waits in the bounded queue, or is answered `busy`.
    mutating func route(_ request: Request, now: UInt64) -> [CoordinatorAction] {
        if let target = request.target {
            guard let worker = workers[target] else {
                return fail(
                    request, SkillbusError(.agentLost, "the agent left before its invocation started"), agent: "",
                    executed: false, now: now)
            }
            if worker.inFlight < worker.capacity { return dispatch(request, to: target, now: now) }
            guard waitingCount < settings.queueLimit else {
                let error = SkillbusError(
                    .busy,
                    "agent '\(worker.name)' is at capacity and the wait queue is full (\(settings.queueLimit) requests)"
                )
                return fail(request, error, agent: "", executed: false, now: now)
            }
            targetedWaiting[target, default: []].append(request)
            waitingCount += 1
            return []
        }
        guard let candidates = providers[request.skill], !candidates.isEmpty else {
            let offered = providers.keys.sorted()
            let list =
                offered.isEmpty ? "no skills are offered right now" : "offered: " + offered.joined(separator: ", ")
            let error = SkillbusError(
                .unknownSkill, "no agent offers skill '\(request.skill)'; \(list)",
                details: ["skill": .string(request.skill), "offered": .array(offered.map { .string($0) })])
            return fail(request, error, agent: "", executed: false, now: now)
        }
        if let worker = pickProvider(candidates) { return dispatch(request, to: worker, now: now) }
        guard waitingCount < settings.queueLimit else {
            let error = SkillbusError(
                .busy,
                "all \(candidates.count) agent(s) offering '\(request.skill)' are at capacity and the wait queue is "
                    + "full (\(settings.queueLimit) requests)")
            return fail(request, error, agent: "", executed: false, now: now)
        }
        waiting[request.skill, default: []].append(request)
        waitingCount += 1
        guard publishesRequestEvents, case .client = request.origin else { return [] }
        return [
            .publish(
                .requestQueued(
                    round: request.roundText, request: request.requestText, skill: request.skill, waiting: waitingCount)
            )
        ]
    }

    /// One invocation of a round ended (or was answered from an identical one).
    mutating func stepDone(
        _ roundKey: ByteKey, _ index: Int, _ outcome: Outcome, deduplicated: Bool, now: UInt64
    ) -> [CoordinatorAction] {
        guard var run = roundRuns[roundKey], !run.isFinished, run.invocations.indices.contains(index) else { return [] }
        var invocation = run.invocations[index]
        guard invocation.state != .done else { return [] }
        invocation.deduplicated = deduplicated || invocation.deduplicated
        if !invocation.deduplicated { invocation.reusedFrom = nil }
        invocation.record(outcome)
        if let result = invocation.result { run.results[invocation.id] = result }
        run.invocations[index] = invocation
        var actions: [CoordinatorAction] = [
            .publish(
                .invocationDone(
                    round: run.roundText, invocation: invocation.id, skill: invocation.skill, agent: invocation.agent,
                    status: invocation.status, durationMicros: invocation.durationMicros,
                    deduplicated: invocation.deduplicated))
        ]
        switch run.spec {
        case .plan(_, let continueOnFailure):
            if invocation.status != "ok" && !continueOnFailure { run.stopped = true }
        case .fanout(_, _, _, .first):
            if invocation.status == "ok" {
                run.stopped = true
                roundRuns[roundKey] = run
                actions += cancelLosers(roundKey, now: now)
                run = roundRuns[roundKey]!
            }
        default:
            break
        }
        roundRuns[roundKey] = run
        actions += advance(roundKey, now: now)
        return actions
    }

    /// `first`: the others are cancelled, running or still waiting for a slot.
    mutating func cancelLosers(_ roundKey: ByteKey, now: UInt64) -> [CoordinatorAction] {
        var actions: [CoordinatorAction] = []
        guard let run = roundRuns[roundKey] else { return [] }
        for (invocationID, entry) in running where !entry.answered {
            guard case .step(let key, let index) = entry.request.origin, key == roundKey else { continue }
            running[invocationID]!.answered = true
            let agent = workers[entry.worker]?.name ?? ""
            // Announced before its outcome, so the feed reads: cancelled, then done, then the round.
            actions.append(.toWorker(entry.worker, .cancel(invocationID: invocationID)))
            actions.append(
                .publish(
                    .invocationCancelled(round: run.roundText, invocation: run.invocations[index].id, agent: agent)))
            actions += fail(
                entry.request, SkillbusError(.cancelled, "another agent answered first"), agent: agent, now: now)
        }
        for (peer, queue) in targetedWaiting {
            let (losers, kept) = queue.split { $0.isStep(of: roundKey) }
            guard !losers.isEmpty else { continue }
            targetedWaiting[peer] = kept.isEmpty ? nil : kept
            waitingCount -= losers.count
            for request in losers {
                if case .step(_, let index) = request.origin {
                    actions.append(
                        .publish(
                            .invocationCancelled(
                                round: run.roundText, invocation: run.invocations[index].id,
                                agent: workers[peer]?.name ?? "")))
                }
                actions += fail(
                    request, SkillbusError(.cancelled, "another agent answered first"), agent: "", executed: false,
                    now: now)
            }
        }
        return actions
    }

    /// Builds the document, answers every waiting client, and keeps it for the same round id sent again.
    mutating func finishRound(_ roundKey: ByteKey, now: UInt64) -> [CoordinatorAction] {
        guard var run = roundRuns[roundKey] else { return [] }
        let document = roundDocument(run, now: now)
        run.document = document.serialized()
        run.finishedAt = now
        roundRuns[roundKey] = run
        finishedRoundRuns.append(roundKey, at: now)
        runningRounds -= 1
        var actions = run.clients.map { waiter in
            CoordinatorAction.toClient(
                waiter.client, .round(requestID: waiter.requestID, roundID: run.id, document: run.document!))
        }
        actions.append(
            .publish(
                .roundDone(
                    round: run.roundText, status: document["status"]?.stringValue ?? "error",
                    summary: document["summary"] ?? .null)))
        return actions
    }

    /// Forgets finished rounds' documents after the retention window.
    mutating func evictRoundRuns(now: UInt64) {
        let retention = UInt64(settings.roundRetentionMs) * 1_000_000
        while let (key, at) = finishedRoundRuns.oldest,
            at &+ retention <= now || finishedRoundRuns.count > settings.retainedRoundsLimit
        {
            finishedRoundRuns.removeOldest()
            if roundRuns[key]?.finishedAt == at { roundRuns[key] = nil }
        }
    }

    /// A REQUEST inside a running round (a skill's sub-call) is listed in the round's document.
    mutating func noteSubCall(_ request: InvokeRequest, deduplicated: Bool) {
        let roundKey = ByteKey(request.$roundID)
        guard var run = roundRuns[roundKey], !run.isFinished else { return }
        run.subCalls += 1
        var invocation = RoundInvocation(
            id: "sub-\(run.subCalls)", skill: request.skill, target: nil, parameters: .null, after: [])
        invocation.state = .running
        invocation.subCallRequest = request.$requestID
        invocation.deduplicated = deduplicated
        if let key = SingleFlight.canonicalKey(
            skill: request.skill, parameters: request.parameters,
            schema: { ledger.registry.skills[$0]?.descriptor.parameters })
        {
            if let first = run.firstByKey[key] {
                if deduplicated { invocation.reusedFrom = first }
            } else {
                run.firstByKey[key] = invocation.id
            }
        }
        run.invocations.append(invocation)
        roundRuns[roundKey] = run
    }

    /// The REPLY to a sub-call went out: record it in its round's document.
    mutating func noteSubCallDone(roundID: [UInt8], requestID: [UInt8], _ outcome: Outcome) {
        let roundKey = ByteKey(roundID)
        guard var run = roundRuns[roundKey], !run.isFinished,
            let index = run.invocations.firstIndex(where: { $0.subCallRequest == requestID && $0.state != .done })
        else { return }
        run.invocations[index].record(outcome)
        roundRuns[roundKey] = run
    }

    /// A refused round is answered with a document too: status error, nothing executed.
    func roundReply(
        _ client: PeerID, _ requestID: [UInt8], _ roundID: [UInt8], refusal: SkillbusError, shape: String?
    ) -> CoordinatorAction {
        let document: JSONValue = [
            "round": .string(String(decoding: roundID, as: UTF8.self)), "shape": shape.map { .string($0) } ?? .null,
            "status": "error", "error": refusal.json, "result": .null, "invocations": [], "durationMs": 0,
            "summary": ["invocations": 0, "executions": 0, "deduplicated": 0, "failed": 0, "totalMs": 0],
        ]
        return .toClient(client, .round(requestID: requestID, roundID: roundID, document: document.serialized()))
    }
}

extension CoordinatorState.Request {
    func isStep(of round: ByteKey) -> Bool {
        if case .step(let key, _) = origin { return key == round }
        return false
    }
}

extension RoundRun {
    var roundText: String { String(decoding: id, as: UTF8.self) }
}
