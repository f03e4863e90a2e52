/// Which turn of which session a state belongs to.
public struct TurnRef: Sendable, Equatable {
    public var session: String
    public var turn: String

    public init(session: String, turn: String) {
        self.session = session
        self.turn = turn
    }
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

    public init(
        requestID: String, roundID: String, sessionID: String = "", agent: String = "", timeoutMs: Int? = nil,
        message: String
    ) {
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
