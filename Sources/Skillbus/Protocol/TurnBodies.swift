/// Which turn of which session a state belongs to.
public struct TurnRef: Sendable, Equatable {
    public var session: String
    public var turn: String
    /// With `executingSkill`: the parameters of the call that starts, for whoever draws it.
    public var parameters: JSONValue?

    public init(session: String, turn: String, parameters: JSONValue? = nil) {
        self.session = session
        self.turn = turn
        self.parameters = parameters
    }
}

/// One skill call of a turn as it ended: the turn document's `calls` entries (§5.18), STEP, PROGRESS
/// and `turn.call` on the feed.
public struct TurnCall: Sendable, Equatable {
    public var skill: String
    public var parameters: [String: JSONValue]
    /// The agent that ran it; empty when it never ran (its parameters were refused, say).
    public var agent: String
    public var durationMs: Double
    public var outcome: Result<SkillResult, SkillbusError>

    public init(
        skill: String, parameters: [String: JSONValue], agent: String, durationMs: Double,
        outcome: Result<SkillResult, SkillbusError>
    ) {
        self.skill = skill
        self.parameters = parameters
        self.agent = agent
        self.durationMs = durationMs
        self.outcome = outcome
    }

    public var json: JSONValue {
        var object: [String: JSONValue] = [
            "skill": .string(skill), "parameters": .object(parameters), "agent": .string(agent),
            "durationMs": .number((durationMs * 1000).rounded() / 1000),
        ]
        switch outcome {
        case .success(let result):
            object["status"] = "ok"
            object["result"] = result.json
        case .failure(let error):
            object["status"] = "error"
            object["error"] = error.json
        }
        return .object(object)
    }

    public init(json: JSONValue) throws(SkillbusError) {
        let reader = DocumentReader(json, "call")
        let status = try reader.string("status")
        let outcome: Result<SkillResult, SkillbusError>
        switch status {
        case "ok": outcome = .success(try SkillResult(json: reader.optional("result") ?? .null))
        case "error": outcome = .failure(SkillbusError(json: reader.optional("error") ?? .null))
        default: throw reader.problem("'status' must be ok or error, not '\(status)'")
        }
        guard let parameters = (reader.optional("parameters") ?? [:]).objectValue else {
            throw reader.problem("'parameters' must be an object")
        }
        self.init(
            skill: try reader.string("skill"), parameters: parameters, agent: try reader.optionalString("agent") ?? "",
            durationMs: reader.optional("durationMs")?.doubleValue ?? 0, outcome: outcome)
    }
}

/// What a client that asked for it hears while its turn runs (PROGRESS, §3.2): each state as it happens,
/// and each call as it ends.
public enum TurnProgress: Sendable, Equatable {
    case state(AgentState, parameters: JSONValue?)
    case call(TurnCall)
}

/// A client asks an agent to take a turn: answer `message`, calling skills as its planner decides
/// (ASK, PROTOCOL §3.7).
public struct AskRequest: Sendable, Equatable {
    public var requestID: String
    /// The turn's round: its skill calls are invocations of it.
    public var roundID: String
    public var sessionID: String
    /// The agent to ask; empty: the session's agent, else the least loaded agent with a planner.
    public var agent: String
    public var timeoutMs: Int?
    public var message: String
    /// The client wants the turn's states and calls as they happen (PROGRESS).
    public var progress: Bool

    public init(
        requestID: String, roundID: String, sessionID: String = "", agent: String = "", timeoutMs: Int? = nil,
        message: String, progress: Bool = false
    ) {
        self.progress = progress
        self.requestID = requestID
        self.roundID = roundID
        self.sessionID = sessionID
        self.agent = agent
        self.timeoutMs = timeoutMs
        self.message = message
    }
}

/// The bus asks a worker to take a turn (TURN, PROTOCOL §4.2).
public struct TurnRequest: Sendable, Equatable {
    public var turnID: String
    public var roundID: String
    public var sessionID: String
    /// Milliseconds left for the whole turn when the bus sent it.
    public var deadlineMs: Int
    public var message: String
    /// The round is the turn's own (nothing else ran in it): the agent may run calls itself, reporting
    /// them with CLAIM and CALLED, until it sends RELEASE (PROTOCOL §4.2).
    public var leased: Bool

    public init(
        turnID: String, roundID: String, sessionID: String, deadlineMs: Int, message: String, leased: Bool = false
    ) {
        self.leased = leased
        self.turnID = turnID
        self.roundID = roundID
        self.sessionID = sessionID
        self.deadlineMs = deadlineMs
        self.message = message
    }
}
