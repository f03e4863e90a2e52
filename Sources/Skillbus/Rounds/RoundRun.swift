/// A round the bus runs for a client (ROUND): its invocations, their outcomes, and the document that
/// answers it. Identical invocations go through the same single-flight as REQUESTs (`SingleFlight`).
struct RoundRun: Sendable {
    let id: [UInt8]
    let session: [UInt8]
    let spec: RoundSpec
    /// The canonical body: the same round id with another body is refused.
    let body: [UInt8]
    let accepted: UInt64
    let deadline: UInt64
    /// Clients waiting for the document (the same round sent again while it runs joins).
    var clients: [(client: PeerID, requestID: [UInt8])]
    var invocations: [RoundInvocation]
    /// The first invocation of the round with a given canonical key: whom an identical one reuses.
    var firstByKey: [ByteKey: String] = [:]
    /// Result forms of finished plan steps, by step id, for `$ref`.
    var results: [String: JSONValue] = [:]
    /// A plan some of whose steps refer to others' results: only then are results parsed into `results`.
    var hasReferences = false
    /// No new invocation starts (a plan stopped at a failure, or a fan-out's first success won).
    var stopped = false
    var subCalls = 0
    /// Bytes of partial output its document keeps, over all invocations (bounded by the bus's setting).
    var outputBytes = 0
    /// Set when a client cancelled the round: the document's error.
    var cancelled: SkillbusError?
    /// Retries the client asked for (the body's `retries`); nil: each skill's own policy.
    var retries: Int?
    /// The body's `priority`, for each of its invocations.
    var priority = InvocationPriority.normal
    /// The body's `noCache`: its invocations run even when the cache holds their answer.
    var noCache = false

    var roundText: String { String(decoding: id, as: UTF8.self) }

    /// The waiting invocations that can be decided now, in order: each with the first step it depends on that
    /// did not succeed (it is skipped), or nil (it starts; or is skipped, the round having stopped).
    func nextSteps() -> [(index: Int, failedStep: String?)] {
        var next: [(index: Int, failedStep: String?)] = []
        for index in invocations.indices where invocations[index].status == .waiting {
            var ready = true
            var failedStep: String?
            for id in invocations[index].after where !stopped {
                guard let dependency = self.index(ofStep: id) else { continue }
                let status = invocations[dependency].record.status
                if !status.isDone {
                    ready = false
                    break
                }
                if failedStep == nil, status != .ok { failedStep = id }
            }
            if ready { next.append((index, failedStep)) }
        }
        return next
    }

    // The loops below read members in place: iterating the invocations would copy each one, every member of it
    // retained and released.

    func index(ofStep id: String) -> Int? {
        for index in invocations.indices where invocations[index].record.id == id { return index }
        return nil
    }

    /// Every invocation of the round's own has ended (sub-calls never hold a round open).
    var ownInvocationsEnded: Bool {
        for index in invocations.indices
        where !invocations[index].record.status.isDone && invocations[index].subCallRequest == nil {
            return false
        }
        return true
    }
}

/// What starting one invocation needs of its round, taken out of the table without copying the whole run.
struct StepContext {
    let id: [UInt8]
    let session: [UInt8]
    let deadline: UInt64
    let retries: Int?
    let priority: InvocationPriority
    let noCache: Bool
    let clients: [(client: PeerID, requestID: [UInt8])]
    /// A round of one invocation (`RoundSpec.invoke`).
    let isInvoke: Bool
    var roundText: String { String(decoding: id, as: UTF8.self) }

    init(_ run: RoundRun) {
        (id, session, deadline, retries) = (run.id, run.session, run.deadline, run.retries)
        (priority, noCache, clients) = (run.priority, run.noCache, run.clients)
        if case .invoke = run.spec { isInvoke = true } else { isInvoke = false }
    }
}

/// Where an invocation of a round stands, and how it ended.
public enum InvocationStatus: String, Sendable, Equatable {
    /// Not started: it waits for the steps it depends on.
    case waiting
    /// Routed: queued for a slot, on an agent, or sharing an identical invocation's execution.
    case running
    case ok
    case error
    case cancelled
    /// It never ran: the round stopped, or a step it depends on did not succeed.
    case skipped

    var isDone: Bool { self != .waiting && self != .running }
    /// Failed in a way the summary counts (a skipped one is not counted: it follows from another).
    var isFailure: Bool { self == .error || self == .cancelled }

    /// As the round document and the feed spell it: an invocation that has not ended is `pending`.
    public var documentName: String { isDone ? rawValue : "pending" }

    public init?(documentName: String) {
        if documentName == "pending" {
            self = .running
        } else if let status = InvocationStatus(rawValue: documentName), status.isDone {
            self = status
        } else {
            return nil
        }
    }
}

/// One invocation of a running round: what it asks for, and its entry in the round's document.
struct RoundInvocation: Sendable {
    let skill: String
    /// Fan-out: the agent it must run on.
    let target: String?
    let parameters: JSONValue
    /// The parameters as sent, when nothing in them is a reference to resolve when the invocation starts:
    /// made once for all the invocations of a fan-out.
    let serializedParameters: [UInt8]?
    let after: [String]
    /// An ask of a team round: it runs as a turn the bus starts (CoordinatorState+TeamRounds), not an INVOKE.
    let ask: AskStep?
    /// When its turn started (an ask).
    var started: UInt64 = 0
    /// A client REQUEST made inside the round (a skill's sub-call), answered to that request id.
    var subCallRequest: [UInt8]?
    /// The execution it joined, while it waits for an identical invocation's outcome.
    var joined: SingleFlight.ExecutionID?
    /// How it stands, as the document shows it.
    var record: RoundDocument.Invocation

    init(
        id: String, skill: String, target: String?, parameters: JSONValue, serializedParameters: [UInt8]? = nil,
        after: [String], ask: AskStep? = nil
    ) {
        self.ask = ask
        self.skill = skill
        self.target = target
        self.parameters = parameters
        self.serializedParameters = serializedParameters
        self.after = after
        record = RoundDocument.Invocation(id: id, skill: skill)
        record.asked = ask?.target
    }

    var id: String { record.id }
    var status: InvocationStatus { record.status }

    /// Done, with how it ended: `ok` with its result, `cancelled`, or `error` with the error.
    mutating func end(with outcome: Outcome) {
        record.agent = outcome.agent.isEmpty ? nil : String(decoding: outcome.agent, as: UTF8.self)
        record.durationMs = Double(outcome.durationMicros) / 1000
        if outcome.status == .ok {
            record.status = .ok
            record.resultJSON = DocumentJSON(payload: outcome.payload)
        } else {
            let error = SkillbusError(json: (try? JSONValue(parsing: outcome.payload)) ?? .null)
            record.status = error.code == .cancelled ? .cancelled : .error
            record.error = error
        }
    }
}

/// A round that ended, as it is remembered for the same round id sent again: its canonical body and its
/// document, nothing of how it ran (that went when it ended, so remembered rounds stay small).
struct FinishedRound: Sendable, Equatable {
    let body: [UInt8]
    let document: [UInt8]
    let finishedAt: UInt64
}

/// The rounds the bus runs or ran for clients, by round id. It owns the count of running rounds and the
/// order in which finished ones are forgotten.
struct RoundTable: Sendable {
    private var runs: [ByteKey: RoundRun] = [:]
    private var finished = RememberedRounds()
    /// Rounds not yet finished: only while there are any can a REQUEST be a sub-call listed in one.
    var runningCount: Int { runs.count }
    /// Finished rounds remembered now.
    var finishedCount: Int { finished.count }

    /// The running round with this id.
    subscript(key: ByteKey) -> RoundRun? { runs[key] }

    /// The remembered round with this id, ended.
    func finishedRound(_ key: ByteKey) -> FinishedRound? { finished[key.bytes] }

    /// Whether the id names a round, running or remembered.
    func holds(_ key: ByteKey) -> Bool { runs[key] != nil || finished[key.bytes] != nil }

    func isRunning(_ key: ByteKey) -> Bool { runs[key] != nil }

    /// A round's id as text and the id of one of its invocations (for the feed), read member by member.
    func names(_ key: ByteKey, invocation index: Int) -> (round: String, invocation: String)? {
        guard let id = runs[key]?.id, let invocation = runs[key]?.invocations[index].id else { return nil }
        return (String(decoding: id, as: UTF8.self), invocation)
    }

    mutating func start(_ run: consuming RoundRun, key: ByteKey) {
        guard !holds(key), runs.updateValue(run, forKey: key) == nil else {
            preconditionFailure("a round was started under a round id the table still holds")
        }
    }

    /// Changes a running round in place; nil when the round is not running (finished, or forgotten).
    @discardableResult
    mutating func update<Result>(_ key: ByteKey, _ change: (inout RoundRun) -> Result) -> Result? {
        guard let index = runs.index(forKey: key) else { return nil }
        return change(&runs.values[index])
    }

    /// Changes a round that the caller knows is running (it holds the key of a step it just started).
    @discardableResult
    mutating func updateRunning<Result>(_ key: ByteKey, _ change: (inout RoundRun) -> Result) -> Result {
        guard let result = update(key, change) else {
            preconditionFailure("a running round's invocation referred to a round that is not running")
        }
        return result
    }

    /// The round ended: its document is kept for the same round id sent again, unless `keep` is false (it
    /// was cancelled, or failed in a way that may be tried again: the same round id then runs anew).
    mutating func finish(_ key: ByteKey, document: [UInt8], keep: Bool, now: UInt64) {
        let run = end(key)
        if keep { remember(run, key: key, document: document, now: now) }
    }

    /// Takes the round out of the running ones (moved, not copied: its document is written from it next).
    mutating func end(_ key: ByteKey) -> RoundRun {
        guard let run = runs.removeValue(forKey: key) else {
            preconditionFailure("a round that is not running was finished")
        }
        return run
    }

    /// Keeps an ended round's document for the same round id sent again.
    mutating func remember(_ run: RoundRun, key: ByteKey, document: [UInt8], now: UInt64) {
        finished.remember(key.bytes, FinishedRound(body: run.body, document: document, finishedAt: now))
    }

    /// The running round that `client` waits for with `requestID`.
    func running(client: PeerID, requestID: [UInt8]) -> ByteKey? {
        runs.first { $0.value.clients.contains { $0 == (client, requestID) } }?.key
    }

    /// Client: ask a running round to answer one more client too; false when it is not running. A client that
    /// sends the same ROUND again (a resend, PROTOCOL §3.5.9) is answered once.
    mutating func join(_ key: ByteKey, client: PeerID, requestID: [UInt8]) -> Bool {
        update(key) { run -> Void in
            if !run.clients.contains(where: { $0 == (client, requestID) }) { run.clients.append((client, requestID)) }
        } != nil
    }

    /// Forgets finished rounds after the retention, and the oldest beyond `limit`.
    mutating func evict(now: UInt64, retentionNanos: UInt64, limit: Int) {
        while let at = finished.oldestFinishedAt, at &+ retentionNanos <= now || finished.entryCount > limit {
            finished.forgetOldest()
        }
    }
}
