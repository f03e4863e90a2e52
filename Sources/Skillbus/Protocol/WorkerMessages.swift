import SkillbusZMQ

// MARK: - Worker ⇄ bus

/// Messages a worker sends to the bus.
public enum WorkerMessage: Sendable, Equatable {
    /// The commands this direction carries.
    static let commands: [Wire.Command] = [
        .ready, .result, .state, .heartbeat, .disconnect, .skills, .answer, .context, .turnend, .stream, .output,
        .claim, .called, .release, .step, .offer,
    ]

    case ready(JSONValue)
    case result(invocationID: String, status: ReplyStatus, payload: [UInt8])
    case state(AgentState)
    /// A state of a turn: sent as it happens, never coalesced (STATE with `session` and `turn`).
    case turnState(AgentState, TurnRef)
    /// The turn with this id ended: `ok` with its document, or `error`; with a handoff, the session goes to
    /// another agent, which takes the same message (§3.7.2).
    case turnEnd(turnID: String, RelayedAnswer, handoff: HandoffRequest? = nil)
    /// The next piece of the turn's reply (a batch of what the planner produced since the last one).
    case stream(turnID: String, text: String)
    /// A turn that holds its round (TURN's lease) is running one of its calls itself, and gives the round
    /// back before it ends: the bus counts it among the round's executions, so an identical invocation
    /// joins it.
    case claim(turnID: String, claimID: String, skill: String, parameters: [UInt8])
    /// A call the turn ran itself ended, as a RESULT would say (after its CLAIM, if it had one).
    case called(
        turnID: String, claimID: String, skill: String, parameters: [UInt8], status: ReplyStatus, payload: [UInt8])
    /// A turn that does not hold its round offers to run one of its calls here, this agent offering the skill:
    /// the bus answers VERDICT with the same call id (run it, send it as a REQUEST, or an identical call's
    /// outcome). A call it is told to run is reported like a claimed one, with CALLED.
    case offer(turnID: String, callID: String, skill: String, parameters: [UInt8])
    /// A call of the turn ended (wherever it ran), for the feed and for a client that follows the turn.
    case step(turnID: String, TurnCall)
    /// The turn gives its round back: from now on its calls, and the round's other invocations, go
    /// through the bus.
    case release(turnID: String)
    /// Partial output of the running invocation with this id: the parts emitted since the last batch.
    case output(invocationID: String, OutputBatch)
    /// `intervalMs`: the sender's heartbeat interval. `registry`: where the worker's replica stands.
    case heartbeat(intervalMs: Int?, registry: RegistryPosition?)
    case disconnect
    /// A registered worker's new skill list (a JSON array of descriptors), replacing the old one.
    case skills(JSONValue)

    /// The answer to the bus's QUERY with this id.
    case answer(queryID: String, AgentAnswer)
    /// How many sessions the worker holds and whether its store takes writes; sent when either changes.
    case context(AgentContextStatus)

    /// Where its fields start travelling as frames of their own (§2.1).
    static let layout: Wire.Layout = [
        .ready: 2, .result: 4, .state: 2, .heartbeat: 3, .skills: 2, .answer: 4, .context: 2, .turnend: 4, .stream: 3,
        .output: 4, .claim: 5, .called: 5, .step: 3, .offer: 5,
    ]

    public func encoded() -> Multipart {
        guard case .result(let invocationID, let status, let payload) = self else {
            return Wire.pack(fields(), Self.layout)
        }
        // One per request, so written straight into its envelope (EnvelopeTests: the bytes packing gives).
        var envelope = Wire.EnvelopeWriter(Wire.workerHeaderBytes, .result, capacity: 8 + invocationID.utf8.count)
        envelope.field(invocationID)
        envelope.field(status.frame)
        return [envelope.bytes, payload]
    }

    /// A body its type writes straight to bytes.
    private static func bytes(_ write: (inout [UInt8]) -> Void) -> [UInt8] {
        var out: [UInt8] = []
        write(&out)
        return out
    }

    /// The message as its numbered fields (PROTOCOL §3, §4), before the envelope packs them.
    func fields() -> Multipart {
        switch self {
        case .ready(let registration): [Wire.workerHeaderBytes, Wire.Command.ready.frame, registration.serialized()]
        case .result(let invocationID, let status, let payload):
            [Wire.workerHeaderBytes, Wire.Command.result.frame, Array(invocationID.utf8), status.frame, payload]
        case .state(let state): [Wire.workerHeaderBytes, Wire.Command.state.frame, state.json.serialized()]
        case .turnState(let state, let turn):
            [Wire.workerHeaderBytes, Wire.Command.state.frame, Self.bytes { state.write(in: turn, to: &$0) }]
        case .turnEnd(let turnID, let answer, let handoff):
            [Wire.workerHeaderBytes, Wire.Command.turnend.frame, Array(turnID.utf8)] + answer.frames
                + (handoff.map { [$0.json.serialized()] } ?? [])
        case .stream(let turnID, let text):
            [Wire.workerHeaderBytes, Wire.Command.stream.frame, Array(turnID.utf8), Array(text.utf8)]
        case .claim(let turnID, let claimID, let skill, let parameters):
            [
                Wire.workerHeaderBytes, Wire.Command.claim.frame, Array(turnID.utf8), Array(claimID.utf8),
                Array(skill.utf8), parameters,
            ]
        case .called(let turnID, let claimID, let skill, let parameters, let status, let payload):
            [
                Wire.workerHeaderBytes, Wire.Command.called.frame, Array(turnID.utf8), Array(claimID.utf8),
                Array(skill.utf8), parameters, status.frame, payload,
            ]
        case .offer(let turnID, let callID, let skill, let parameters):
            [
                Wire.workerHeaderBytes, Wire.Command.offer.frame, Array(turnID.utf8), Array(callID.utf8),
                Array(skill.utf8), parameters,
            ]
        case .release(let turnID): [Wire.workerHeaderBytes, Wire.Command.release.frame, Array(turnID.utf8)]
        case .step(let turnID, let call):
            [Wire.workerHeaderBytes, Wire.Command.step.frame, Array(turnID.utf8), Self.bytes { call.write(to: &$0) }]
        case .output(let invocationID, let batch):
            [Wire.workerHeaderBytes, Wire.Command.output.frame, Array(invocationID.utf8)] + batch.frames
        case .heartbeat(let intervalMs, nil): Wire.heartbeat(intervalMs)
        case .heartbeat(let intervalMs, let registry?):
            [
                Wire.workerHeaderBytes, Wire.Command.heartbeat.frame, Wire.optionalDecimalField(intervalMs),
                registry.json.serialized(),
            ]
        case .disconnect: [Wire.workerHeaderBytes, Wire.Command.disconnect.frame]
        case .skills(let list): [Wire.workerHeaderBytes, Wire.Command.skills.frame, list.serialized()]
        case .answer(let queryID, let answer):
            [Wire.workerHeaderBytes, Wire.Command.answer.frame, Array(queryID.utf8)] + answer.frames
        case .context(let status):
            [Wire.workerHeaderBytes, Wire.Command.context.frame, status.json.serialized()]
        }
    }

    /// Decodes a message as it arrived: its envelope and frames. A RESULT is read in place.
    public static func decode(_ frames: Multipart) throws(SkillbusError) -> WorkerMessage {
        if var reader = Wire.EnvelopeReader(frames, header: Wire.workerHeaderBytes, command: .result),
            let invocationID = reader.text(), let status = reader.status(), let payload = reader.body(), reader.atEnd
        {
            return .result(invocationID: invocationID, status: status, payload: payload)
        }
        return try decode(fields: Wire.unpack(frames, header: Wire.workerHeaderBytes, layout))
    }

    /// Decodes a message given as its numbered fields.
    static func decode(fields message: Multipart) throws(SkillbusError) -> WorkerMessage {
        switch try Wire.command(message, role: "worker", expected: commands) {
        case .ready:
            try Wire.expectFields(message, 3, "READY")
            return .ready(try Wire.json(message, 2, "registration"))
        case .result:
            try Wire.expectFields(message, 5, "RESULT")
            let status = try ReplyStatus(field: message, 3)
            return .result(
                invocationID: try Wire.text(message, 2, "invocation id"), status: status, payload: message[4])
        case .state:
            try Wire.expectFields(message, 3, "STATE")
            let body = try Wire.json(message, 2, "state")
            let state = try AgentState(json: body)
            guard let turn = body["turn"]?.stringValue else { return .state(state) }
            return .turnState(
                state, TurnRef(session: body["session"]?.stringValue ?? "", turn: turn, parameters: body["parameters"]))
        case .heartbeat:
            guard (2...4).contains(message.count) else {
                throw SkillbusError(.malformedMessage, "HEARTBEAT takes 2 to 4 fields, got \(message.count)")
            }
            let intervalMs = try Wire.heartbeatInterval(message)
            var registry: RegistryPosition?
            if message.count == 4 {
                registry = RegistryPosition(json: try Wire.json(message, 3, "registry position"))
                guard registry != nil else {
                    throw SkillbusError(.malformedMessage, "field 3 (registry position) needs 'epoch', 'seq', 'digest'")
                }
            }
            return .heartbeat(intervalMs: intervalMs, registry: registry)
        case .skills:
            try Wire.expectFields(message, 3, "SKILLS")
            return .skills(try Wire.json(message, 2, "skills"))
        case .disconnect:
            try Wire.expectFields(message, 2, "DISCONNECT")
            return .disconnect
        case .answer:
            try Wire.expectFields(message, 5, "ANSWER")
            return .answer(queryID: try Wire.text(message, 2, "query id"), try AgentAnswer(fields: message, from: 3))
        case .context:
            try Wire.expectFields(message, 3, "CONTEXT")
            return .context(try AgentContextStatus(json: try Wire.json(message, 2, "context")))
        case .turnend:
            guard message.count == 5 || message.count == 6 else {
                throw SkillbusError(.malformedMessage, "TURNEND takes 5 or 6 fields, got \(message.count)")
            }
            let answer = try RelayedAnswer(fields: message, from: 3)
            var handoff: HandoffRequest?
            if message.count == 6 {
                guard answer.status == .ok else {
                    throw SkillbusError(.malformedMessage, "a TURNEND with a handoff (field 5) must have status ok")
                }
                handoff = try HandoffRequest(json: try Wire.json(message, 5, "handoff"))
            }
            return .turnEnd(turnID: try Wire.text(message, 2, "turn id"), answer, handoff: handoff)
        case .stream:
            try Wire.expectFields(message, 4, "STREAM")
            return .stream(turnID: try Wire.text(message, 2, "turn id"), text: try Wire.text(message, 3, "text"))
        case .claim:
            try Wire.expectFields(message, 6, "CLAIM")
            return .claim(
                turnID: try Wire.text(message, 2, "turn id"), claimID: try Wire.text(message, 3, "claim id"),
                skill: try skillField(message), parameters: message[5])
        case .offer:
            try Wire.expectFields(message, 6, "OFFER")
            return .offer(
                turnID: try Wire.text(message, 2, "turn id"), callID: try Wire.text(message, 3, "call id"),
                skill: try skillField(message), parameters: message[5])
        case .called:
            try Wire.expectFields(message, 8, "CALLED")
            return .called(
                turnID: try Wire.text(message, 2, "turn id"), claimID: try Wire.text(message, 3, "claim id"),
                skill: try skillField(message), parameters: message[5], status: try ReplyStatus(field: message, 6),
                payload: message[7])
        case .release:
            try Wire.expectFields(message, 3, "RELEASE")
            return .release(turnID: try Wire.text(message, 2, "turn id"))
        case .step:
            try Wire.expectFields(message, 4, "STEP")
            return .step(
                turnID: try Wire.text(message, 2, "turn id"), try TurnCall(json: try Wire.json(message, 3, "call")))
        case .output:
            try Wire.expectFields(message, 5, "OUTPUT")
            return .output(
                invocationID: try Wire.text(message, 2, "invocation id"), try OutputBatch(fields: message, from: 3))
        default:
            throw Wire.unknownCommand(message, role: "worker", expected: commands)
        }
    }

    /// Field 4 of CLAIM, CALLED and OFFER: a skill identifier, never empty.
    private static func skillField(_ message: Multipart) throws(SkillbusError) -> String {
        let skill = try Wire.text(message, 4, "skill")
        guard !skill.isEmpty else { throw SkillbusError(.malformedMessage, "field 4 (skill) is empty") }
        return skill
    }
}
