/// Decides an agent's turn one step at a time: call a skill (and see its result), or reply. The agent
/// loop asks it again after every skill call until it replies or the turn runs out of steps. A Swift
/// program embedding the library can bring its own; `RulesPlanner` needs nothing outside the process.
public protocol Planner: Sendable {
    /// The next step. A `SkillbusError` thrown ends the turn with that very error (its code is what the
    /// client sees, and `skillbus ask`'s exit code); any other error ends it with `skill_failed`.
    func next(_ input: PlannerInput) async throws -> PlannerDecision
    /// `.quick` for a planner that decides in microseconds or only awaits: its turns then run on the
    /// agent's I/O thread, with no thread hop per state message (as a `.quick` skill does).
    var executionStyle: SkillExecutionStyle { get }
}

extension Planner {
    public var executionStyle: SkillExecutionStyle { .general }
}

/// What a planner sees when it decides the next step of a turn.
public struct PlannerInput: Sendable {
    /// The user's message that started the turn.
    public var message: String
    /// The session before this turn, oldest first.
    public var history: [SessionMessage]
    /// This turn's skill calls so far, in order, with how each ended.
    public var steps: [PlannerStep]
    /// The skills the registry offers now.
    public var skills: [SkillDescriptor]
    /// The other live agents that take turns: the planner may ask one (`.ask`) or hand the session to one
    /// (`.handoff`).
    public var agents: [TeamMember]
    /// How this turn came: asked by another agent's turn, or handed over (with the note and what was done).
    public var team: TeamContext?

    public init(
        message: String, history: [SessionMessage] = [], steps: [PlannerStep] = [], skills: [SkillDescriptor],
        agents: [TeamMember] = [], team: TeamContext? = nil
    ) {
        self.message = message
        self.history = history
        self.steps = steps
        self.skills = skills
        self.agents = agents
        self.team = team
    }
}

/// Another agent a planner can ask or hand over to, as its registration describes it.
public struct TeamMember: Sendable, Equatable {
    public var name: String
    public var role: String?
    public var description: String?

    public init(name: String, role: String? = nil, description: String? = nil) {
        self.name = name
        self.role = role
        self.description = description
    }
}

/// One skill call of a turn and its outcome: the result form, or the error (for a choice the loop refused
/// before it ran, such as invalid parameters, the error says so and the planner may choose again). A step
/// that asked another agent has `asked` set, no skill, `parameters` `{"message"}`, and the reply as a text
/// result.
public struct PlannerStep: Sendable, Equatable {
    public var skill: String
    public var parameters: [String: JSONValue]
    public var outcome: Result<SkillResult, SkillbusError>
    public var asked: AgentTarget?

    public init(
        skill: String, parameters: [String: JSONValue], outcome: Result<SkillResult, SkillbusError>,
        asked: AgentTarget? = nil
    ) {
        self.skill = skill
        self.parameters = parameters
        self.outcome = outcome
        self.asked = asked
    }
}

public enum PlannerDecision: Sendable, Equatable {
    /// Run this skill with these parameters next.
    case call(skill: String, parameters: [String: JSONValue])
    /// A call that cannot be made as chosen (a model's tool call whose arguments are no JSON object, say):
    /// the loop records it as a failed step of `skill` with no parameters and this error, runs nothing, and
    /// asks again, so that the planner sees why. It counts against the turn's step limit.
    case invalidCall(skill: String, error: SkillbusError)
    /// Ask another agent (or a role) this message: a nested turn in the same round and session, whose reply
    /// comes back as this step's result.
    case ask(AgentTarget, message: String)
    /// Hand the session over: the other agent takes the user's message as a turn of its own, with this note.
    case handoff(AgentTarget, note: String)
    /// The turn's answer to the user, whole.
    case reply(String)
    /// The turn's answer as it is produced, piece by piece (a model's tokens, say); the agent forwards
    /// it in batches.
    case streamedReply(ReplyStream)
}

/// A reply that arrives in pieces. Two are equal only when they are the same stream.
public struct ReplyStream: Sendable, Equatable {
    public let pieces: AsyncThrowingStream<String, any Error>
    private let token = Token()

    public init(_ pieces: AsyncThrowingStream<String, any Error>) { self.pieces = pieces }

    public static func == (lhs: ReplyStream, rhs: ReplyStream) -> Bool { lhs.token === rhs.token }

    private final class Token: Sendable {}
}
