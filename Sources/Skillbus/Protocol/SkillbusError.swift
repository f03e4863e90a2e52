/// An error that crosses the wire: a stable machine-readable code, a message for people,
/// and optional structured details (for example every invalid parameter at once).
public struct SkillbusError: Error, Sendable, Equatable, CustomStringConvertible {
    /// A stable error code; its `rawValue` is what the wire carries (see docs/PROTOCOL.md).
    public struct Code: Sendable, Hashable, CustomStringConvertible {
        public let rawValue: String
        public init(_ rawValue: String) { self.rawValue = rawValue }
        public var description: String { rawValue }

        /// No live agent offers the skill.
        public static let unknownSkill = Code("unknown_skill")
        /// Parameters do not match the skill's schema; nothing ran.
        public static let invalidParameters = Code("invalid_parameters")
        /// The skill ran and threw.
        public static let skillFailed = Code("skill_failed")
        /// The invocation's deadline passed.
        public static let timeout = Code("timeout")
        /// Every provider is at capacity and the wait queue is full.
        public static let busy = Code("busy")
        /// The agent running the invocation disappeared.
        public static let agentLost = Code("agent_lost")
        /// A worker answered `ok` with a payload that is no result form; the message names the agent.
        public static let malformedResult = Code("malformed_result")
        /// A message had the wrong number of frames or unreadable fields.
        public static let malformedMessage = Code("malformed_message")
        /// The first frame named a protocol or version this bus does not speak.
        public static let unsupportedProtocol = Code("unsupported_protocol")
        /// A message (all its frames together) was larger than the configured limit.
        public static let messageTooLarge = Code("message_too_large")
        /// Another live agent already uses this name.
        public static let nameTaken = Code("name_taken")
        /// The peer's key may not do this: send worker messages (a key without the worker role), register
        /// this agent name (a name another key owns, or none does), or read the feed (PROTOCOL §12).
        public static let notAllowed = Code("not_allowed")
        /// A worker message came from a peer that has not registered (or was forgotten).
        public static let notRegistered = Code("not_registered")
        /// A registration was refused (bad name, bad skill schema).
        public static let invalidRegistration = Code("invalid_registration")
        /// Another live agent offers a skill with this identifier under a different parameter schema.
        public static let schemaConflict = Code("schema_conflict")
        /// A ROUND body (or a plan in it) was refused before anything ran; the message says why.
        public static let invalidRound = Code("invalid_round")
        /// A round id that was already used for a different round body.
        public static let roundConflict = Code("round_conflict")
        /// A fan-out with `majority` aggregation found no result that more than half the agents returned.
        public static let noMajority = Code("no_majority")
        /// This coordinator is a standby of a coordinator group (PROTOCOL §3.11): it serves nothing. `details` is
        /// `{"group", "epoch", "leader"}`, the leader a `GroupLeader` (its endpoints) or null while none is known.
        public static let notLeader = Code("not_leader")
        /// The coordinator could not be reached in time.
        public static let unreachable = Code("unreachable")
        /// The invocation was cancelled.
        public static let cancelled = Code("cancelled")
        /// A configuration file or option was refused; the message names the key.
        public static let invalidConfiguration = Code("invalid_configuration")
        /// The skill needs the client's approval (PROTOCOL §3.8), which did not come: refused, or no answer.
        public static let confirmationRequired = Code("confirmation_required")
        /// No live agent has this name.
        public static let unknownAgent = Code("unknown_agent")
        /// The agent holds no session with this id.
        public static let unknownSession = Code("unknown_session")
        /// The peer does not support what was asked (a worker that keeps no context, say).
        public static let unsupported = Code("unsupported")
        /// An agent's store could not read or write its database (disk full, read-only, I/O error, closed).
        /// `details` carries SQLite's result code (`sqlite_code`), its text and the statement; a write
        /// refused with this code changed nothing.
        public static let storageUnavailable = Code("storage_unavailable")
        /// An agent's store refused to open its directory: another process (or this one) holds it, or the
        /// database is newer than this build, corrupt, or no SQLite file. Nothing was changed or deleted;
        /// the message says what to do.
        public static let storeRefused = Code("store_refused")
        /// A skill emitted more partial output than its agent allows (`maxOutputBytes`); it was stopped.
        public static let outputTooLarge = Code("output_too_large")
        /// A command skill's program failed: it could not start, exited with a non-zero code or was killed by
        /// a signal, or printed no valid JSON where its result is JSON. `details` has `exitCode` (or `signal`)
        /// and the last lines of its standard error (`stderr`).
        public static let commandFailed = Code("command_failed")
        /// The round was running when the coordinator stopped (a crash, kill -9) and is not run again, because
        /// not every skill of it is idempotent (PROTOCOL §3.5.9).
        public static let interrupted = Code("interrupted")
        /// An agent's planner cannot reach its endpoint (a language model's server that is down): the bus sends
        /// turns that name no agent elsewhere for a while (PROTOCOL §3.7).
        public static let plannerUnavailable = Code("planner_unavailable")
        /// An agent asked another for a turn that may not run: nested past the depth limit, or in a circle.
        public static let delegationRefused = Code("delegation_refused")
        /// Something inside Skillbus went wrong.
        public static let internalError = Code("internal")
    }

    public let code: Code
    public let message: String
    public let details: JSONValue?

    public init(_ code: Code, _ message: String, details: JSONValue? = nil) {
        self.code = code
        self.message = message
        self.details = details
    }

    public var description: String { "\(code.rawValue): \(message)" }

    /// The error's wire form: `{"code": …, "message": …, "details": …}`.
    public var json: JSONValue {
        var object: [String: JSONValue] = ["code": .string(code.rawValue), "message": .string(message)]
        if let details { object["details"] = details }
        return .object(object)
    }

    public init(json: JSONValue) {
        self.init(
            Code(json["code"]?.stringValue ?? Code.internalError.rawValue),
            json["message"]?.stringValue ?? "no message given",
            details: json["details"]
        )
    }
}
