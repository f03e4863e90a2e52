import Foundation

/// A capability an agent offers. Implement this to give an agent a new skill.
public protocol AgentSkill: Sendable {
    /// Stable identifier used to route requests, for example `text.stats`.
    var identifier: String { get }
    var displayName: String { get }
    var description: String { get }
    var parameterSchema: ParameterSchema { get }
    /// How long a request may take when the client names no timeout; nil takes the bus's default.
    var defaultTimeoutMs: Int? { get }
    /// Where the agent runs it; `.general` by default.
    var executionStyle: SkillExecutionStyle { get }
    /// Whether a client must approve each invocation before it runs; false by default.
    var needsConfirmation: Bool { get }
    /// How the bus retries a failed invocation (PROTOCOL §5.2.1); nil (the default): it does not.
    var retryPolicy: RetryPolicy? { get }
    /// Whether running it twice does no more than running it once, so that a lost or timed-out attempt
    /// may be tried again; false by default.
    var isIdempotent: Bool { get }
    /// How many invocations may run at once on one agent (1: not reentrant); nil (the default): any number
    /// up to the agent's capacity.
    var concurrencyLimit: Int? { get }
    /// Its result depends only on its parameters, so the bus may answer from its cache for `cacheMs`.
    var isPure: Bool { get }
    var cacheMs: Int? { get }
    /// Runs the skill. `parameters` were already validated against `parameterSchema`, defaults applied.
    func execute(parameters: [String: JSONValue], context: SkillExecutionContext) async throws -> SkillResult
}

/// A skill whose body never awaits. A quick one runs inline on the agent's I/O thread, as the INVOKE is
/// read, with no task made for it; it cannot be cancelled while it runs, so it must finish in microseconds.
public protocol SynchronousSkill: AgentSkill {
    /// Runs the skill, as `execute` does.
    func executeNow(parameters: [String: JSONValue], context: SkillExecutionContext) throws -> SkillResult
}

extension SynchronousSkill {
    public func execute(parameters: [String: JSONValue], context: SkillExecutionContext) async throws -> SkillResult {
        try executeNow(parameters: parameters, context: context)
    }
}

/// Where an agent runs a skill.
public enum SkillExecutionStyle: Sendable {
    /// On Swift's global executor: right for anything that computes for a while or blocks.
    case general
    /// On the agent's own I/O thread, with no thread hop: only for skills that finish in microseconds
    /// or merely await (a sleep, say). A quick skill that computes long delays the agent's heartbeats.
    case quick
}

extension AgentSkill {
    /// `.general` unless a skill knows it is quick.
    public var executionStyle: SkillExecutionStyle { .general }
    public var defaultTimeoutMs: Int? { nil }
    /// False unless a skill does something a user should approve first (it writes, deletes, spends).
    public var needsConfirmation: Bool { false }
    public var retryPolicy: RetryPolicy? { nil }
    public var isIdempotent: Bool { false }
    public var concurrencyLimit: Int? { nil }
    public var isPure: Bool { false }
    public var cacheMs: Int? { nil }

    public var descriptor: SkillDescriptor {
        SkillDescriptor(
            identifier: identifier, displayName: displayName, description: description, parameters: parameterSchema,
            defaultTimeoutMs: defaultTimeoutMs, needsConfirmation: needsConfirmation, retry: retryPolicy,
            idempotent: isIdempotent, concurrency: concurrencyLimit, pure: isPure, cacheMs: cacheMs)
    }
}

/// What a skill produces.
public enum SkillResult: Sendable, Equatable {
    case text(String)
    case json(JSONValue)
    case attachment(Attachment)

    public struct Attachment: Sendable, Equatable {
        public var name: String
        public var mediaType: String
        public var bytes: [UInt8]

        public init(name: String, mediaType: String, bytes: [UInt8]) {
            self.name = name
            self.mediaType = mediaType
            self.bytes = bytes
        }
    }

    /// Wire form: `{"type":"text","text":…}`, `{"type":"json","json":…}` or
    /// `{"type":"attachment","name":…,"mediaType":…,"base64":…}`.
    public var json: JSONValue {
        switch self {
        case .text(let text): ["type": "text", "text": .string(text)]
        case .json(let value): ["type": "json", "json": value]
        case .attachment(let attachment):
            [
                "type": "attachment", "name": .string(attachment.name), "mediaType": .string(attachment.mediaType),
                "base64": .string(Data(attachment.bytes).base64EncodedString()),
            ]
        }
    }

    /// The wire form's bytes. A text result, the common case, is written without building a JSON value.
    public func serialized() -> [UInt8] {
        guard case .text(let text) = self else { return json.serialized() }
        var out: [UInt8] = []
        out.reserveCapacity(text.utf8.count + 28)  // one allocation: starting from the opening's Array made two
        out.append(contentsOf: #"{"text":"#.utf8)
        JSONValue.writeString(text, to: &out)
        out.append(contentsOf: #","type":"text"}"#.utf8)
        return out
    }

    public init(json: JSONValue) throws(SkillbusError) {
        switch Self.parse(json) {
        case .success(let result): self = result
        case .failure(let problem):
            throw SkillbusError(.malformedMessage, "a result must be {type: text|json|attachment, …}: \(problem)")
        }
    }

    /// Why `payload` is no result form, or nil when it is one (what the bus checks in an `ok` RESULT).
    static func problem(in payload: [UInt8]) -> String? {
        // The common case, a text result as `serialized()` writes it, needs no JSON value built.
        if isWellFormedText(payload) { return nil }
        do {
            if case .failure(let problem) = parse(try JSONValue(parsing: payload)) { return problem.reason }
            return nil
        } catch {
            return "not JSON (\(error))"
        }
    }

    private static let textHead = Array(#"{"text":""#.utf8)
    private static let textTail = Array(#"","type":"text"}"#.utf8)
    /// What may follow a backslash, `u` aside.
    private static let simpleEscapes = Array(#""\/bfnrt"#.utf8)

    /// Whether `payload` is exactly `{"text":"…","type":"text"}` around a string the strict reader takes:
    /// no raw quote or control character, only valid escapes, valid UTF-8. False means "look closer", not
    /// "invalid": anything else (a `\u` escape, other key orders, spaces) goes through the full reader.
    static func isWellFormedText(_ payload: [UInt8]) -> Bool {
        let (head, tail) = (textHead, textTail)
        guard payload.count >= head.count + tail.count, payload.starts(with: head),
            payload.suffix(tail.count).elementsEqual(tail)
        else { return false }
        let body = payload[head.count..<(payload.count - tail.count)]
        var ascii = true
        var index = body.startIndex
        while index < body.endIndex {
            let byte = body[index]
            if byte == UInt8(ascii: "\\") {
                let next = body.index(after: index)
                guard next < body.endIndex, simpleEscapes.contains(body[next]) else { return false }
                index = body.index(after: next)
                continue
            }
            if byte == UInt8(ascii: "\"") || byte < 0x20 { return false }
            if byte >= 0x80 { ascii = false }
            index = body.index(after: index)
        }
        return ascii || String(validating: body, as: UTF8.self) != nil
    }

    struct Problem: Error, CustomStringConvertible {
        let reason: String
        var description: String { reason }
    }

    private static func parse(_ json: JSONValue) -> Result<SkillResult, Problem> {
        func problem(_ reason: String) -> Result<SkillResult, Problem> { .failure(Problem(reason: reason)) }
        guard json.objectValue != nil else { return problem("a JSON object is expected, got \(json.typeName)") }
        switch json["type"] {
        case .string("text"):
            guard let text = json["text"]?.stringValue else { return problem("a text result needs 'text', a string") }
            return .success(.text(text))
        case .string("json"):
            guard let value = json["json"] else { return problem("a json result needs 'json'") }
            return .success(.json(value))
        case .string("attachment"):
            guard let name = json["name"]?.stringValue, let mediaType = json["mediaType"]?.stringValue else {
                return problem("an attachment needs 'name' and 'mediaType', both strings")
            }
            guard let base64 = json["base64"]?.stringValue, let data = Data(base64Encoded: base64) else {
                return problem("an attachment needs 'base64', a string in standard base64")
            }
            return .success(.attachment(Attachment(name: name, mediaType: mediaType, bytes: Array(data))))
        case .string(let other):
            return problem("unknown type '\(other.prefix(64))' (expected text, json or attachment)")
        case nil:
            return problem("'type' is missing")
        default:
            return problem("'type' must be a string")
        }
    }

    /// The result for people: text as is, JSON indented, an attachment as its name, type and size.
    public var humanReadable: String {
        switch self {
        case .text(let text): text
        case .json(let value): value.prettyString()
        case .attachment(let attachment):
            "[attachment \(attachment.name), \(attachment.mediaType), \(attachment.bytes.count) bytes]"
        }
    }
}

/// Runs a skill on behalf of another skill: the agent itself, when it offers that skill, otherwise the bus.
public protocol SkillCaller: Sendable {
    func call(_ skill: String, parameters: JSONValue, from context: SkillExecutionContext) async throws -> SkillResult
}

/// Where a skill runs: which round and session it serves, on which agent, until when.
/// Cancellation is Swift task cancellation: check `Task.isCancelled` or call `checkCancellation()`.
public struct SkillExecutionContext: Sendable {
    public let roundID: String
    public let sessionID: String
    public let agentName: String
    public let invocationID: String
    public let deadline: ContinuousClock.Instant
    /// How the skill reaches other skills; nil outside an agent.
    public let caller: (any SkillCaller)?
    /// How many skill calls deep this invocation is (0 for one the bus sent).
    public let depth: Int
    /// The agent's context store; nil on an agent that keeps none.
    public let store: AgentStore?
    /// Where `emit` sends partial output; nil outside an agent and in a sub-call run on the same agent.
    var output: SkillOutput?

    /// The agent's memory; nil on an agent that keeps no context.
    public var memory: SkillMemory? { store.map { SkillMemory(store: $0, sessionID: sessionID) } }

    /// The session the invocation runs in; nil without a session or on an agent that keeps no context.
    public var session: SkillSession? {
        guard let store, !sessionID.isEmpty else { return nil }
        return SkillSession(store: store, id: sessionID)
    }

    /// Deeper sub-calls than this are refused: a skill that calls itself forever fails instead.
    public static let maxDepth = 8

    public init(
        roundID: String, sessionID: String, agentName: String, invocationID: String,
        deadline: ContinuousClock.Instant, caller: (any SkillCaller)? = nil, depth: Int = 0, store: AgentStore? = nil
    ) {
        self.store = store
        self.roundID = roundID
        self.sessionID = sessionID
        self.agentName = agentName
        self.invocationID = invocationID
        self.deadline = deadline
        self.caller = caller
        self.depth = depth
    }

    /// Calls another skill of the registry, in the same round and session and under the same deadline:
    /// on this agent when it offers the skill, otherwise through the coordinator on another agent.
    /// A failed call throws its `SkillbusError`.
    public func invoke(_ skill: String, parameters: JSONValue = [:]) async throws -> SkillResult {
        guard let caller else {
            throw SkillbusError(.unknownSkill, "'\(skill)' cannot be called here: this skill runs outside an agent")
        }
        guard depth < Self.maxDepth else {
            throw SkillbusError(
                .skillFailed, "calling '\(skill)' would nest skill calls deeper than \(Self.maxDepth)")
        }
        try checkCancellation()
        return try await caller.call(skill, parameters: parameters, from: self)
    }

    /// Sends a piece of partial output to whoever waits for this invocation (the client that asked,
    /// identical requests that joined it, a round's clients), while the skill runs. The agent sends what
    /// was emitted in batches (at most one every 25 ms, the last before the result), so emitting is cheap.
    /// Throws `output_too_large` once the invocation emitted more than the agent's `maxOutputBytes`: the
    /// invocation is then cancelled and fails with that error whatever the skill returns. Where nobody can
    /// wait (outside an agent, or in a sub-call the agent runs itself) the part goes nowhere.
    public func emit(_ part: OutputPart) throws(SkillbusError) {
        try output?.emit(part)
    }

    /// Emits a line of text (see `emit(_:)` for parts).
    public func emit(_ text: String) throws(SkillbusError) { try output?.emit(.text(text)) }

    /// Emits a JSON value (see `emit(_:)` for parts).
    public func emit(json value: JSONValue) throws(SkillbusError) { try output?.emit(.json(value)) }

    /// How many bytes of output this invocation may emit; nil when its output goes nowhere.
    public var outputLimitBytes: Int? { output?.route.maxOutputBytes }

    /// The context of a sub-call made from this one.
    public func child(invoking skill: String) -> SkillExecutionContext {
        SkillExecutionContext(
            roundID: roundID, sessionID: sessionID, agentName: agentName, invocationID: invocationID + "/" + skill,
            deadline: deadline, caller: caller, depth: depth + 1, store: store)
    }

    public var isCancelled: Bool { Task.isCancelled || ContinuousClock.now >= deadline }

    public func checkCancellation() throws {
        if isCancelled { throw SkillbusError(.cancelled, "invocation \(invocationID) was cancelled") }
    }
}

/// A skill as the registry and the wire know it: everything but the code.
public struct SkillDescriptor: Sendable, Equatable {
    public var identifier: String
    public var displayName: String
    public var description: String
    public var parameters: ParameterSchema
    /// Milliseconds a request may take when the client names no timeout; nil takes the bus's default.
    public var defaultTimeoutMs: Int?
    /// Free-form metadata (tags, version, owner, …) that the registry keeps and passes on untouched.
    public var metadata: [String: JSONValue]
    /// Before it runs, the client that asked must approve the invocation (PROTOCOL §3.8).
    public var needsConfirmation: Bool
    /// How the bus retries a failed invocation (PROTOCOL §5.2.1); nil: it does not.
    public var retry: RetryPolicy?
    /// Running it twice does no more than running it once: a lost or timed-out attempt may be repeated.
    public var idempotent: Bool
    /// Invocations that may run at once on one agent; nil: up to the agent's capacity.
    public var concurrency: Int?
    /// Its result depends on its parameters alone (PROTOCOL §5.2.2); with `cacheMs`, how long the bus may
    /// answer an identical invocation from its cache.
    public var pure: Bool
    public var cacheMs: Int?

    public init(
        identifier: String, displayName: String, description: String, parameters: ParameterSchema,
        defaultTimeoutMs: Int? = nil, metadata: [String: JSONValue] = [:], needsConfirmation: Bool = false,
        retry: RetryPolicy? = nil, idempotent: Bool = false, concurrency: Int? = nil, pure: Bool = false,
        cacheMs: Int? = nil
    ) {
        self.pure = pure
        self.cacheMs = cacheMs
        self.needsConfirmation = needsConfirmation
        self.retry = retry
        self.idempotent = idempotent
        self.concurrency = concurrency
        self.identifier = identifier
        self.displayName = displayName
        self.description = description
        self.parameters = parameters
        self.defaultTimeoutMs = defaultTimeoutMs
        self.metadata = metadata
    }

    public var json: JSONValue {
        var object: [String: JSONValue] = [
            "identifier": .string(identifier), "displayName": .string(displayName),
            "description": .string(description), "parameters": parameters.json,
        ]
        if let defaultTimeoutMs { object["defaultTimeoutMs"] = .number(Double(defaultTimeoutMs)) }
        if !metadata.isEmpty { object["metadata"] = .object(metadata) }
        if needsConfirmation { object["confirm"] = true }
        if let retry { object["retry"] = retry.json }
        if idempotent { object["idempotent"] = true }
        if let concurrency { object["concurrency"] = .number(Double(concurrency)) }
        if pure { object["pure"] = true }
        if let cacheMs { object["cacheMs"] = .number(Double(cacheMs)) }
        return .object(object)
    }

    /// Parses and checks a descriptor from a registration.
    public init(json: JSONValue) throws(SkillbusError) {
        guard let identifier = json["identifier"]?.stringValue else {
            throw SkillbusError(.invalidRegistration, "a skill has no string 'identifier'")
        }
        guard SkillDescriptor.isValidIdentifier(identifier) else {
            throw SkillbusError(
                .invalidRegistration,
                "skill identifier '\(identifier)' is invalid: use 1-128 of a-z A-Z 0-9 . _ -")
        }
        let parameters = try ParameterSchema(json: json["parameters"] ?? .array([]))
        let problems = parameters.problems
        guard problems.isEmpty else {
            throw SkillbusError(
                .invalidRegistration, "skill '\(identifier)': " + problems.joined(separator: "; "))
        }
        var defaultTimeoutMs: Int?
        if let value = json["defaultTimeoutMs"], value != .null {
            guard let ms = value.intValue, (1...Wire.maxTimeoutMs).contains(ms) else {
                throw SkillbusError(
                    .invalidRegistration,
                    "skill '\(identifier)': 'defaultTimeoutMs' must be an integer from 1 to \(Wire.maxTimeoutMs)")
            }
            defaultTimeoutMs = ms
        }
        var metadata: [String: JSONValue] = [:]
        if let value = json["metadata"], value != .null {
            guard let object = value.objectValue else {
                throw SkillbusError(.invalidRegistration, "skill '\(identifier)': 'metadata' must be an object")
            }
            metadata = object
        }
        var needsConfirmation = false
        if let value = json["confirm"], value != .null {
            guard let flag = value.boolValue else {
                throw SkillbusError(.invalidRegistration, "skill '\(identifier)': 'confirm' must be true or false")
            }
            needsConfirmation = flag
        }
        let (retry, idempotent, concurrency) = try Self.policies(json, identifier)
        let (pure, cacheMs) = try Self.cachePolicy(json, identifier)
        self.init(
            identifier: identifier, displayName: json["displayName"]?.stringValue ?? identifier,
            description: json["description"]?.stringValue ?? "", parameters: parameters,
            defaultTimeoutMs: defaultTimeoutMs, metadata: metadata, needsConfirmation: needsConfirmation,
            retry: retry, idempotent: idempotent, concurrency: concurrency, pure: pure, cacheMs: cacheMs)
    }

    public static func isValidIdentifier(_ identifier: String) -> Bool {
        !identifier.isEmpty && identifier.utf8.count <= 128
            && identifier.utf8.allSatisfy { byte in
                (48...57).contains(byte) || (65...90).contains(byte) || (97...122).contains(byte)
                    || byte == UInt8(ascii: ".") || byte == UInt8(ascii: "_") || byte == UInt8(ascii: "-")
            }
    }
}
