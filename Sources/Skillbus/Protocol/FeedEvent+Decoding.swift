/// Reading feed events back: the one decoder for what `FeedEvent.encoded` publishes, used by every
/// watcher that needs more than the raw JSON (a registry replica, for one).
extension FeedEvent {
    /// The event in a published message: frame 0 the topic, frame 1 its JSON body.
    public init(message: [[UInt8]]) throws(SkillbusError) {
        guard message.count == 2 else {
            throw SkillbusError(.malformedMessage, "a feed message has 2 frames (topic, JSON), got \(message.count)")
        }
        let body: JSONValue
        do {
            body = try JSONValue(parsing: message[1])
        } catch {
            throw SkillbusError(.malformedMessage, "feed event body: \(error)")
        }
        try self.init(topic: String(decoding: message[0], as: UTF8.self), body: body)
    }

    /// The event with this topic and body; an unknown topic or a missing or mistyped field is named.
    public init(topic: String, body: JSONValue) throws(SkillbusError) {
        let field = DocumentReader(body, "feed event '\(topic)'")
        func micros() throws(SkillbusError) -> Int { Int((try field.number("durationMs") * 1000).rounded()) }
        func strings(_ key: String) throws(SkillbusError) -> [String] {
            let list = try field.array(key)
            let names = list.compactMap(\.stringValue)
            guard names.count == list.count else { throw field.problem("'\(key)' must be an array of strings") }
            return names
        }
        switch topic {
        case "agent.joined":
            self = .agentJoined(
                agent: try field.string("agent"), skills: try strings("skills"), capacity: try field.int("capacity"))
        case "agent.left":
            self = .agentLeft(agent: try field.string("agent"), reason: try field.string("reason"))
        case "agent.state":
            if let turn = try field.optionalString("turn") {
                self = .turnState(
                    agent: try field.string("agent"), state: try AgentState(json: body),
                    turn: TurnRef(
                        session: try field.optionalString("session") ?? "", turn: turn,
                        parameters: field.optional("parameters"), parent: try field.optionalString("parent"),
                        depth: field.optional("depth")?.intValue ?? 0))
            } else {
                self = .agentState(agent: try field.string("agent"), state: try AgentState(json: body))
            }
        case "agent.refused":
            guard let error = field.optional("error") else { throw field.problem("'error' is missing") }
            self = .registrationRefused(agent: try field.string("agent"), error: SkillbusError(json: error))
        case "agent.storage":
            self = .agentStorage(
                agent: try field.string("agent"), problem: field.optional("problem").map(SkillbusError.init(json:)))
        case "invocation.pendingConfirmation":
            self = .confirmationPending(
                round: try field.string("round"), confirmation: try field.string("confirmation"),
                skill: try field.string("skill"), parameters: field.optional("parameters") ?? .null)
        case "invocation.confirmation":
            self = .confirmationDone(confirmation: try field.string("confirmation"), approved: try field.bool("approved"))
        case "turn.stream":
            self = .turnStream(agent: try field.string("agent"), turn: try field.string("turn"), text: try field.string("text"))
        case "turn.call":
            self = .turnCall(
                agent: try field.string("agent"),
                turn: TurnRef(session: try field.optionalString("session") ?? "", turn: try field.string("turn")),
                call: try TurnCall(json: field.optional("call") ?? .null))
        case "turn.delegated":
            self = .turnDelegated(
                agent: try field.string("agent"),
                turn: TurnRef(session: try field.optionalString("session") ?? "", turn: try field.string("turn")),
                round: try field.string("round"), to: try field.string("to"), role: try field.optionalString("role"),
                message: try field.string("message"), child: try field.string("child"))
        case "turn.handoff":
            self = .turnHandoff(
                agent: try field.string("agent"),
                turn: TurnRef(session: try field.optionalString("session") ?? "", turn: try field.string("turn")),
                to: try field.string("to"), note: try field.string("note"), next: try field.string("next"))
        case "request.queued":
            self = .requestQueued(
                round: try field.string("round"), request: try field.string("request"), skill: try field.string("skill"),
                waiting: try field.int("waiting"), waitingFor: try field.optionalString("waitingFor") ?? "capacity")
        case "request.dispatched":
            self = .requestDispatched(
                round: try field.string("round"), request: try field.string("request"), skill: try field.string("skill"),
                agent: try field.string("agent"), invocation: try field.string("invocation"))
        case "request.deduplicated":
            let reused = try field.string("reused")
            guard reused == "finished" || reused == "running" else {
                throw field.problem("'reused' must be finished or running, got '\(reused)'")
            }
            self = .requestDeduplicated(
                round: try field.string("round"), request: try field.string("request"), skill: try field.string("skill"),
                finished: reused == "finished")
        case "request.done":
            let status: ReplyStatus = try field.oneOf("status")
            self = .requestDone(
                round: try field.string("round"), request: try field.string("request"), skill: try field.string("skill"),
                agent: try field.string("agent"), status: status, durationMicros: try micros(),
                payload: status == .error ? (field.optional("error") ?? .null).serialized() : [])
        case "round.accepted":
            self = .roundAccepted(
                round: try field.string("round"), shape: try field.string("shape"),
                invocations: try strings("invocations"))
        case "invocation.dispatched":
            self = .invocationDispatched(
                round: try field.string("round"), invocation: try field.string("invocation"),
                skill: try field.string("skill"), agent: try field.string("agent"),
                dispatch: try field.string("dispatch"))
        case "request.cached":
            self = .requestCached(
                round: try field.string("round"), request: try field.string("request"), skill: try field.string("skill"),
                agent: try field.string("agent"))
        case "invocation.cached":
            self = .invocationCached(
                round: try field.string("round"), invocation: try field.string("invocation"),
                skill: try field.string("skill"), agent: try field.string("agent"))
        case "invocation.deduplicated":
            self = .invocationDeduplicated(
                round: try field.string("round"), invocation: try field.string("invocation"),
                reusing: try field.string("reusing"))
        case "invocation.done":
            let statusName = try field.string("status")
            guard let status = InvocationStatus(documentName: statusName) else {
                throw field.problem("'status' '\(statusName)' is no invocation status")
            }
            self = .invocationDone(
                round: try field.string("round"), invocation: try field.string("invocation"),
                skill: try field.string("skill"), agent: try field.string("agent"), status: status,
                durationMicros: try micros(), deduplicated: try field.bool("deduplicated"))
        case "invocation.cancelled":
            self = .invocationCancelled(
                round: try field.string("round"), invocation: try field.string("invocation"),
                agent: try field.string("agent"), reason: try field.string("reason"))
        case "invocation.output":
            var parts: [OutputPart] = []
            for item in try field.array("parts") { parts.append(try OutputPart(json: item)) }
            self = .invocationOutput(
                round: try field.string("round"), skill: try field.string("skill"), agent: try field.string("agent"),
                dispatch: try field.string("dispatch"), OutputBatch(first: try field.int("first"), parts: parts))
        case "request.cancelled":
            self = .requestCancelled(
                round: try field.string("round"), request: try field.string("request"), skill: try field.string("skill"),
                agent: try field.string("agent"), reason: try field.string("reason"))
        case "request.retrying", "invocation.retrying":
            guard let error = field.optional("error") else { throw field.problem("'error' is missing") }
            let backoff = Int((try field.number("backoffMs") * 1000).rounded())
            if topic == "request.retrying" {
                self = .requestRetrying(
                    round: try field.string("round"), request: try field.string("request"),
                    skill: try field.string("skill"), agent: try field.string("agent"), attempt: try field.int("attempt"),
                    error: SkillbusError(json: error), backoffMicros: backoff)
            } else {
                self = .invocationRetrying(
                    round: try field.string("round"), invocation: try field.string("invocation"),
                    skill: try field.string("skill"), agent: try field.string("agent"), attempt: try field.int("attempt"),
                    error: SkillbusError(json: error), backoffMicros: backoff)
            }
        case "invocation.cancelIgnored":
            self = .cancelIgnored(
                round: try field.string("round"), request: try field.string("request"), skill: try field.string("skill"),
                agent: try field.string("agent"), invocation: try field.string("invocation"),
                waitedMs: try field.int("waitedMs"))
        case "round.done":
            self = .roundDone(
                round: try field.string("round"), status: try field.oneOf("status"),
                summary: try RoundDocument.Summary(json: field.optional("summary") ?? .null))
        case "registry.update":
            self = .registryUpdate(try RegistryUpdate(json: body))
        case "registry.heartbeat":
            let sequence = try field.int("seq")
            guard sequence >= 0 else { throw field.problem("'seq' must not be negative") }
            self = .registryHeartbeat(
                epoch: try field.string("epoch"), sequence: UInt64(sequence), intervalMs: try field.int("heartbeatMs"))
        case "security.refused":
            self = .securityRefused(
                socket: try field.string("socket"), address: try field.string("address"), key: try field.string("key"),
                reason: try field.string("reason"), refused: try field.int("refused"))
        case "limits.refused":
            self = .limitRefused(
                socket: try field.string("socket"), limit: try field.string("limit"), reason: try field.string("reason"),
                refused: try field.int("refused"))
        case "coordinator.leader":
            guard let leader = body["leader"].flatMap(GroupLeader.init(json:)) else {
                throw field.problem("'leader' must be a leader object (name, bus, feed, epoch, since)")
            }
            self = .coordinatorLeader(group: try field.string("group"), epoch: try field.int("epoch"), leader: leader)
        case "coordinator.journal":
            self = .journalBehind(group: try field.string("group"), rounds: try field.int("rounds"))
        default:
            throw SkillbusError(.malformedMessage, "unknown feed topic '\(topic.prefix(64))'")
        }
    }
}
