import SkillbusZMQ

// MARK: - Bus → worker

/// The bus asks a worker to run one skill.
public struct Invocation: Sendable, Equatable {
    public var invocationID: String
    @WireText public var roundID: String
    @WireText public var sessionID: String
    public var skill: String
    /// Milliseconds left until the deadline when the bus sent it.
    public var deadlineMs: Int
    public var parameters: [UInt8]

    public init(
        invocationID: String, roundID: String, sessionID: String, skill: String, deadlineMs: Int, parameters: [UInt8]
    ) {
        self.init(
            invocationID: invocationID, frames: Array(roundID.utf8), Array(sessionID.utf8), skill: skill,
            deadlineMs: deadlineMs, parameters: parameters)
    }

    init(
        invocationID: String, frames roundID: [UInt8], _ sessionID: [UInt8], skill: String, deadlineMs: Int,
        parameters: [UInt8]
    ) {
        self.invocationID = invocationID
        self._roundID = WireText(bytes: roundID)
        self._sessionID = WireText(bytes: sessionID)
        self.skill = skill
        self.deadlineMs = deadlineMs
        self.parameters = parameters
    }
}

/// Messages the bus sends to a worker.
public enum BusToWorkerMessage: Sendable, Equatable {
    /// The commands this direction carries.
    static let commands: [Wire.Command] = [.welcome, .invoke, .cancel, .heartbeat, .error, .query, .turn, .verdict]

    case welcome(Welcome)
    case invoke(Invocation)
    case cancel(invocationID: String)
    /// `intervalMs`: the bus's heartbeat interval.
    case heartbeat(intervalMs: Int?)
    case error(SkillbusError)
    /// A client's question about the worker's context; the worker answers ANSWER with the same id.
    case query(queryID: String, AgentQuery)
    /// Take a turn; the worker answers TURNEND with the same id.
    case turn(TurnRequest)
    /// The answer to the worker's OFFER with this call id.
    case verdict(callID: String, OfferVerdict)

    /// Where its fields start travelling as frames of their own (§2.1).
    static let layout: Wire.Layout = [.welcome: 2, .invoke: 7, .error: 2, .query: 3, .turn: 6, .verdict: 6]

    public func encoded() -> Multipart {
        guard case .invoke(let invocation) = self else { return Wire.pack(fields(), Self.layout) }
        // The bus sends one per request: written straight into its envelope (the same bytes as packing
        // `fields()`, which EnvelopeTests checks).
        var envelope = Wire.EnvelopeWriter(
            Wire.workerHeaderBytes, .invoke,
            capacity: 32 + invocation.invocationID.utf8.count + invocation.$roundID.count + invocation.$sessionID.count
                + invocation.skill.utf8.count)
        envelope.field(invocation.invocationID)
        envelope.field(invocation.$roundID)
        envelope.field(invocation.$sessionID)
        envelope.field(invocation.skill)
        envelope.field(decimal: invocation.deadlineMs)
        return [envelope.bytes, invocation.parameters]
    }

    /// The message as its numbered fields (PROTOCOL §3, §4), before the envelope packs them.
    func fields() -> Multipart {
        switch self {
        case .welcome(let welcome): [Wire.workerHeaderBytes, Wire.Command.welcome.frame, welcome.json.serialized()]
        case .invoke(let invocation):
            [
                Wire.workerHeaderBytes, Wire.Command.invoke.frame, Array(invocation.invocationID.utf8),
                invocation.$roundID,
                invocation.$sessionID, Array(invocation.skill.utf8), Array(String(invocation.deadlineMs).utf8),
                invocation.parameters,
            ]
        case .cancel(let invocationID): [Wire.workerHeaderBytes, Wire.Command.cancel.frame, Array(invocationID.utf8)]
        case .heartbeat(let intervalMs): Wire.heartbeat(intervalMs)
        case .error(let error): [Wire.workerHeaderBytes, Wire.Command.error.frame, error.json.serialized()]
        case .query(let queryID, let query):
            [Wire.workerHeaderBytes, Wire.Command.query.frame, Array(queryID.utf8), query.json.serialized()]
        case .turn(let turn):
            [
                Wire.workerHeaderBytes, Wire.Command.turn.frame, Array(turn.turnID.utf8), Array(turn.roundID.utf8),
                Array(turn.sessionID.utf8), Array(String(turn.deadlineMs).utf8), Array(turn.message.utf8),
                turn.leased ? [UInt8(ascii: "1")] : [],
            ] + (turn.team.map { [$0.json.serialized()] } ?? [])
        case .verdict(let callID, let verdict):
            [Wire.workerHeaderBytes, Wire.Command.verdict.frame, Array(callID.utf8)] + verdict.frames
        }
    }

    /// Decodes a message as it arrived: its envelope and frames. An INVOKE is read in place.
    public static func decode(_ frames: Multipart) throws(SkillbusError) -> BusToWorkerMessage {
        if var reader = Wire.EnvelopeReader(frames, header: Wire.workerHeaderBytes, command: .invoke),
            let invocationID = reader.text(), let roundID = reader.textBytes(), let sessionID = reader.textBytes(),
            let skill = reader.text(), let deadline = reader.number(), !deadline.empty,
            deadline.value <= Wire.maxTimeoutMs, let parameters = reader.body(), reader.atEnd
        {
            return .invoke(
                Invocation(
                    invocationID: invocationID, frames: roundID, sessionID, skill: skill, deadlineMs: deadline.value,
                    parameters: parameters))
        }
        return try decode(fields: Wire.unpack(frames, header: Wire.workerHeaderBytes, layout))
    }

    /// Decodes a message given as its numbered fields.
    static func decode(fields message: Multipart) throws(SkillbusError) -> BusToWorkerMessage {
        switch try Wire.command(message, role: "bus", expected: commands) {
        case .welcome:
            try Wire.expectFields(message, 3, "WELCOME")
            return .welcome(try Welcome(json: try Wire.json(message, 2, "welcome")))
        case .invoke:
            try Wire.expectFields(message, 8, "INVOKE")
            let deadline = try Wire.decimal(message, 6, "deadline", maximum: Wire.maxTimeoutMs)
            return .invoke(
                Invocation(
                    invocationID: try Wire.text(message, 2, "invocation id"),
                    frames: try Wire.textBytes(message, 3, "round id"), try Wire.textBytes(message, 4, "session id"),
                    skill: try Wire.text(message, 5, "skill"), deadlineMs: deadline, parameters: message[7]))
        case .cancel:
            try Wire.expectFields(message, 3, "CANCEL")
            return .cancel(invocationID: try Wire.text(message, 2, "invocation id"))
        case .heartbeat:
            guard (2...3).contains(message.count) else {
                throw SkillbusError(.malformedMessage, "HEARTBEAT takes 2 or 3 fields, got \(message.count)")
            }
            return .heartbeat(intervalMs: try Wire.heartbeatInterval(message))
        case .error:
            try Wire.expectFields(message, 3, "ERROR")
            return .error(SkillbusError(json: try Wire.json(message, 2, "error")))
        case .query:
            try Wire.expectFields(message, 4, "QUERY")
            return .query(
                queryID: try Wire.text(message, 2, "query id"), try AgentQuery(json: try Wire.json(message, 3, "query"))
            )
        case .turn:
            guard message.count == 8 || message.count == 9 else {
                throw SkillbusError(.malformedMessage, "TURN takes 8 or 9 fields, got \(message.count)")
            }
            guard message[7].isEmpty || message[7] == [UInt8(ascii: "1")] else {
                throw SkillbusError(.malformedMessage, "field 7 (lease) must be empty or '1'")
            }
            return .turn(
                TurnRequest(
                    turnID: try Wire.text(message, 2, "turn id"), roundID: try Wire.text(message, 3, "round id"),
                    sessionID: try Wire.text(message, 4, "session id"),
                    deadlineMs: try Wire.decimal(message, 5, "deadline", maximum: Wire.maxTimeoutMs),
                    message: try Wire.text(message, 6, "message"), leased: !message[7].isEmpty,
                    team: message.count == 9 ? try TeamContext(json: try Wire.json(message, 8, "team")) : nil))
        case .verdict:
            try Wire.expectFields(message, 7, "VERDICT")
            return .verdict(callID: try Wire.text(message, 2, "call id"), try OfferVerdict(fields: message))
        default:
            throw Wire.unknownCommand(message, role: "bus", expected: commands)
        }
    }
}

/// What the bus says to an OFFER (PROTOCOL §3.7.3).
public enum OfferVerdict: Sendable, Equatable {
    /// Run the call on the agent that offered it, and report it with CALLED (the offer's call id as claim id).
    case run
    /// Send the call as a REQUEST, as a turn that does not offer to run it would.
    case route
    /// An identical call of the round ended (or had ended): its outcome, and the agent that ran it.
    case done(status: ReplyStatus, agent: String, payload: [UInt8])

    /// Fields 3 to 6 of VERDICT: the verdict, then status, agent and payload (empty unless `done`).
    var frames: Multipart {
        switch self {
        case .run: [Array("run".utf8), [], [], []]
        case .route: [Array("route".utf8), [], [], []]
        case .done(let status, let agent, let payload): [Array("done".utf8), status.frame, Array(agent.utf8), payload]
        }
    }

    init(fields message: Multipart) throws(SkillbusError) {
        switch message[3] {
        case Array("run".utf8): self = .run
        case Array("route".utf8): self = .route
        case Array("done".utf8):
            self = .done(
                status: try ReplyStatus(field: message, 4), agent: try Wire.text(message, 5, "agent"),
                payload: message[6])
        default:
            throw SkillbusError(
                .malformedMessage,
                "field 3 (verdict) must be 'run', 'route' or 'done', got '\(String(decoding: message[3].prefix(32), as: UTF8.self))'"
            )
        }
    }
}
