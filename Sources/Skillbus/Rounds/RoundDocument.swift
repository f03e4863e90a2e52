/// The answer to a ROUND (ROUND reply frame 4, PROTOCOL §5.14): how the round ended, its result, every
/// invocation with its agent, status, duration and whether it was deduplicated, and a summary. The bus
/// builds it and clients read it through this one type.
public struct RoundDocument: Sendable, Equatable {
    /// One invocation of the round: a plan step, a fan-out's agent, the one invocation, or a sub-call.
    public struct Invocation: Sendable, Equatable {
        public var id: String
        public var skill: String
        /// The agent that ran it (for a deduplicated one, that of the execution it reused); nil when none did.
        public var agent: String?
        public var status: InvocationStatus
        public var durationMs: Double
        public var deduplicated: Bool
        /// For a deduplicated invocation: the first invocation in this document with the same key.
        public var reusedFrom: String?
        /// The result form when `ok`.
        public var result: JSONValue? {
            get { resultJSON?.value }
            set { resultJSON = newValue.map(DocumentJSON.value) }
        }
        /// The result form as the document holds it: the bus keeps a worker's as the canonical bytes it sent.
        var resultJSON: DocumentJSON?
        public var error: SkillbusError?
        /// The partial output it emitted while it ran, in order (PROTOCOL §3.9); for a deduplicated
        /// invocation that reused one of this document, empty: see that one.
        public var output: [OutputPart] = []
        /// The document holds only the first parts of its output (the round's budget ran out, or some were
        /// lost on the way).
        public var outputTruncated = false
        /// Every attempt, in order, when the bus retried it (the last one's outcome is the invocation's);
        /// empty when it ran once.
        public var attempts: [Attempt] = []
        /// Answered from the bus's result cache (PROTOCOL §4.16): it did not run in this round.
        public var cached = false
        /// An ask of a team round (its `skill` is empty): whom it asked, the message as sent, and the turn
        /// document (§5.18) of the turn that answered, when one did.
        public var asked: AgentTarget?
        public var message: String?
        public var turn: JSONValue? {
            get { turnJSON?.value }
            set { turnJSON = newValue.map(DocumentJSON.value) }
        }
        /// The turn document as the document holds it: the bus keeps an agent's as the canonical bytes it sent.
        var turnJSON: DocumentJSON?

        public init(
            id: String, skill: String, agent: String? = nil, status: InvocationStatus = .waiting, durationMs: Double = 0,
            deduplicated: Bool = false, reusedFrom: String? = nil, result: JSONValue? = nil, error: SkillbusError? = nil,
            output: [OutputPart] = [], outputTruncated: Bool = false, attempts: [Attempt] = []
        ) {
            self.output = output
            self.outputTruncated = outputTruncated
            self.attempts = attempts
            self.id = id
            self.skill = skill
            self.agent = agent
            self.status = status
            self.durationMs = durationMs
            self.deduplicated = deduplicated
            self.reusedFrom = reusedFrom
            self.resultJSON = result.map(DocumentJSON.value)
            self.error = error
        }
    }

    /// One attempt of a retried invocation: the agent it went to and how it ended there.
    public struct Attempt: Sendable, Equatable {
        public var agent: String?
        /// `ok`, `error` or `cancelled`.
        public var status: InvocationStatus
        /// From the attempt's dispatch (or, for the first, its start) to its end.
        public var durationMs: Double
        public var error: SkillbusError?

        public init(agent: String?, status: InvocationStatus, durationMs: Double, error: SkillbusError? = nil) {
            self.agent = agent
            self.status = status
            self.durationMs = durationMs
            self.error = error
        }

        public var json: JSONValue {
            [
                "agent": agent.map { .string($0) } ?? .null, "status": .string(status.documentName),
                "durationMs": .number(durationMs), "error": error?.json ?? .null,
            ]
        }

        public init(json: JSONValue) throws(SkillbusError) {
            let reader = DocumentReader(json, "attempt")
            let name = try reader.string("status")
            guard let status = InvocationStatus(documentName: name) else {
                throw reader.problem("'status' '\(name)' is no invocation status")
            }
            self.init(
                agent: try reader.optionalString("agent"), status: status, durationMs: try reader.number("durationMs"),
                error: reader.optional("error").map(SkillbusError.init(json:)))
        }
    }

    public struct Summary: Sendable, Equatable {
        public var invocations = 0
        /// Invocations that ran on an agent themselves (not deduplicated, with an agent).
        public var executions = 0
        public var deduplicated = 0
        /// Invocations that ended `error` (not pending, skipped or cancelled).
        public var failed = 0
        public var totalMs: Double = 0

        public init() {}

        init(_ invocations: [Invocation], totalMs: Double) {
            self.invocations = invocations.count
            // One pass, reading members in place (iterating would copy each invocation).
            for index in invocations.indices {
                if invocations[index].deduplicated {
                    deduplicated += 1
                } else if !invocations[index].cached && invocations[index].agent != nil {
                    executions += 1
                }
                if invocations[index].status == .error { failed += 1 }
            }
            self.totalMs = totalMs
        }
    }

    /// A fan-out's `majority` vote.
    public struct Vote: Sendable, Equatable {
        /// How many agents were asked, including those that failed.
        public var of: Int
        /// How many returned the winning result; nil when none has a majority.
        public var votes: Int?
        /// One entry per distinct successful result, most votes first.
        public var split: [Group]

        public struct Group: Sendable, Equatable {
            public var result: JSONValue
            /// In agent order.
            public var agents: [String]
        }
    }

    public var round: String
    /// `invoke`, `fanout`, `plan`, `ask` or `asks`; nil when the round was refused before its shape was known.
    public var shape: String?
    public var status: ReplyStatus
    public var result: JSONValue {
        get { resultJSON.value }
        set { resultJSON = .value(newValue) }
    }
    /// The result as the document holds it: the bus writes an aggregate of its invocations' results once.
    var resultJSON: DocumentJSON = .value(.null)
    public var error: SkillbusError?
    /// `invoke` and `ask`: the agent that ran it; fan-out and asks `first`: the winner.
    public var agent: String?
    public var vote: Vote?
    public var durationMs: Double
    public var invocations: [Invocation]
    public var summary: Summary
    /// The bus answered from what it kept of an earlier run of this round id (PROTOCOL §3.5.8): nothing ran
    /// for this request. Written only when true.
    public var stored = false

    public init(
        round: String, shape: String?, status: ReplyStatus, result: JSONValue = .null, error: SkillbusError? = nil,
        agent: String? = nil, vote: Vote? = nil, durationMs: Double = 0, invocations: [Invocation] = [],
        summary: Summary = Summary()
    ) {
        self.round = round
        self.shape = shape
        self.status = status
        self.resultJSON = .value(result)
        self.error = error
        self.agent = agent
        self.vote = vote
        self.durationMs = durationMs
        self.invocations = invocations
        self.summary = summary
    }

    /// A round refused before anything ran: status error, no invocations, all counts zero.
    public static func refusal(round: String, shape: String?, _ error: SkillbusError) -> RoundDocument {
        RoundDocument(round: round, shape: shape, status: .error, error: error)
    }
}

/// A JSON value of a round document as the bus holds it: a parsed value, or canonical bytes (compact, keys
/// sorted: what `JSONValue.serialized()` gives) that go into the document as they are and are parsed only
/// when someone reads the value. A worker's result form is kept so, and a fan-out's aggregate is written so
/// once, instead of parsing every result into a tree and writing it again.
enum DocumentJSON: Sendable, Equatable {
    case value(JSONValue)
    case canonical([UInt8])

    /// A worker's payload: its canonical form read straight from the bytes when the fast reader can, else
    /// parsed (a payload that is not JSON is `null`, as it always was in the document).
    init(payload: [UInt8]) {
        // A worker writes canonical JSON (Skillbus's own do, and the Python package): then it is kept as it came.
        if CanonicalJSON.isCanonical(payload) {
            self = .canonical(payload)
        } else if let canonical = CanonicalJSON.object(payload, defaults: [], after: []) {
            self = .canonical(canonical)
        } else {
            self = .value((try? JSONValue(parsing: payload)) ?? .null)
        }
    }

    var value: JSONValue {
        switch self {
        case .value(let value): value
        case .canonical(let bytes): (try? JSONValue(parsing: bytes)) ?? .null
        }
    }

    /// The member `name` of an object: from canonical bytes, only that member's value is parsed.
    func member(_ name: String) -> JSONValue? {
        switch self {
        case .value(let value): value[name]
        case .canonical(let bytes):
            CanonicalJSON.memberRange(name, in: bytes).flatMap { try? JSONValue(parsing: Array(bytes[$0])) }
        }
    }

    /// The canonical bytes, written once for a parsed value.
    var canonicalBytes: [UInt8] {
        switch self {
        case .value(let value): value.serialized()
        case .canonical(let bytes): bytes
        }
    }

    func write(to out: inout [UInt8]) {
        switch self {
        case .value(let value): value.write(to: &out)
        case .canonical(let bytes): out.append(contentsOf: bytes)
        }
    }

    /// Equal when they are the same value, whichever form each is in.
    static func == (left: DocumentJSON, right: DocumentJSON) -> Bool {
        switch (left, right) {
        case (.canonical(let first), .canonical(let second)): first == second
        default: left.value == right.value
        }
    }
}

// MARK: - JSON

extension RoundDocument.Invocation {
    /// `output` only when there is some, `outputTruncated` only when true: a round without partial output
    /// has the document it always had.
    public var json: JSONValue {
        var object: [String: JSONValue] = [
            "id": .string(id), "skill": .string(skill), "agent": agent.map { .string($0) } ?? .null,
            "status": .string(status.documentName), "durationMs": .number(durationMs),
            "deduplicated": .bool(deduplicated), "reusedFrom": reusedFrom.map { .string($0) } ?? .null,
            "result": result ?? .null, "error": error?.json ?? .null,
        ]
        if !output.isEmpty { object["output"] = .array(output.map(\.json)) }
        if outputTruncated { object["outputTruncated"] = true }
        if !attempts.isEmpty { object["attempts"] = .array(attempts.map(\.json)) }
        if cached { object["cached"] = true }
        if let asked {
            object["ask"] = ["to": .string(asked.text), "message": message.map { .string($0) } ?? .null]
            object["turn"] = turn ?? .null
        }
        return .object(object)
    }

    public init(json: JSONValue) throws(SkillbusError) {
        let reader = DocumentReader(json, "invocation")
        let statusName = try reader.string("status")
        guard let status = InvocationStatus(documentName: statusName) else {
            throw reader.problem("'status' '\(statusName)' is none of ok, error, cancelled, skipped, pending")
        }
        self.init(
            id: try reader.string("id"), skill: try reader.string("skill"), agent: try reader.optionalString("agent"),
            status: status, durationMs: try reader.number("durationMs"), deduplicated: try reader.bool("deduplicated"),
            reusedFrom: try reader.optionalString("reusedFrom"), result: reader.optional("result"),
            error: reader.optional("error").map(SkillbusError.init(json:)),
            attempts: try (reader.optional("attempts")?.arrayValue ?? []).map(RoundDocument.Attempt.init(json:)))
        if let parts = reader.optional("output") {
            guard let list = parts.arrayValue else { throw reader.problem("'output' must be an array of parts") }
            for item in list { output.append(try OutputPart(json: item)) }
        }
        outputTruncated = reader.optional("outputTruncated")?.boolValue ?? false
        cached = reader.optional("cached")?.boolValue ?? false
        if let ask = reader.optional("ask") {
            guard let to = ask["to"]?.stringValue.flatMap(AgentTarget.init) else {
                throw reader.problem("'ask' needs 'to', an agent or role:NAME")
            }
            asked = to
            message = ask["message"]?.stringValue
            turn = reader.optional("turn").flatMap { $0 == .null ? nil : $0 }
        }
    }
}

extension RoundDocument.Summary {
    public var json: JSONValue {
        [
            "invocations": .number(Double(invocations)), "executions": .number(Double(executions)),
            "deduplicated": .number(Double(deduplicated)), "failed": .number(Double(failed)),
            "totalMs": .number(totalMs),
        ]
    }

    public init(json: JSONValue) throws(SkillbusError) {
        let reader = DocumentReader(json, "summary")
        invocations = try reader.int("invocations")
        executions = try reader.int("executions")
        deduplicated = try reader.int("deduplicated")
        failed = try reader.int("failed")
        totalMs = try reader.number("totalMs")
    }
}

extension RoundDocument.Vote {
    public var json: JSONValue {
        var object: [String: JSONValue] = [
            "mode": "majority", "of": .number(Double(of)),
            "split": .array(
                split.map {
                    [
                        "result": $0.result, "votes": .number(Double($0.agents.count)),
                        "agents": .array($0.agents.map { .string($0) }),
                    ]
                }),
        ]
        if let votes { object["votes"] = .number(Double(votes)) }
        return .object(object)
    }

    public init(json: JSONValue) throws(SkillbusError) {
        let reader = DocumentReader(json, "aggregate")
        of = try reader.int("of")
        votes = reader.optional("votes").flatMap(\.intValue)
        var groups: [Group] = []
        for item in try reader.array("split") {
            let group = DocumentReader(item, "aggregate.split")
            let agents = try group.array("agents").compactMap(\.stringValue)
            groups.append(Group(result: group.optional("result") ?? .null, agents: agents))
        }
        split = groups
    }
}

extension RoundDocument {
    /// Compact JSON as PROTOCOL §2 writes it. `agent` is always there for `invoke`, and for other shapes
    /// only when one is named; `aggregate` only for a majority vote.
    public var json: JSONValue {
        var object: [String: JSONValue] = [
            "round": .string(round), "shape": shape.map { .string($0) } ?? .null, "status": .string(status.rawValue),
            "result": result, "error": error?.json ?? .null, "durationMs": .number(durationMs),
            "invocations": .array(invocations.map(\.json)), "summary": summary.json,
        ]
        if Self.alwaysNamesAgent(shape) || agent != nil { object["agent"] = agent.map { .string($0) } ?? .null }
        if let vote { object["aggregate"] = vote.json }
        if stored { object["stored"] = true }
        return .object(object)
    }

    /// Shapes of one invocation, whose document names its agent (`null` when none took it).
    static func alwaysNamesAgent(_ shape: String?) -> Bool { shape == "invoke" || shape == "ask" }

    /// A kept document's bytes as the bus sends them again: with `"stored": true` (keys stay in order).
    static func markedStored(_ document: [UInt8]) -> [UInt8] {
        guard case .object(var object)? = try? JSONValue(parsing: document) else { return document }
        object["stored"] = true
        return JSONValue.object(object).serialized()
    }

    public init(json: JSONValue) throws(SkillbusError) {
        let reader = DocumentReader(json, "round document")
        var invocations: [Invocation] = []
        for item in try reader.array("invocations") { invocations.append(try Invocation(json: item)) }
        self.init(
            round: try reader.string("round"), shape: try reader.optionalString("shape"), status: try reader.oneOf("status"),
            result: reader.optional("result") ?? .null, error: reader.optional("error").map(SkillbusError.init(json:)),
            agent: try reader.optionalString("agent"), vote: try reader.optional("aggregate").map(Vote.init(json:)),
            durationMs: try reader.number("durationMs"), invocations: invocations,
            summary: try Summary(json: reader.optional("summary") ?? .null))
        stored = reader.optional("stored")?.boolValue ?? false
    }

    public init(parsing bytes: [UInt8]) throws(SkillbusError) {
        do {
            try self.init(json: try JSONValue(parsing: bytes))
        } catch let error as SkillbusError {
            throw error
        } catch {
            throw SkillbusError(.malformedMessage, "the round document is not JSON: \(error)")
        }
    }
}
