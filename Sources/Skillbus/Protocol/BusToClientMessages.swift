import SkillbusZMQ

// MARK: - Bus → client

/// The bus's answer to one invocation.
public struct InvokeReply: Sendable, Equatable {
    @WireText public var requestID: String
    @WireText public var roundID: String
    public var status: ReplyStatus
    /// The agent that ran it; empty when none did (unknown skill, busy, …).
    @WireText public var agent: String
    public var durationMicros: Int
    /// `SkillResult` JSON when ok, `SkillbusError` JSON when error, as bytes.
    public var payload: [UInt8]

    public init(
        requestID: String, roundID: String, status: ReplyStatus, agent: String, durationMicros: Int,
        payload: [UInt8]
    ) {
        self.init(
            frames: Array(requestID.utf8), Array(roundID.utf8), status: status, agent: Array(agent.utf8),
            durationMicros: durationMicros, payload: payload)
    }

    init(
        frames requestID: [UInt8], _ roundID: [UInt8], status: ReplyStatus, agent: [UInt8], durationMicros: Int,
        payload: [UInt8]
    ) {
        self._requestID = WireText(bytes: requestID)
        self._roundID = WireText(bytes: roundID)
        self.status = status
        self._agent = WireText(bytes: agent)
        self.durationMicros = durationMicros
        self.payload = payload
    }
}

/// Messages the bus sends to a client.
public enum BusToClientMessage: Sendable, Equatable {
    /// The commands this direction carries.
    static let commands: [Wire.Command] = [
        .reply, .skills, .error, .entry, .snapshot, .agents, .round, .answer, .turn, .stream, .confirm, .progress,
        .output, .cancelled,
    ]

    case reply(InvokeReply)
    case skills(requestID: String, catalog: SkillCatalog)
    /// One agent's registry entry (JSON, kept as bytes: the bus sends what it serialized once per change,
    /// and the receiver parses all entries together), part of the answer to SNAPSHOT.
    case entry(requestID: String, entry: [UInt8])
    /// Ends the answer to SNAPSHOT: `{"epoch", "seq", "agents": count of ENTRY messages sent, "heartbeatMs"}`.
    case snapshot(requestID: String, summary: JSONValue)
    case agents(requestID: String, listing: JSONValue)
    /// The document that answers a ROUND (JSON, as bytes).
    case round(requestID: [UInt8], roundID: [UInt8], document: [UInt8])
    /// The answer to QUERY: from the agent that was asked (`agent`), or from the bus when it could not ask.
    case answer(requestID: String, agent: String, AgentAnswer)
    /// How a turn ended: `ok` with its turn document, or `error` with an error object (its document, when
    /// the agent made one, in the error's details).
    case turn(requestID: String, agent: String, AgentAnswer)
    /// The same TURN as the bus sends it: the agent's answer relayed as it came (read as `turn`).
    case relayedTurn(requestID: String, agent: String, RelayedAnswer)
    /// The next piece of the reply of the turn this ASK started; the TURN that ends it follows.
    case stream(requestID: String, text: String)
    /// A state or an ended call of the turn this ASK started, when the ASK asked for them.
    case progress(requestID: String, agent: String, TurnProgress)
    /// Asks the client that sent request `requestID` (or the ASK whose turn calls the skill) to approve
    /// an invocation of a skill that needs confirmation; answered with APPROVE and `confirmationID`.
    case confirm(requestID: String, confirmationID: String, skill: String, parameters: [UInt8])
    /// The bus could not accept a message; `requestID` is empty when it could not be read.
    case error(requestID: String, SkillbusError)
    /// Partial output of an invocation this client's request `requestID` waits for; `invocation` names the
    /// round's invocation (empty for a REQUEST). Its REPLY or ROUND follows.
    case output(requestID: [UInt8], invocation: String, OutputBatch)
    /// What a CANCEL naming a round stopped: `{"round", "requests", "rounds", "turns", "stopped"}`.
    case cancelled(requestID: String, summary: JSONValue)

    /// Where its fields start travelling as frames of their own (§2.1).
    static let layout: Wire.Layout = [
        .reply: 7, .skills: 3, .error: 3, .entry: 3, .snapshot: 3, .agents: 3, .round: 4, .answer: 5, .turn: 5,
        .stream: 3, .progress: 5, .confirm: 5, .output: 5, .cancelled: 3,
    ]

    public func encoded() -> Multipart {
        if case .round(let requestID, let roundID, let document) = self {
            // One per ROUND, as REPLY is per REQUEST: written straight into its envelope too.
            var envelope = Wire.EnvelopeWriter(Wire.clientHeaderBytes, .round, capacity: 8 + requestID.count + roundID.count)
            envelope.field(requestID)
            envelope.field(roundID)
            return [envelope.bytes, document]
        }
        guard case .reply(let reply) = self else { return Wire.pack(fields(), Self.layout) }
        // One per request: written straight into its envelope, like INVOKE (EnvelopeTests compares).
        var envelope = Wire.EnvelopeWriter(
            Wire.clientHeaderBytes, .reply, capacity: 40 + reply.$requestID.count + reply.$roundID.count + reply.$agent.count)
        envelope.field(reply.$requestID)
        envelope.field(reply.$roundID)
        envelope.field(reply.status.frame)
        envelope.field(reply.$agent)
        envelope.field(decimal: reply.durationMicros)
        return [envelope.bytes, reply.payload]
    }

    /// The message as its numbered fields (PROTOCOL §3, §4), before the envelope packs them.
    func fields() -> Multipart {
        switch self {
        case .reply(let reply):
            [
                Wire.clientHeaderBytes, Wire.Command.reply.frame, reply.$requestID, reply.$roundID, reply.status.frame,
                reply.$agent, Array(String(reply.durationMicros).utf8), reply.payload,
            ]
        case .skills(let requestID, let catalog):
            [Wire.clientHeaderBytes, Wire.Command.skills.frame, Array(requestID.utf8), catalog.json.serialized()]
        case .error(let requestID, let error):
            [Wire.clientHeaderBytes, Wire.Command.error.frame, Array(requestID.utf8), error.json.serialized()]
        case .entry(let requestID, let entry):
            [Wire.clientHeaderBytes, Wire.Command.entry.frame, Array(requestID.utf8), entry]
        case .snapshot(let requestID, let summary):
            [Wire.clientHeaderBytes, Wire.Command.snapshot.frame, Array(requestID.utf8), summary.serialized()]
        case .agents(let requestID, let listing):
            [Wire.clientHeaderBytes, Wire.Command.agents.frame, Array(requestID.utf8), listing.serialized()]
        case .round(let requestID, let roundID, let document):
            [Wire.clientHeaderBytes, Wire.Command.round.frame, requestID, roundID, document]
        case .answer(let requestID, let agent, let answer):
            [Wire.clientHeaderBytes, Wire.Command.answer.frame, Array(requestID.utf8), Array(agent.utf8)]
                + answer.frames
        case .turn(let requestID, let agent, let answer):
            [Wire.clientHeaderBytes, Wire.Command.turn.frame, Array(requestID.utf8), Array(agent.utf8)]
                + answer.frames
        case .relayedTurn(let requestID, let agent, let answer):
            [Wire.clientHeaderBytes, Wire.Command.turn.frame, Array(requestID.utf8), Array(agent.utf8)]
                + answer.frames
        case .stream(let requestID, let text):
            [Wire.clientHeaderBytes, Wire.Command.stream.frame, Array(requestID.utf8), Array(text.utf8)]
        case .progress(let requestID, let agent, let progress):
            [Wire.clientHeaderBytes, Wire.Command.progress.frame, Array(requestID.utf8), Array(agent.utf8)]
                + Self.progressFields(progress, depth: 0)
        case .confirm(let requestID, let confirmationID, let skill, let parameters):
            [
                Wire.clientHeaderBytes, Wire.Command.confirm.frame, Array(requestID.utf8), Array(confirmationID.utf8),
                Array(skill.utf8), parameters,
            ]
        case .output(let requestID, let invocation, let batch):
            [Wire.clientHeaderBytes, Wire.Command.output.frame, requestID, Array(invocation.utf8)] + batch.frames
        case .cancelled(let requestID, let summary):
            [Wire.clientHeaderBytes, Wire.Command.cancelled.frame, Array(requestID.utf8), summary.serialized()]
        }
    }

    /// Decodes a message as it arrived: its envelope and frames.
    public static func decode(_ frames: Multipart) throws(SkillbusError) -> BusToClientMessage {
        // A REPLY is read in place (Wire.EnvelopeReader); whatever it does not take goes the general way.
        if var reader = Wire.EnvelopeReader(frames, header: Wire.clientHeaderBytes, command: .reply),
            let requestID = reader.textBytes(), let roundID = reader.textBytes(), let status = reader.status(),
            let agent = reader.textBytes(), let micros = reader.number(), !micros.empty, let payload = reader.body(),
            reader.atEnd
        {
            return .reply(
                InvokeReply(
                    frames: requestID, roundID, status: status, agent: agent, durationMicros: micros.value,
                    payload: payload))
        }
        return try decode(fields: Wire.unpack(frames, header: Wire.clientHeaderBytes, layout))
    }

    /// Decodes a message given as its numbered fields.
    static func decode(fields message: Multipart) throws(SkillbusError) -> BusToClientMessage {
        switch try Wire.command(message, role: "bus", expected: commands) {
        case .reply:
            try Wire.expectFields(message, 8, "REPLY")
            let status = try ReplyStatus(field: message, 4)
            let micros = try Wire.decimal(message, 6, "duration", maximum: Int.max / 2)
            return .reply(
                InvokeReply(
                    frames: try Wire.textBytes(message, 2, "request id"), try Wire.textBytes(message, 3, "round id"),
                    status: status, agent: try Wire.textBytes(message, 5, "agent"), durationMicros: micros,
                    payload: message[7]))
        case .skills:
            try Wire.expectFields(message, 4, "SKILLS")
            return .skills(
                requestID: try Wire.text(message, 2, "request id"), catalog: try SkillCatalog(json: try Wire.json(message, 3, "catalog")))
        case .error:
            try Wire.expectFields(message, 4, "ERROR")
            return .error(
                requestID: try Wire.text(message, 2, "request id"),
                SkillbusError(json: try Wire.json(message, 3, "error")))
        case .entry:
            try Wire.expectFields(message, 4, "ENTRY")
            return .entry(requestID: try Wire.text(message, 2, "request id"), entry: message[3])
        case .snapshot:
            try Wire.expectFields(message, 4, "SNAPSHOT")
            return .snapshot(
                requestID: try Wire.text(message, 2, "request id"), summary: try Wire.json(message, 3, "summary"))
        case .agents:
            try Wire.expectFields(message, 4, "AGENTS")
            return .agents(
                requestID: try Wire.text(message, 2, "request id"), listing: try Wire.json(message, 3, "agents"))
        case .round:
            try Wire.expectFields(message, 5, "ROUND")
            return .round(
                requestID: try Wire.textBytes(message, 2, "request id"),
                roundID: try Wire.textBytes(message, 3, "round id"),
                document: message[4])
        case .answer:
            try Wire.expectFields(message, 6, "ANSWER")
            return .answer(
                requestID: try Wire.text(message, 2, "request id"), agent: try Wire.text(message, 3, "agent"),
                try AgentAnswer(fields: message, from: 4))
        case .turn:
            try Wire.expectFields(message, 6, "TURN")
            return .turn(
                requestID: try Wire.text(message, 2, "request id"), agent: try Wire.text(message, 3, "agent"),
                try AgentAnswer(fields: message, from: 4))
        case .stream:
            try Wire.expectFields(message, 4, "STREAM")
            return .stream(requestID: try Wire.text(message, 2, "request id"), text: try Wire.text(message, 3, "text"))
        case .progress:
            try Wire.expectFields(message, 6, "PROGRESS")
            let (requestID, agent) = (try Wire.text(message, 2, "request id"), try Wire.text(message, 3, "agent"))
            let body = try Wire.json(message, 5, "progress")
            let progress: TurnProgress
            switch try Wire.text(message, 4, "kind") {
            case "state": progress = .state(try AgentState(json: body), parameters: body["parameters"])
            case "call": progress = .call(try TurnCall(json: body))
            case let kind:
                throw SkillbusError(.malformedMessage, "field 4 (kind) must be state or call, not '\(kind.prefix(32))'")
            }
            // A nested turn's progress says how deep it is.
            let depth = body["depth"]?.intValue ?? 0
            return .progress(requestID: requestID, agent: agent, depth > 0 ? .nested(depth: depth, progress) : progress)
        case .confirm:
            try Wire.expectFields(message, 6, "CONFIRM")
            return .confirm(
                requestID: try Wire.text(message, 2, "request id"),
                confirmationID: try Wire.text(message, 3, "confirmation id"), skill: try Wire.text(message, 4, "skill"),
                parameters: message[5])
        case .output:
            try Wire.expectFields(message, 6, "OUTPUT")
            return .output(
                requestID: try Wire.textBytes(message, 2, "request id"),
                invocation: try Wire.text(message, 3, "invocation"), try OutputBatch(fields: message, from: 4))
        case .cancelled:
            try Wire.expectFields(message, 4, "CANCELLED")
            return .cancelled(
                requestID: try Wire.text(message, 2, "request id"), summary: try Wire.json(message, 3, "summary"))
        default:
            throw Wire.unknownCommand(message, role: "bus", expected: commands)
        }
    }
}

extension BusToClientMessage {
    /// PROGRESS fields 4 and 5: the kind and the body, with `depth` for a nested turn's.
    static func progressFields(_ progress: TurnProgress, depth: Int) -> [[UInt8]] {
        var body: [String: JSONValue]
        let kind: String
        switch progress {
        case .nested(let depth, let inner): return progressFields(inner, depth: depth)
        case .state(let state, let parameters):
            kind = "state"
            body = state.json(in: TurnRef(session: "", turn: "", parameters: parameters)).objectValue ?? [:]
        case .call(let call):
            kind = "call"
            body = call.json.objectValue ?? [:]
        }
        if depth > 0 { body["depth"] = .number(Double(depth)) }
        return [Array(kind.utf8), JSONValue.object(body).serialized()]
    }
}
