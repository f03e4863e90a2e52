import Foundation

/// Where a memory entry lives: the agent's own memory, or one session's.
public enum MemoryScope: Sendable, Hashable {
    case agent
    case session(String)

    /// The `scope` column of the memory table: "" for the agent, "s:<id>" for a session.
    var column: String {
        switch self {
        case .agent: ""
        case .session(let id): "s:" + id
        }
    }
}

/// What the store keeps in memory about one session (its messages stay on disk).
public struct SessionSummary: Sendable, Equatable {
    public var id: String
    public var created: Date
    public var updated: Date
    /// Distinct rounds that added messages to this session on this agent.
    public var turns: Int
    public var messages: Int
    /// The first user message's text, or the first skill called, cut to 80 characters; "" if none.
    public var title: String

    public init(id: String, created: Date, updated: Date, turns: Int, messages: Int, title: String) {
        self.id = id
        self.created = created
        self.updated = updated
        self.turns = turns
        self.messages = messages
        self.title = title
    }

    /// `{"session","created","updated","turns","messages","title"}`, times in ISO 8601 UTC with milliseconds.
    public var json: JSONValue {
        [
            "session": .string(id), "created": .string(FeedEvent.timestamp(created)),
            "updated": .string(FeedEvent.timestamp(updated)), "turns": .number(Double(turns)),
            "messages": .number(Double(messages)), "title": .string(title),
        ]
    }
}

/// One message of a session's history.
public struct SessionMessage: Sendable, Equatable {
    public enum Role: String, Sendable, CaseIterable {
        case user, agent, skillCall, skillResult
    }

    /// 0-based position in the session.
    public var index: Int
    public var role: Role
    public var content: JSONValue
    public var time: Date
    /// The round that added it ("" if none).
    public var round: String

    public init(index: Int, role: Role, content: JSONValue, time: Date, round: String) {
        self.index = index
        self.role = role
        self.content = content
        self.time = time
        self.round = round
    }

    /// `{"index","role","content","time","round"}`, the time in ISO 8601 UTC with milliseconds.
    public var json: JSONValue {
        [
            "index": .number(Double(index)), "role": .string(role.rawValue), "content": content,
            "time": .string(FeedEvent.timestamp(time)), "round": .string(round),
        ]
    }
}

extension SessionMessage {
    /// What a message of this role contributes to its session's title, if anything: a user message its text
    /// (a string, or the "text" field of an object, else the JSON itself), a skill call the skill's name (a
    /// string, or the "skill" field of an object).
    static func titleText(_ role: Role, _ content: JSONValue) -> String? {
        switch role {
        case .user: content.stringValue ?? content["text"]?.stringValue ?? content.jsonString
        case .skillCall: content.stringValue ?? content["skill"]?.stringValue
        case .agent, .skillResult: nil
        }
    }
}
