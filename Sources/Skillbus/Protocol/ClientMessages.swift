import SkillbusZMQ

// MARK: - Client → bus

/// A client asks the bus to run one skill.
public struct InvokeRequest: Sendable, Equatable {
    @WireText public var requestID: String
    @WireText public var roundID: String
    @WireText public var sessionID: String
    public var skill: String
    /// Milliseconds the client will wait; nil takes the bus's default.
    public var timeoutMs: Int?
    /// The parameters, a JSON object, carried as bytes: the bus routes without parsing them.
    public var parameters: [UInt8]

    public init(
        requestID: String, roundID: String, sessionID: String = "", skill: String, timeoutMs: Int? = nil,
        parameters: [UInt8]
    ) {
        self.init(
            frames: Array(requestID.utf8), Array(roundID.utf8), Array(sessionID.utf8), skill: skill,
            timeoutMs: timeoutMs, parameters: parameters)
    }

    init(
        frames requestID: [UInt8], _ roundID: [UInt8], _ sessionID: [UInt8], skill: String, timeoutMs: Int?,
        parameters: [UInt8]
    ) {
        self._requestID = WireText(bytes: requestID)
        self._roundID = WireText(bytes: roundID)
        self._sessionID = WireText(bytes: sessionID)
        self.skill = skill
        self.timeoutMs = timeoutMs
        self.parameters = parameters
    }
}

/// A client asks the bus to run a whole round (`RoundSpec` in the body).
public struct RoundRequest: Sendable, Equatable {
    @WireText public var requestID: String
    @WireText public var roundID: String
    @WireText public var sessionID: String
    /// Milliseconds for the whole round; nil takes the bus's default.
    public var timeoutMs: Int?
    /// The round body, JSON (see `RoundSpec.json`).
    public var body: [UInt8]

    public init(requestID: String, roundID: String, sessionID: String = "", timeoutMs: Int? = nil, body: [UInt8]) {
        self.init(
            frames: Array(requestID.utf8), Array(roundID.utf8), Array(sessionID.utf8), timeoutMs: timeoutMs, body: body)
    }

    init(frames requestID: [UInt8], _ roundID: [UInt8], _ sessionID: [UInt8], timeoutMs: Int?, body: [UInt8]) {
        self._requestID = WireText(bytes: requestID)
        self._roundID = WireText(bytes: roundID)
        self._sessionID = WireText(bytes: sessionID)
        self.timeoutMs = timeoutMs
        self.body = body
    }
}

/// A client asks one agent, through the bus, about its context: its sessions, a session's history, or
/// its memory (`AgentQuery`).
public struct QueryRequest: Sendable, Equatable {
    public var requestID: String
    /// The agent to ask; empty: the agent the bus last sent the query's session to.
    public var agent: String
    /// Milliseconds the client will wait; nil takes the bus's default.
    public var timeoutMs: Int?
    public var query: AgentQuery

    public init(requestID: String, agent: String, timeoutMs: Int? = nil, query: AgentQuery) {
        self.requestID = requestID
        self.agent = agent
        self.timeoutMs = timeoutMs
        self.query = query
    }
}

/// Messages a client sends to the bus.
public enum ClientMessage: Sendable, Equatable {
    /// The commands this direction carries.
    static let commands: [Wire.Command] = [
        .request, .skills, .snapshot, .agents, .round, .query, .ask, .cancel, .approve,
    ]

    case invoke(InvokeRequest)
    /// A whole round: one invocation, a fan-out or a plan; answered by one ROUND document.
    case round(RoundRequest)
    case listSkills(requestID: String)
    /// Asks for the whole registry: ENTRY messages, then SNAPSHOT with the sequence number.
    case snapshot(requestID: String)
    case listAgents(requestID: String)
    case query(QueryRequest)
    /// A message for an agent's turn; answered by one TURN.
    case ask(AskRequest)
    /// The client gives up on its REQUEST, ROUND or ASK with this request id; its answer still comes, as
    /// `cancelled` (PROTOCOL §3.10).
    case cancel(requestID: String)
    /// Everything of round `roundID` is cancelled, whoever asked for it; answered by CANCELLED.
    case cancelRound(requestID: String, roundID: String)
    /// The answer to CONFIRM: whether the invocation may run.
    case approve(confirmationID: String, approved: Bool)

    /// Where its fields start travelling as frames of their own (§2.1).
    static let layout: Wire.Layout = [.request: 7, .round: 6, .query: 5, .ask: 7]

    public func encoded() -> Multipart {
        // A client sends one per request: written straight into its envelope, like INVOKE (EnvelopeTests
        // compares the bytes with packing `fields()`, which also writes what the writer does not: a negative
        // timeout, to be refused by the bus as it was sent).
        guard case .invoke(let request) = self, (request.timeoutMs ?? 0) >= 0 else {
            return Wire.pack(fields(), Self.layout)
        }
        var envelope = Wire.EnvelopeWriter(
            Wire.clientHeaderBytes, .request,
            capacity: 32 + request.$requestID.count + request.$roundID.count + request.$sessionID.count
                + request.skill.utf8.count)
        envelope.field(request.$requestID)
        envelope.field(request.$roundID)
        envelope.field(request.$sessionID)
        envelope.field(request.skill)
        if let timeoutMs = request.timeoutMs { envelope.field(decimal: timeoutMs) } else { envelope.field([UInt8]()) }
        return [envelope.bytes, request.parameters]
    }

    /// The message as its numbered fields (PROTOCOL §3, §4), before the envelope packs them.
    func fields() -> Multipart {
        switch self {
        case .invoke(let request):
            [
                Wire.clientHeaderBytes, Wire.Command.request.frame, request.$requestID, request.$roundID,
                request.$sessionID, Array(request.skill.utf8),
                Wire.optionalDecimalField(request.timeoutMs), request.parameters,
            ]
        case .listSkills(let requestID):
            [Wire.clientHeaderBytes, Wire.Command.skills.frame, Array(requestID.utf8)]
        case .snapshot(let requestID):
            [Wire.clientHeaderBytes, Wire.Command.snapshot.frame, Array(requestID.utf8)]
        case .listAgents(let requestID):
            [Wire.clientHeaderBytes, Wire.Command.agents.frame, Array(requestID.utf8)]
        case .round(let request):
            [
                Wire.clientHeaderBytes, Wire.Command.round.frame, request.$requestID, request.$roundID,
                request.$sessionID, Wire.optionalDecimalField(request.timeoutMs), request.body,
            ]
        case .query(let request):
            [
                Wire.clientHeaderBytes, Wire.Command.query.frame, Array(request.requestID.utf8),
                Array(request.agent.utf8), Wire.optionalDecimalField(request.timeoutMs),
                request.query.json.serialized(),
            ]
        case .ask(let request):
            [
                Wire.clientHeaderBytes, Wire.Command.ask.frame, Array(request.requestID.utf8),
                Array(request.roundID.utf8), Array(request.sessionID.utf8), Array(request.agent.utf8),
                Wire.optionalDecimalField(request.timeoutMs), Array(request.message.utf8),
            ]
                + (request.progress || !request.parentTurnID.isEmpty ? [request.progress ? Array("progress".utf8) : []] : [])
                + (request.parentTurnID.isEmpty ? [] : [Array(request.parentTurnID.utf8)])
        case .cancel(let requestID):
            [Wire.clientHeaderBytes, Wire.Command.cancel.frame, Array(requestID.utf8)]
        case .cancelRound(let requestID, let roundID):
            [Wire.clientHeaderBytes, Wire.Command.cancel.frame, Array(requestID.utf8), Array(roundID.utf8)]
        case .approve(let confirmationID, let approved):
            [
                Wire.clientHeaderBytes, Wire.Command.approve.frame, Array(confirmationID.utf8),
                Array((approved ? "yes" : "no").utf8),
            ]
        }
    }

    /// Decodes a message as it arrived: its envelope and frames.
    public static func decode(_ frames: Multipart) throws(SkillbusError) -> ClientMessage {
        // A REQUEST is read in place (Wire.EnvelopeReader); whatever it does not take goes the general way.
        if var reader = Wire.EnvelopeReader(frames, header: Wire.clientHeaderBytes, command: .request),
            let requestID = reader.textBytes(), let roundID = reader.textBytes(), let sessionID = reader.textBytes(),
            sessionID.count <= Wire.maxSessionIDBytes, let skill = reader.text(), !skill.isEmpty,
            let timeout = reader.number(), timeout.empty || (1...Wire.maxTimeoutMs).contains(timeout.value),
            let parameters = reader.body(), reader.atEnd
        {
            return .invoke(
                InvokeRequest(
                    frames: requestID, roundID, sessionID, skill: skill, timeoutMs: timeout.empty ? nil : timeout.value,
                    parameters: parameters))
        }
        // So is a ROUND: `skillbus send` sends nothing else.
        if var reader = Wire.EnvelopeReader(frames, header: Wire.clientHeaderBytes, command: .round),
            let requestID = reader.textBytes(), let roundID = reader.textBytes(), let sessionID = reader.textBytes(),
            sessionID.count <= Wire.maxSessionIDBytes, let timeout = reader.number(),
            timeout.empty || (1...Wire.maxTimeoutMs).contains(timeout.value), let body = reader.body(), reader.atEnd
        {
            return .round(
                RoundRequest(
                    frames: requestID, roundID, sessionID, timeoutMs: timeout.empty ? nil : timeout.value, body: body))
        }
        return try decode(fields: Wire.unpack(frames, header: Wire.clientHeaderBytes, layout))
    }

    /// Decodes a message given as its numbered fields.
    static func decode(fields message: Multipart) throws(SkillbusError) -> ClientMessage {
        switch try Wire.command(message, role: "client", expected: commands) {
        case .request:
            try Wire.expectFields(message, 8, "REQUEST")
            let timeoutMs = try Wire.optionalDecimal(message, 6, "timeout", 1...Wire.maxTimeoutMs)
            let skill = try Wire.text(message, 5, "skill")
            guard !skill.isEmpty else { throw SkillbusError(.malformedMessage, "field 5 (skill) is empty") }
            return .invoke(
                InvokeRequest(
                    frames: try Wire.textBytes(message, 2, "request id"), try Wire.textBytes(message, 3, "round id"),
                    try Wire.sessionBytes(message, 4), skill: skill, timeoutMs: timeoutMs,
                    parameters: message[7]))
        case .skills:
            try Wire.expectFields(message, 3, "SKILLS")
            return .listSkills(requestID: try Wire.text(message, 2, "request id"))
        case .snapshot:
            try Wire.expectFields(message, 3, "SNAPSHOT")
            return .snapshot(requestID: try Wire.text(message, 2, "request id"))
        case .agents:
            try Wire.expectFields(message, 3, "AGENTS")
            return .listAgents(requestID: try Wire.text(message, 2, "request id"))
        case .round:
            try Wire.expectFields(message, 7, "ROUND")
            let timeoutMs = try Wire.optionalDecimal(message, 5, "timeout", 1...Wire.maxTimeoutMs)
            return .round(
                RoundRequest(
                    frames: try Wire.textBytes(message, 2, "request id"), try Wire.textBytes(message, 3, "round id"),
                    try Wire.sessionBytes(message, 4), timeoutMs: timeoutMs, body: message[6]))
        case .query:
            try Wire.expectFields(message, 6, "QUERY")
            let timeoutMs = try Wire.optionalDecimal(message, 4, "timeout", 1...Wire.maxTimeoutMs)
            let agent = try Wire.text(message, 3, "agent")
            let query = try AgentQuery(json: try Wire.json(message, 5, "query"))
            if case .roster = query, !agent.isEmpty {
                throw SkillbusError(.malformedMessage, "field 3 (agent) must be empty for a roster query: the bus answers it")
            }
            return .query(
                QueryRequest(
                    requestID: try Wire.text(message, 2, "request id"), agent: agent, timeoutMs: timeoutMs, query: query))
        case .ask:
            guard (8...10).contains(message.count) else {
                throw SkillbusError(.malformedMessage, "ASK takes 8 to 10 fields, got \(message.count)")
            }
            let progress = message.count > 8 && message[8] == Array("progress".utf8)
            guard message.count == 8 || progress || (message.count == 10 && message[8].isEmpty) else {
                throw SkillbusError(.malformedMessage, "field 8 of ASK, when present, must be 'progress' (or empty before field 9)")
            }
            let timeoutMs = try Wire.optionalDecimal(message, 6, "timeout", 1...Wire.maxTimeoutMs)
            let roundID = try Wire.text(message, 3, "round id")
            guard !roundID.isEmpty else { throw SkillbusError(.malformedMessage, "field 3 (round id) is empty") }
            return .ask(
                AskRequest(
                    requestID: try Wire.text(message, 2, "request id"), roundID: roundID,
                    sessionID: String(decoding: try Wire.sessionBytes(message, 4), as: UTF8.self),
                    agent: try Wire.text(message, 5, "agent"), timeoutMs: timeoutMs,
                    message: try Wire.text(message, 7, "message"), progress: progress,
                    parentTurnID: message.count == 10 ? try Wire.text(message, 9, "parent turn") : ""))
        case .cancel:
            // 3 frames: one of this client's requests; 4: a whole round, by its id.
            guard message.count == 3 || message.count == 4 else {
                throw SkillbusError(.malformedMessage, "CANCEL takes 3 or 4 fields, got \(message.count)")
            }
            let requestID = try Wire.text(message, 2, "request id")
            guard message.count == 4 else { return .cancel(requestID: requestID) }
            let roundID = try Wire.text(message, 3, "round id")
            guard !roundID.isEmpty else { throw SkillbusError(.malformedMessage, "field 3 (round id) is empty") }
            return .cancelRound(requestID: requestID, roundID: roundID)
        case .approve:
            try Wire.expectFields(message, 4, "APPROVE")
            let answer = try Wire.text(message, 3, "answer")
            guard answer == "yes" || answer == "no" else {
                throw SkillbusError(.malformedMessage, "field 3 (answer) must be yes or no, got '\(answer.prefix(32))'")
            }
            return .approve(confirmationID: try Wire.text(message, 2, "confirmation id"), approved: answer == "yes")
        default:
            throw Wire.unknownCommand(message, role: "client", expected: commands)
        }
    }
}
