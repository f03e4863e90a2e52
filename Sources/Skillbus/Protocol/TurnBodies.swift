/// Which turn of which session a state belongs to.
public struct TurnRef: Sendable, Equatable {
    public var session: String
    public var turn: String
    /// With `executingSkill`: the parameters of the call that starts, for whoever draws it.
    public var parameters: JSONValue?
    /// For a nested turn (on the feed): the turn whose agent asked for it, and how deep it is.
    public var parent: String?
    public var depth = 0

    public init(session: String, turn: String, parameters: JSONValue? = nil, parent: String? = nil, depth: Int = 0) {
        self.session = session
        self.turn = turn
        self.parameters = parameters
        self.parent = parent
        self.depth = depth
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
    /// A step that asked another agent (its `parameters` are `{"message"}`): whom, and that turn's document.
    public var asked: AgentTarget?
    public var nestedTurn: JSONValue?

    public init(
        skill: String, parameters: [String: JSONValue], agent: String, durationMs: Double,
        outcome: Result<SkillResult, SkillbusError>, asked: AgentTarget? = nil, nestedTurn: JSONValue? = nil
    ) {
        self.asked = asked
        self.nestedTurn = nestedTurn
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
        if let asked {
            object["skill"] = nil
            object["parameters"] = nil
            object["ask"] = ["to": .string(asked.text), "message": parameters["message"] ?? ""]
            object["turn"] = nestedTurn ?? .null
        }
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

    /// `json` written straight to bytes, members in key order (STEP and the turn document carry it).
    func write(to out: inout [UInt8]) {
        var members = JSONMemberWriter()
        out.append(UInt8(ascii: "{"))
        members.string("agent", agent, to: &out)
        if let asked {
            members.value("ask", ["message": parameters["message"] ?? "", "to": .string(asked.text)], to: &out)
        }
        members.number("durationMs", (durationMs * 1000).rounded() / 1000, to: &out)
        if case .failure(let error) = outcome { members.value("error", error.json, to: &out) }
        if asked == nil { members.value("parameters", .object(parameters), to: &out) }
        if case .success(let result) = outcome { members.value("result", result.json, to: &out) }
        if asked == nil { members.string("skill", skill, to: &out) }
        if case .success = outcome {
            members.string("status", "ok", to: &out)
        } else {
            members.string("status", "error", to: &out)
        }
        if asked != nil { members.value("turn", nestedTurn, to: &out) }
        out.append(UInt8(ascii: "}"))
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
        let agent = try reader.optionalString("agent") ?? ""
        let durationMs = reader.optional("durationMs")?.doubleValue ?? 0
        if let ask = reader.optional("ask") {
            guard let to = ask["to"]?.stringValue.flatMap(AgentTarget.init), let message = ask["message"]?.stringValue
            else { throw reader.problem("'ask' needs 'to' and 'message' strings") }
            self.init(
                skill: "", parameters: ["message": .string(message)], agent: agent, durationMs: durationMs,
                outcome: outcome, asked: to, nestedTurn: reader.optional("turn"))
            return
        }
        guard let parameters = (reader.optional("parameters") ?? [:]).objectValue else {
            throw reader.problem("'parameters' must be an object")
        }
        self.init(
            skill: try reader.string("skill"), parameters: parameters, agent: agent, durationMs: durationMs,
            outcome: outcome)
    }
}

/// What a client that asked for it hears while its turn runs (PROGRESS, §3.2): each state as it happens,
/// and each call as it ends — also of the turns nested under it (another agent's, `depth` deep).
public enum TurnProgress: Sendable, Equatable {
    case state(AgentState, parameters: JSONValue?)
    case call(TurnCall)
    indirect case nested(depth: Int, TurnProgress)
}

/// A client asks an agent to take a turn: answer `message`, calling skills as its planner decides
/// (ASK, PROTOCOL §3.7).
public struct AskRequest: Sendable, Equatable {
    public var requestID: String
    /// The turn's round: its skill calls are invocations of it.
    public var roundID: String
    public var sessionID: String
    /// The agent to ask, or `role:NAME`; empty: the session's agent, else the default agent, else the least
    /// loaded agent with a planner.
    public var agent: String
    public var timeoutMs: Int?
    public var message: String
    /// The client wants the turn's states and calls as they happen (PROGRESS).
    public var progress: Bool
    /// The turn this ASK is a step of (an agent delegating, §3.7.1); empty for a turn of its own.
    public var parentTurnID: String

    public init(
        requestID: String, roundID: String, sessionID: String = "", agent: String = "", timeoutMs: Int? = nil,
        message: String, progress: Bool = false, parentTurnID: String = ""
    ) {
        self.progress = progress
        self.parentTurnID = parentTurnID
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
    /// Where the turn stands in a team: asked by another agent's turn, or handed over (TURN field 8).
    public var team: TeamContext?

    public init(
        turnID: String, roundID: String, sessionID: String, deadlineMs: Int, message: String, leased: Bool = false,
        team: TeamContext? = nil
    ) {
        self.leased = leased
        self.team = team
        self.turnID = turnID
        self.roundID = roundID
        self.sessionID = sessionID
        self.deadlineMs = deadlineMs
        self.message = message
    }
}
