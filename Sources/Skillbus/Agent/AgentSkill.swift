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
    /// Free-form metadata the registry keeps and passes on (tags, version, where it comes from); none by default.
    var metadata: [String: JSONValue] { get }
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
    public var metadata: [String: JSONValue] { [:] }

    public var descriptor: SkillDescriptor {
        SkillDescriptor(
            identifier: identifier, displayName: displayName, description: description, parameters: parameterSchema,
            defaultTimeoutMs: defaultTimeoutMs, metadata: metadata, needsConfirmation: needsConfirmation, retry: retryPolicy,
            idempotent: isIdempotent, concurrency: concurrencyLimit, pure: isPure, cacheMs: cacheMs)
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
    /// inside a round through the coordinator (on any agent that offers it, this one included), so that the
    /// round's single-flight and document see it; with no round, on this agent when it offers the skill.
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
    /// wait (outside an agent, or in a sub-call with no round, which the agent runs itself) the part goes
    /// nowhere.
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
