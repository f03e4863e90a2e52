import Foundation

/// One event on the feed. Kept as plain values so that the coordinator only builds JSON when
/// somebody subscribes to the event's topic.
public enum FeedEvent: Sendable, Equatable {
    case agentJoined(agent: String, skills: [String], capacity: Int)
    case agentLeft(agent: String, reason: String)
    case agentState(agent: String, state: AgentState)
    /// A state of one turn, published as it happens (`agent.state` with `session` and `turn`).
    case turnState(agent: String, state: AgentState, turn: TurnRef)
    /// An invocation of a skill that needs confirmation waits for the client's approval.
    case confirmationPending(round: String, confirmation: String, skill: String, parameters: JSONValue)
    /// The approval came (`approved`), was refused, or did not come in time.
    case confirmationDone(confirmation: String, approved: Bool)
    /// A batch of a turn's reply as it streams.
    case turnStream(agent: String, turn: String, text: String)
    /// A call of a turn ended.
    case turnCall(agent: String, turn: TurnRef, call: TurnCall)
    /// A turn's agent asked another agent (or role) a message: the nested turn `child` runs it.
    case turnDelegated(agent: String, turn: TurnRef, round: String, to: String, role: String?, message: String, child: String)
    /// A turn's agent handed its session over: turn `next` of agent `to` takes the same message.
    case turnHandoff(agent: String, turn: TurnRef, to: String, note: String, next: String)
    case registrationRefused(agent: String, error: SkillbusError)
    /// An agent's store stopped taking writes (`problem`), or took them again (nil).
    case agentStorage(agent: String, problem: SkillbusError?)
    /// `waitingFor`: `capacity` (no provider had a free slot) or `rateLimit` (a rate limit held it back).
    case requestQueued(round: String, request: String, skill: String, waiting: Int, waitingFor: String)
    case requestDispatched(round: String, request: String, skill: String, agent: String, invocation: String)
    /// An invocation identical to one its round already ran (`finished`) or runs: it is not executed again.
    case requestDeduplicated(round: String, request: String, skill: String, finished: Bool)
    case requestDone(
        round: String, request: String, skill: String, agent: String, status: ReplyStatus, durationMicros: Int,
        payload: [UInt8])
    case roundAccepted(round: String, shape: String, invocations: [String])
    /// `dispatch`: the INVOKE's invocation id (`i<N>`), as the worker sees it.
    case invocationDispatched(round: String, invocation: String, skill: String, agent: String, dispatch: String)
    case invocationDeduplicated(round: String, invocation: String, reusing: String)
    /// Answered from the result cache (PROTOCOL §4.16), without running: `agent` ran it when it was stored.
    case requestCached(round: String, request: String, skill: String, agent: String)
    case invocationCached(round: String, invocation: String, skill: String, agent: String)
    case invocationDone(
        round: String, invocation: String, skill: String, agent: String, status: InvocationStatus,
        durationMicros: Int, deduplicated: Bool)
    /// The bus stopped one of a round's invocations: CANCEL to its agent, or taken out of a queue.
    /// `reason`: `lost race`, `client` or `deadline`.
    case invocationCancelled(round: String, invocation: String, agent: String, reason: String)
    /// The bus stopped a REQUEST's execution (CANCEL to its agent, or out of a queue): `client` or `deadline`.
    case requestCancelled(round: String, request: String, skill: String, agent: String, reason: String)
    /// A REQUEST's attempt `attempt` failed with a retryable `error` on `agent`; the next comes after `backoffMicros`.
    case requestRetrying(
        round: String, request: String, skill: String, agent: String, attempt: Int, error: SkillbusError,
        backoffMicros: Int)
    /// The same for one of a round's own invocations.
    case invocationRetrying(
        round: String, invocation: String, skill: String, agent: String, attempt: Int, error: SkillbusError,
        backoffMicros: Int)
    /// An agent sent no RESULT within the grace period after CANCEL: its skill seems to ignore cancellation.
    /// `request`: the REQUEST's request id or the round invocation's id; `invocation`: the INVOKE's `i<N>`.
    case cancelIgnored(round: String, request: String, skill: String, agent: String, invocation: String, waitedMs: Int)
    /// Partial output of a running execution, once per OUTPUT whoever waits for it; `dispatch` is its
    /// INVOKE's id, as `request.dispatched` and `invocation.dispatched` name it.
    case invocationOutput(round: String, skill: String, agent: String, dispatch: String, OutputBatch)
    case roundDone(round: String, status: ReplyStatus, summary: RoundDocument.Summary)
    /// One change to the registry; sequenced, see `ReplicaSync`.
    case registryUpdate(RegistryUpdate)
    /// Once per heartbeat interval: where the registry stands, so an idle replica notices a lost update.
    case registryHeartbeat(epoch: String, sequence: UInt64, intervalMs: Int)
    /// A connection the bus or feed socket refused (unknown key, a role the feed excludes, no keys at all);
    /// `refused` counts every refusal since the coordinator started, published or not.
    case securityRefused(socket: String, address: String, key: String, reason: String, refused: Int)
    /// A message or feed subscription over one of the bus's limits (§9), refused before it was held
    /// whole; `refused` counts every such refusal since the coordinator started, published or not.
    case limitRefused(socket: String, limit: String, reason: String, refused: Int)
    /// This coordinator took the lead of its group (PROTOCOL §3.11).
    case coordinatorLeader(group: String, epoch: Int, leader: GroupLeader)
    /// The group's journal waits for its database with `rounds` rounds (0: it caught up; PROTOCOL §3.5.9).
    case journalBehind(group: String, rounds: Int)

    /// Topics are dotted names; watchers subscribe by prefix (`agent.` gets every agent event).
    public var topic: String {
        switch self {
        case .agentJoined: "agent.joined"
        case .agentLeft: "agent.left"
        case .agentState, .turnState: "agent.state"
        case .turnStream: "turn.stream"
        case .turnCall: "turn.call"
        case .turnDelegated: "turn.delegated"
        case .turnHandoff: "turn.handoff"
        case .confirmationPending: "invocation.pendingConfirmation"
        case .confirmationDone: "invocation.confirmation"
        case .registrationRefused: "agent.refused"
        case .agentStorage: "agent.storage"
        case .requestQueued: "request.queued"
        case .requestDispatched: "request.dispatched"
        case .requestDeduplicated: "request.deduplicated"
        case .requestDone: "request.done"
        case .roundAccepted: "round.accepted"
        case .invocationDispatched: "invocation.dispatched"
        case .invocationDeduplicated: "invocation.deduplicated"
        case .requestCached: "request.cached"
        case .invocationCached: "invocation.cached"
        case .invocationDone: "invocation.done"
        case .invocationCancelled: "invocation.cancelled"
        case .invocationOutput: "invocation.output"
        case .requestCancelled: "request.cancelled"
        case .requestRetrying: "request.retrying"
        case .invocationRetrying: "invocation.retrying"
        case .cancelIgnored: "invocation.cancelIgnored"
        case .roundDone: "round.done"
        case .registryUpdate: "registry.update"
        case .registryHeartbeat: "registry.heartbeat"
        case .securityRefused: "security.refused"
        case .limitRefused: "limits.refused"
        case .coordinatorLeader: "coordinator.leader"
        case .journalBehind: "coordinator.journal"
        }
    }

    /// A JSON member of an event's body.
    public typealias Member = (key: String, value: JSONValue)

    /// The event's JSON body (`type` and `time` are added when it is published) as its members in key order,
    /// the order JSON is written in here: publishing an event under load writes them as they are, with no
    /// dictionary to build and sort (FeedEventTests holds every kind to that order).
    public var members: [Member] {
        func string(_ text: String) -> JSONValue { .string(text) }
        func number(_ value: Int) -> JSONValue { .number(Double(value)) }
        func milliseconds(_ micros: Int) -> JSONValue { .number(Double(micros) / 1000) }
        switch self {
        case .agentJoined(let agent, let skills, let capacity):
            return [("agent", string(agent)), ("capacity", number(capacity)), ("skills", .array(skills.map(string)))]
        case .agentLeft(let agent, let reason):
            return [("agent", string(agent)), ("reason", string(reason))]
        case .agentState(let agent, let state):
            return Self.ordered(state.json.objectValue ?? [:], adding: ("agent", string(agent)))
        case .confirmationPending(let round, let confirmation, let skill, let parameters):
            return [
                ("confirmation", string(confirmation)), ("parameters", parameters), ("round", string(round)),
                ("skill", string(skill)),
            ]
        case .confirmationDone(let confirmation, let approved):
            return [("approved", .bool(approved)), ("confirmation", string(confirmation))]
        case .turnStream(let agent, let turn, let text):
            return [("agent", string(agent)), ("text", string(text)), ("turn", string(turn))]
        case .turnCall(let agent, let turn, let call):
            return [
                ("agent", string(agent)), ("call", call.json), ("session", string(turn.session)),
                ("turn", string(turn.turn)),
            ]
        case .turnDelegated(let agent, let turn, let round, let to, let role, let message, let child):
            var members: [Member] = [
                ("agent", string(agent)), ("child", string(child)), ("message", string(message)),
            ]
            if let role { members.append(("role", string(role))) }
            members += [
                ("round", string(round)), ("session", string(turn.session)), ("to", string(to)),
                ("turn", string(turn.turn)),
            ]
            return members
        case .turnHandoff(let agent, let turn, let to, let note, let next):
            return [
                ("agent", string(agent)), ("next", string(next)), ("note", string(note)),
                ("session", string(turn.session)), ("to", string(to)), ("turn", string(turn.turn)),
            ]
        case .turnState(let agent, let state, let turn):
            return Self.ordered(state.json(in: turn).objectValue ?? [:], adding: ("agent", string(agent)))
        case .registrationRefused(let agent, let error):
            return [("agent", string(agent)), ("error", error.json)]
        case .agentStorage(let agent, let problem):
            return [("agent", string(agent)), ("problem", problem?.json ?? .null)]
        case .requestQueued(let round, let request, let skill, let waiting, let waitingFor):
            return [
                ("request", string(request)), ("round", string(round)), ("skill", string(skill)),
                ("waiting", number(waiting)), ("waitingFor", string(waitingFor)),
            ]
        case .requestDispatched(let round, let request, let skill, let agent, let invocation):
            return [
                ("agent", string(agent)), ("invocation", string(invocation)), ("request", string(request)),
                ("round", string(round)), ("skill", string(skill)),
            ]
        case .requestCached(let round, let request, let skill, let agent):
            return [("agent", string(agent)), ("request", string(request)), ("round", string(round)), ("skill", string(skill))]
        case .invocationCached(let round, let invocation, let skill, let agent):
            return [
                ("agent", string(agent)), ("invocation", string(invocation)), ("round", string(round)),
                ("skill", string(skill)),
            ]
        case .requestDeduplicated(let round, let request, let skill, let finished):
            return [
                ("request", string(request)), ("reused", string(finished ? "finished" : "running")),
                ("round", string(round)), ("skill", string(skill)),
            ]
        case .requestDone(let round, let request, let skill, let agent, let status, let micros, let payload):
            var members: [Member] = [("agent", string(agent)), ("durationMs", milliseconds(micros))]
            if status == .error { members.append(("error", (try? JSONValue(parsing: payload)) ?? .null)) }
            members += [
                ("request", string(request)), ("round", string(round)), ("skill", string(skill)),
                ("status", string(status.rawValue)),
            ]
            return members
        case .roundAccepted(let round, let shape, let invocations):
            return [("invocations", .array(invocations.map(string))), ("round", string(round)), ("shape", string(shape))]
        case .invocationDispatched(let round, let invocation, let skill, let agent, let dispatch):
            return [
                ("agent", string(agent)), ("dispatch", string(dispatch)), ("invocation", string(invocation)),
                ("round", string(round)), ("skill", string(skill)),
            ]
        case .invocationDeduplicated(let round, let invocation, let reusing):
            return [("invocation", string(invocation)), ("reusing", string(reusing)), ("round", string(round))]
        case .invocationDone(let round, let invocation, let skill, let agent, let status, let micros, let deduplicated):
            return [
                ("agent", string(agent)), ("deduplicated", .bool(deduplicated)), ("durationMs", milliseconds(micros)),
                ("invocation", string(invocation)), ("round", string(round)), ("skill", string(skill)),
                ("status", string(status.documentName)),
            ]
        case .invocationCancelled(let round, let invocation, let agent, let reason):
            return [
                ("agent", string(agent)), ("invocation", string(invocation)), ("reason", string(reason)),
                ("round", string(round)),
            ]
        case .requestCancelled(let round, let request, let skill, let agent, let reason):
            return [
                ("agent", string(agent)), ("reason", string(reason)), ("request", string(request)),
                ("round", string(round)), ("skill", string(skill)),
            ]
        case .requestRetrying(let round, let request, let skill, let agent, let attempt, let error, let micros):
            return [
                ("agent", string(agent)), ("attempt", number(attempt)), ("backoffMs", milliseconds(micros)),
                ("error", error.json), ("request", string(request)), ("round", string(round)), ("skill", string(skill)),
            ]
        case .invocationRetrying(let round, let invocation, let skill, let agent, let attempt, let error, let micros):
            return [
                ("agent", string(agent)), ("attempt", number(attempt)), ("backoffMs", milliseconds(micros)),
                ("error", error.json), ("invocation", string(invocation)), ("round", string(round)),
                ("skill", string(skill)),
            ]
        case .cancelIgnored(let round, let request, let skill, let agent, let invocation, let waitedMs):
            return [
                ("agent", string(agent)), ("invocation", string(invocation)), ("request", string(request)),
                ("round", string(round)), ("skill", string(skill)), ("waitedMs", number(waitedMs)),
            ]
        case .invocationOutput(let round, let skill, let agent, let dispatch, let batch):
            return [
                ("agent", string(agent)), ("dispatch", string(dispatch)), ("first", number(batch.first)),
                ("parts", .array(batch.parts.map(\.json))), ("round", string(round)), ("skill", string(skill)),
            ]
        case .roundDone(let round, let status, let summary):
            return [("round", string(round)), ("status", string(status.rawValue)), ("summary", summary.json)]
        case .registryUpdate(let update):
            return Self.ordered(update.fields)
        case .registryHeartbeat(let epoch, let sequence, let intervalMs):
            return [("epoch", string(epoch)), ("heartbeatMs", number(intervalMs)), ("seq", .number(Double(sequence)))]
        case .securityRefused(let socket, let address, let key, let reason, let refused):
            return [
                ("address", string(address)), ("key", string(key)), ("reason", string(reason)),
                ("refused", number(refused)), ("socket", string(socket)),
            ]
        case .limitRefused(let socket, let limit, let reason, let refused):
            return [
                ("limit", string(limit)), ("reason", string(reason)), ("refused", number(refused)),
                ("socket", string(socket)),
            ]
        case .coordinatorLeader(let group, let epoch, let leader):
            return [("epoch", number(epoch)), ("group", string(group)), ("leader", leader.json)]
        case .journalBehind(let group, let rounds):
            return [("behind", .bool(rounds > 0)), ("group", string(group)), ("rounds", number(rounds))]
        }
    }

    /// The body as a dictionary, for readers that look members up.
    public var fields: [String: JSONValue] {
        Dictionary(members.lazy.map { ($0.key, $0.value) }, uniquingKeysWith: { first, _ in first })
    }

    /// A dictionary's members (and one more) in key order.
    private static func ordered(_ fields: [String: JSONValue], adding extra: Member? = nil) -> [Member] {
        var fields = fields
        if let extra { fields[extra.key] = extra.value }
        return fields.sorted { $0.key < $1.key }.map { ($0.key, $0.value) }
    }
}
