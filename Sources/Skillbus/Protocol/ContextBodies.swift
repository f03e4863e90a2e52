import SkillbusZMQ

/// What a client may ask an agent about its context, or the bus about the agents of sessions (QUERY,
/// PROTOCOL §3.6).
public enum AgentQuery: Sendable, Equatable {
    /// Every session the agent holds.
    case sessions
    /// One session's messages, in order.
    case history(session: String)
    /// The memory of one scope.
    case memory(MemoryScope)
    /// Asked of the bus itself: the agents that served each session it knows (or `session` alone), at most
    /// `limit` sessions, the most recently served first.
    case roster(session: String?, limit: Int)

    /// How many sessions a `roster` query lists when it names no limit.
    public static let defaultRosterLimit = 100

    /// The session the query is about, if any: a QUERY naming no agent goes where that session lives.
    public var session: String? {
        switch self {
        case .sessions, .memory(.agent), .roster: nil
        case .history(let session), .memory(.session(let session)): session
        }
    }

    public var json: JSONValue {
        switch self {
        case .sessions: ["query": "sessions"]
        case .history(let session): ["query": "history", "session": .string(session)]
        case .memory(.agent): ["query": "memory", "scope": "agent"]
        case .memory(.session(let session)): ["query": "memory", "scope": "session", "session": .string(session)]
        case .roster(nil, let limit): ["query": "roster", "limit": .number(Double(limit))]
        case .roster(let session?, let limit):
            ["query": "roster", "session": .string(session), "limit": .number(Double(limit))]
        }
    }

    public init(json: JSONValue) throws(SkillbusError) {
        let reader = DocumentReader(json, "query")
        switch try reader.string("query") {
        case "sessions":
            self = .sessions
        case "history":
            self = .history(session: try reader.string("session"))
        case "memory":
            switch try reader.string("scope") {
            case "agent": self = .memory(.agent)
            case "session": self = .memory(.session(try reader.string("session")))
            case let other: throw reader.problem("'scope' must be agent or session, got '\(other.prefix(64))'")
            }
        case "roster":
            let session = try reader.optionalString("session")
            if let session, session.isEmpty || session.utf8.count > Wire.maxSessionIDBytes {
                throw reader.problem("'session' must have 1 to \(Wire.maxSessionIDBytes) bytes")
            }
            let limit = try reader.optional("limit").map { _ throws(SkillbusError) in try reader.int("limit") }
            if let limit, !(1...CoordinatorState.rosterLimit).contains(limit) {
                throw reader.problem("'limit' must be 1 to \(CoordinatorState.rosterLimit), got \(limit)")
            }
            self = .roster(session: session, limit: limit ?? Self.defaultRosterLimit)
        case let other:
            throw reader.problem("'query' must be sessions, history, memory or roster, got '\(other.prefix(64))'")
        }
    }
}

/// How an agent (or the bus, when it could not ask one) answered a QUERY: status `ok` with the answer's
/// JSON, or `error` with an error object.
public enum AgentAnswer: Sendable, Equatable {
    case ok(JSONValue)
    case error(SkillbusError)

    var isOK: Bool { if case .ok = self { true } else { false } }

    /// Two frames: status, then the JSON.
    var frames: [[UInt8]] {
        switch self {
        case .ok(let body): [ReplyStatus.ok.frame, body.serialized()]
        case .error(let error): [ReplyStatus.error.frame, error.json.serialized()]
        }
    }

    init(fields message: Multipart, from index: Int) throws(SkillbusError) {
        let status = try ReplyStatus(field: message, index)
        let body = try Wire.json(message, index + 1, "answer")
        self = status == .ok ? .ok(body) : .error(SkillbusError(json: body))
    }
}

/// An answer as it travels (status frame and JSON body), for the bus to relay byte for byte: a turn's
/// document is read by the client that asked, and never parsed on the way.
public struct RelayedAnswer: Sendable, Equatable {
    public let status: ReplyStatus
    public let body: [UInt8]

    public init(_ answer: AgentAnswer) {
        let frames = answer.frames
        status = answer.isOK ? .ok : .error
        body = frames[1]
    }

    /// A body already written (an agent writes its turn document straight to bytes).
    public init(status: ReplyStatus, body: [UInt8]) {
        self.status = status
        self.body = body
    }

    public static func ok(_ body: JSONValue) -> RelayedAnswer { RelayedAnswer(.ok(body)) }
    public static func error(_ error: SkillbusError) -> RelayedAnswer { RelayedAnswer(.error(error)) }

    var frames: [[UInt8]] { [status.frame, body] }

    init(fields message: Multipart, from index: Int) throws(SkillbusError) {
        status = try ReplyStatus(field: message, index)
        body = message[index + 1]
        guard !body.isEmpty else { throw SkillbusError(.malformedMessage, "field \(index + 1) (answer) is empty") }
    }
}

/// A worker's context in numbers (CONTEXT frame 2): the sessions its store holds, and why writes fail
/// when they do.
public struct AgentContextStatus: Sendable, Equatable {
    public var sessions: Int
    /// Nil while the store takes writes.
    public var storageProblem: SkillbusError?

    public init(sessions: Int, storageProblem: SkillbusError? = nil) {
        self.sessions = sessions
        self.storageProblem = storageProblem
    }

    public var json: JSONValue { ["sessions": .number(Double(sessions)), "storage": storageProblem?.json ?? .null] }

    public init(json: JSONValue) throws(SkillbusError) {
        let reader = DocumentReader(json, "context")
        let sessions = try reader.int("sessions")
        guard sessions >= 0 else { throw reader.problem("'sessions' must not be negative") }
        self.init(sessions: sessions, storageProblem: reader.optional("storage").map(SkillbusError.init(json:)))
    }
}
