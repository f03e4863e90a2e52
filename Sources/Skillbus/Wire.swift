import SkillbusZMQ

/// Wire protocol v1: frame layouts for every message between clients, workers and the bus.
/// docs/PROTOCOL.md is the normative description; keep the two in step.
public enum Wire {
    /// First frame of every client message (after the ROUTER's routing id on the bus side).
    public static let clientHeader = "SKB1C"
    /// First frame of every worker message.
    public static let workerHeader = "SKB1W"

    static let clientHeaderBytes = Array(clientHeader.utf8)
    static let workerHeaderBytes = Array(workerHeader.utf8)

    /// Reads frame `index` as UTF-8 text, or explains what is wrong with it.
    static func text(_ message: Multipart, _ index: Int, _ name: String) throws(SkillbusError) -> String {
        guard index < message.count else {
            throw SkillbusError(.malformedMessage, "missing frame \(index) (\(name))")
        }
        guard let text = String(validating: message[index], as: UTF8.self) else {
            throw SkillbusError(.malformedMessage, "frame \(index) (\(name)) is not valid UTF-8")
        }
        return text
    }

    /// Frame `index`, checked to be UTF-8 but kept as bytes: ids the bus only passes along are never
    /// turned into Strings and back on the hot path.
    static func textFrame(_ message: Multipart, _ index: Int, _ name: String) throws(SkillbusError) -> [UInt8] {
        guard index < message.count else {
            throw SkillbusError(.malformedMessage, "missing frame \(index) (\(name))")
        }
        let frame = message[index]
        guard frame.allSatisfy({ $0 < 0x80 }) || String(validating: frame, as: UTF8.self) != nil else {
            throw SkillbusError(.malformedMessage, "frame \(index) (\(name)) is not valid UTF-8")
        }
        return frame
    }

    static func json(_ message: Multipart, _ index: Int, _ name: String) throws(SkillbusError) -> JSONValue {
        guard index < message.count else {
            throw SkillbusError(.malformedMessage, "missing frame \(index) (\(name))")
        }
        do {
            return try JSONValue(parsing: message[index])
        } catch {
            throw SkillbusError(.malformedMessage, "frame \(index) (\(name)): \(error)")
        }
    }

    /// Reads frame `index` as a non-negative decimal integer of at most `maximum`.
    static func decimal(_ message: Multipart, _ index: Int, _ name: String, maximum: Int) throws(SkillbusError) -> Int {
        let text = try Wire.text(message, index, name)
        guard !text.isEmpty, text.utf8.count <= 18, text.utf8.allSatisfy({ $0 >= 48 && $0 <= 57 }),
            let value = Int(text),
            value <= maximum
        else {
            throw SkillbusError(
                .malformedMessage,
                "frame \(index) (\(name)) must be a decimal integer from 0 to \(maximum), got '\(text)'")
        }
        return value
    }

    /// The longest timeout or deadline the wire accepts: one day, in milliseconds.
    public static let maxTimeoutMs = 86_400_000

    /// The commands of v1. Their frames are made once, and incoming ones are looked up by their bytes:
    /// no String is made or compared for a message's command on the hot path.
    enum Command: Int, CaseIterable {
        case request, skills, reply, error, ready, result, state, heartbeat, disconnect, welcome, invoke, cancel
        case snapshot, entry, agents, round

        /// As it travels: the case name in capitals, `REQUEST`.
        var name: String { String(describing: self).uppercased() }
        var frame: [UInt8] { Self.frames[rawValue] }

        static let frames = allCases.map { Array($0.name.utf8) }
        static let byFrame = Dictionary(uniqueKeysWithValues: allCases.map { ($0.frame, $0) })
    }

    /// Frame 1 as one of the `expected` commands, or an error naming what was there and what is expected.
    static func command(_ message: Multipart, role: String, expected: [Command]) throws(SkillbusError) -> Command {
        guard message.count > 1 else { throw SkillbusError(.malformedMessage, "missing frame 1 (command)") }
        if let command = Command.byFrame[message[1]], expected.contains(command) { return command }
        throw unknownCommand(message, role: role, expected: expected)
    }

    static func unknownCommand(_ message: Multipart, role: String, expected: [Command]) -> SkillbusError {
        let names = expected.map(\.name)
        let list = names.count > 1 ? names.dropLast().joined(separator: ", ") + " or " + names.last! : names[0]
        let shown = String(decoding: message[1].prefix(32), as: UTF8.self)
        return SkillbusError(.malformedMessage, "unknown \(role) command '\(shown)' (expected \(list))")
    }

    /// HEARTBEAT frames with the interval, when known.
    static func heartbeat(_ intervalMs: Int?) -> Multipart {
        [workerHeaderBytes, Command.heartbeat.frame] + (intervalMs.map { [Array(String($0).utf8)] } ?? [])
    }

    /// HEARTBEAT frame 2, the sender's interval: optional, and from 10 ms to one hour when present.
    static func heartbeatInterval(_ message: Multipart) throws(SkillbusError) -> Int? {
        try optionalDecimal(message, 2, "heartbeat interval", 10...CoordinatorState.maxHeartbeatMs)
    }

    /// An optional decimal frame (a timeout, an interval): empty or absent is nil, else within `range`.
    static func optionalDecimal(
        _ message: Multipart, _ index: Int, _ name: String, _ range: ClosedRange<Int>
    ) throws(SkillbusError) -> Int? {
        guard message.count > index, !message[index].isEmpty else { return nil }
        let value = try decimal(message, index, name, maximum: range.upperBound)
        guard value >= range.lowerBound else {
            throw SkillbusError(.malformedMessage, "frame \(index) (\(name)) must be at least \(range.lowerBound)")
        }
        return value
    }

    /// The frame an optional decimal travels in: empty for nil.
    static func optionalDecimalFrame(_ value: Int?) -> [UInt8] { Array((value.map(String.init) ?? "").utf8) }

    static func expectFrames(_ message: Multipart, _ count: Int, _ command: String) throws(SkillbusError) {
        guard message.count == count else {
            throw SkillbusError(
                .malformedMessage, "\(command) takes \(count) frames, got \(message.count)")
        }
    }
}

/// A text field kept as the bytes it travels in: the bus copies ids from one message to the next without
/// turning them into Strings and back. Read and written as a String; the bytes are `$name`.
@propertyWrapper
public struct WireText: Sendable, Equatable {
    public var projectedValue: [UInt8]

    public init(wrappedValue: String) { projectedValue = Array(wrappedValue.utf8) }
    init(bytes: [UInt8]) { projectedValue = bytes }

    public var wrappedValue: String {
        get { String(decoding: projectedValue, as: UTF8.self) }
        set { projectedValue = Array(newValue.utf8) }
    }
}

/// How an invocation ended, as the wire spells it.
public enum ReplyStatus: String, Sendable {
    case ok, error

    static let okFrame = Array("ok".utf8)
    static let errorFrame = Array("error".utf8)
    var frame: [UInt8] { self == .ok ? Self.okFrame : Self.errorFrame }

    init(frame message: Multipart, _ index: Int) throws(SkillbusError) {
        if message[index] == Self.okFrame {
            self = .ok
        } else if message[index] == Self.errorFrame {
            self = .error
        } else {
            let shown = String(decoding: message[index].prefix(32), as: UTF8.self)
            throw SkillbusError(.malformedMessage, "frame \(index) (status) must be ok or error, got '\(shown)'")
        }
    }
}

// MARK: - Client ⇄ bus

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

/// Messages a client sends to the bus.
public enum ClientMessage: Sendable, Equatable {
    /// The commands this direction carries.
    static let commands: [Wire.Command] = [.request, .skills, .snapshot, .agents, .round]

    case invoke(InvokeRequest)
    /// A whole round: one invocation, a fan-out or a plan; answered by one ROUND document.
    case round(RoundRequest)
    case listSkills(requestID: String)
    /// Asks for the whole registry: ENTRY messages, then SNAPSHOT with the sequence number.
    case snapshot(requestID: String)
    case listAgents(requestID: String)

    public func encoded() -> Multipart {
        switch self {
        case .invoke(let request):
            [
                Wire.clientHeaderBytes, Wire.Command.request.frame, request.$requestID, request.$roundID,
                request.$sessionID, Array(request.skill.utf8),
                Wire.optionalDecimalFrame(request.timeoutMs), request.parameters,
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
                request.$sessionID, Wire.optionalDecimalFrame(request.timeoutMs), request.body,
            ]
        }
    }

    /// Decodes a message whose header frame (frame 0) was already checked to be `SKB1C`.
    public static func decode(_ message: Multipart) throws(SkillbusError) -> ClientMessage {
        switch try Wire.command(message, role: "client", expected: commands) {
        case .request:
            try Wire.expectFrames(message, 8, "REQUEST")
            let timeoutMs = try Wire.optionalDecimal(message, 6, "timeout", 1...Wire.maxTimeoutMs)
            let skill = try Wire.text(message, 5, "skill")
            guard !skill.isEmpty else { throw SkillbusError(.malformedMessage, "frame 5 (skill) is empty") }
            return .invoke(
                InvokeRequest(
                    frames: try Wire.textFrame(message, 2, "request id"), try Wire.textFrame(message, 3, "round id"),
                    try Wire.textFrame(message, 4, "session id"), skill: skill, timeoutMs: timeoutMs,
                    parameters: message[7]))
        case .skills:
            try Wire.expectFrames(message, 3, "SKILLS")
            return .listSkills(requestID: try Wire.text(message, 2, "request id"))
        case .snapshot:
            try Wire.expectFrames(message, 3, "SNAPSHOT")
            return .snapshot(requestID: try Wire.text(message, 2, "request id"))
        case .agents:
            try Wire.expectFrames(message, 3, "AGENTS")
            return .listAgents(requestID: try Wire.text(message, 2, "request id"))
        case .round:
            try Wire.expectFrames(message, 7, "ROUND")
            let timeoutMs = try Wire.optionalDecimal(message, 5, "timeout", 1...Wire.maxTimeoutMs)
            return .round(
                RoundRequest(
                    frames: try Wire.textFrame(message, 2, "request id"), try Wire.textFrame(message, 3, "round id"),
                    try Wire.textFrame(message, 4, "session id"), timeoutMs: timeoutMs, body: message[6]))
        default:
            throw Wire.unknownCommand(message, role: "client", expected: commands)
        }
    }
}

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
    static let commands: [Wire.Command] = [.reply, .skills, .error, .entry, .snapshot, .agents, .round]

    case reply(InvokeReply)
    case skills(requestID: String, catalog: JSONValue)
    /// One agent's registry entry (JSON, kept as bytes: the bus sends what it serialized once per change,
    /// and the receiver parses all entries together), part of the answer to SNAPSHOT.
    case entry(requestID: String, entry: [UInt8])
    /// Ends the answer to SNAPSHOT: `{"epoch", "seq", "agents": count of ENTRY messages sent, "heartbeatMs"}`.
    case snapshot(requestID: String, summary: JSONValue)
    case agents(requestID: String, listing: JSONValue)
    /// The document that answers a ROUND (JSON, as bytes).
    case round(requestID: [UInt8], roundID: [UInt8], document: [UInt8])
    /// The bus could not accept a message; `requestID` is empty when it could not be read.
    case error(requestID: String, SkillbusError)

    public func encoded() -> Multipart {
        switch self {
        case .reply(let reply):
            [
                Wire.clientHeaderBytes, Wire.Command.reply.frame, reply.$requestID, reply.$roundID, reply.status.frame,
                reply.$agent, Array(String(reply.durationMicros).utf8), reply.payload,
            ]
        case .skills(let requestID, let catalog):
            [Wire.clientHeaderBytes, Wire.Command.skills.frame, Array(requestID.utf8), catalog.serialized()]
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
        }
    }

    public static func decode(_ message: Multipart) throws(SkillbusError) -> BusToClientMessage {
        guard message.first == Wire.clientHeaderBytes else {
            throw SkillbusError(.unsupportedProtocol, "expected header \(Wire.clientHeader)")
        }
        switch try Wire.command(message, role: "bus", expected: commands) {
        case .reply:
            try Wire.expectFrames(message, 8, "REPLY")
            let status = try ReplyStatus(frame: message, 4)
            let micros = try Wire.decimal(message, 6, "duration", maximum: Int.max / 2)
            return .reply(
                InvokeReply(
                    frames: try Wire.textFrame(message, 2, "request id"), try Wire.textFrame(message, 3, "round id"),
                    status: status, agent: try Wire.textFrame(message, 5, "agent"), durationMicros: micros,
                    payload: message[7]))
        case .skills:
            try Wire.expectFrames(message, 4, "SKILLS")
            return .skills(
                requestID: try Wire.text(message, 2, "request id"), catalog: try Wire.json(message, 3, "catalog"))
        case .error:
            try Wire.expectFrames(message, 4, "ERROR")
            return .error(
                requestID: try Wire.text(message, 2, "request id"),
                SkillbusError(json: try Wire.json(message, 3, "error")))
        case .entry:
            try Wire.expectFrames(message, 4, "ENTRY")
            return .entry(requestID: try Wire.text(message, 2, "request id"), entry: message[3])
        case .snapshot:
            try Wire.expectFrames(message, 4, "SNAPSHOT")
            return .snapshot(
                requestID: try Wire.text(message, 2, "request id"), summary: try Wire.json(message, 3, "summary"))
        case .agents:
            try Wire.expectFrames(message, 4, "AGENTS")
            return .agents(
                requestID: try Wire.text(message, 2, "request id"), listing: try Wire.json(message, 3, "agents"))
        case .round:
            try Wire.expectFrames(message, 5, "ROUND")
            return .round(
                requestID: try Wire.textFrame(message, 2, "request id"),
                roundID: try Wire.textFrame(message, 3, "round id"),
                document: message[4])
        default:
            throw Wire.unknownCommand(message, role: "bus", expected: commands)
        }
    }
}

// MARK: - Worker ⇄ bus

/// What a worker tells the bus when it joins.
public struct Registration: Sendable, Equatable {
    public var name: String
    public var capacity: Int
    public var heartbeatMs: Int
    public var skills: [SkillDescriptor]

    public init(name: String, capacity: Int, heartbeatMs: Int, skills: [SkillDescriptor]) {
        self.name = name
        self.capacity = capacity
        self.heartbeatMs = heartbeatMs
        self.skills = skills
    }

    public var json: JSONValue {
        [
            "name": .string(name), "capacity": .number(Double(capacity)), "heartbeatMs": .number(Double(heartbeatMs)),
            "skills": .array(skills.map(\.json)),
        ]
    }
}

/// An agent's state as shown on the feed.
public enum AgentState: Sendable, Equatable {
    case idle, thinking, selectingSkill, streaming, completed
    case executingSkill(String)
    case failed(String)

    public var name: String {
        switch self {
        case .idle: "idle"
        case .thinking: "thinking"
        case .selectingSkill: "selectingSkill"
        case .streaming: "streaming"
        case .completed: "completed"
        case .executingSkill: "executingSkill"
        case .failed: "failed"
        }
    }

    /// `{"state": name}` plus `skill` for executingSkill and `reason` for failed.
    public var json: JSONValue {
        switch self {
        case .executingSkill(let skill): ["state": .string(name), "skill": .string(skill)]
        case .failed(let reason): ["state": .string(name), "reason": .string(reason)]
        default: ["state": .string(name)]
        }
    }

    public init(json: JSONValue) throws(SkillbusError) {
        switch json["state"]?.stringValue {
        case "idle": self = .idle
        case "thinking": self = .thinking
        case "selectingSkill": self = .selectingSkill
        case "streaming": self = .streaming
        case "completed": self = .completed
        case "executingSkill": self = .executingSkill(json["skill"]?.stringValue ?? "")
        case "failed": self = .failed(json["reason"]?.stringValue ?? "")
        default:
            throw SkillbusError(.malformedMessage, "unknown agent state in \(json.jsonString)")
        }
    }
}

/// Messages a worker sends to the bus.
public enum WorkerMessage: Sendable, Equatable {
    /// The commands this direction carries.
    static let commands: [Wire.Command] = [.ready, .result, .state, .heartbeat, .disconnect, .skills]

    case ready(JSONValue)
    case result(invocationID: String, status: ReplyStatus, payload: [UInt8])
    case state(AgentState)
    /// `intervalMs`: the sender's heartbeat interval. `registry`: where the worker's replica stands.
    case heartbeat(intervalMs: Int?, registry: RegistryPosition?)
    case disconnect
    /// A registered worker's new skill list (a JSON array of descriptors), replacing the old one.
    case skills(JSONValue)

    public func encoded() -> Multipart {
        switch self {
        case .ready(let registration): [Wire.workerHeaderBytes, Wire.Command.ready.frame, registration.serialized()]
        case .result(let invocationID, let status, let payload):
            [Wire.workerHeaderBytes, Wire.Command.result.frame, Array(invocationID.utf8), status.frame, payload]
        case .state(let state): [Wire.workerHeaderBytes, Wire.Command.state.frame, state.json.serialized()]
        case .heartbeat(let intervalMs, nil): Wire.heartbeat(intervalMs)
        case .heartbeat(let intervalMs, let registry?):
            [
                Wire.workerHeaderBytes, Wire.Command.heartbeat.frame, Wire.optionalDecimalFrame(intervalMs),
                registry.json.serialized(),
            ]
        case .disconnect: [Wire.workerHeaderBytes, Wire.Command.disconnect.frame]
        case .skills(let list): [Wire.workerHeaderBytes, Wire.Command.skills.frame, list.serialized()]
        }
    }

    /// Decodes a message whose header frame was already checked to be `SKB1W`.
    public static func decode(_ message: Multipart) throws(SkillbusError) -> WorkerMessage {
        switch try Wire.command(message, role: "worker", expected: commands) {
        case .ready:
            try Wire.expectFrames(message, 3, "READY")
            return .ready(try Wire.json(message, 2, "registration"))
        case .result:
            try Wire.expectFrames(message, 5, "RESULT")
            let status = try ReplyStatus(frame: message, 3)
            return .result(
                invocationID: try Wire.text(message, 2, "invocation id"), status: status, payload: message[4])
        case .state:
            try Wire.expectFrames(message, 3, "STATE")
            return .state(try AgentState(json: try Wire.json(message, 2, "state")))
        case .heartbeat:
            guard (2...4).contains(message.count) else {
                throw SkillbusError(.malformedMessage, "HEARTBEAT takes 2 to 4 frames, got \(message.count)")
            }
            let intervalMs = try Wire.heartbeatInterval(message)
            var registry: RegistryPosition?
            if message.count == 4 {
                registry = RegistryPosition(json: try Wire.json(message, 3, "registry position"))
                guard registry != nil else {
                    throw SkillbusError(.malformedMessage, "frame 3 (registry position) needs 'epoch', 'seq', 'digest'")
                }
            }
            return .heartbeat(intervalMs: intervalMs, registry: registry)
        case .skills:
            try Wire.expectFrames(message, 3, "SKILLS")
            return .skills(try Wire.json(message, 2, "skills"))
        case .disconnect:
            try Wire.expectFrames(message, 2, "DISCONNECT")
            return .disconnect
        default:
            throw Wire.unknownCommand(message, role: "worker", expected: commands)
        }
    }
}

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
    static let commands: [Wire.Command] = [.welcome, .invoke, .cancel, .heartbeat, .error]

    case welcome(JSONValue)
    case invoke(Invocation)
    case cancel(invocationID: String)
    /// `intervalMs`: the bus's heartbeat interval.
    case heartbeat(intervalMs: Int?)
    case error(SkillbusError)

    public func encoded() -> Multipart {
        switch self {
        case .welcome(let body): [Wire.workerHeaderBytes, Wire.Command.welcome.frame, body.serialized()]
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
        }
    }

    public static func decode(_ message: Multipart) throws(SkillbusError) -> BusToWorkerMessage {
        guard message.first == Wire.workerHeaderBytes else {
            throw SkillbusError(.unsupportedProtocol, "expected header \(Wire.workerHeader)")
        }
        switch try Wire.command(message, role: "bus", expected: commands) {
        case .welcome:
            try Wire.expectFrames(message, 3, "WELCOME")
            return .welcome(try Wire.json(message, 2, "welcome"))
        case .invoke:
            try Wire.expectFrames(message, 8, "INVOKE")
            let deadline = try Wire.decimal(message, 6, "deadline", maximum: Wire.maxTimeoutMs)
            return .invoke(
                Invocation(
                    invocationID: try Wire.text(message, 2, "invocation id"),
                    frames: try Wire.textFrame(message, 3, "round id"), try Wire.textFrame(message, 4, "session id"),
                    skill: try Wire.text(message, 5, "skill"), deadlineMs: deadline, parameters: message[7]))
        case .cancel:
            try Wire.expectFrames(message, 3, "CANCEL")
            return .cancel(invocationID: try Wire.text(message, 2, "invocation id"))
        case .heartbeat:
            guard (2...3).contains(message.count) else {
                throw SkillbusError(.malformedMessage, "HEARTBEAT takes 2 or 3 frames, got \(message.count)")
            }
            return .heartbeat(intervalMs: try Wire.heartbeatInterval(message))
        case .error:
            try Wire.expectFrames(message, 3, "ERROR")
            return .error(SkillbusError(json: try Wire.json(message, 2, "error")))
        default:
            throw Wire.unknownCommand(message, role: "bus", expected: commands)
        }
    }
}
