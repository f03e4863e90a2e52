import Foundation

/// The latest sessions as the dashboard's session view draws them, folded from the feed's turn events: for
/// each session the events of its turns (every `agent.state` of a turn, `turn.call`, and, when the bus
/// publishes them, `turn.delegated` and `turn.handoff`), the agents that took part, and the turns still
/// running. Bounded in sessions, in events per session and in the size of each event; no sockets.
public struct RecentSessions: Sendable {
    public struct Session: Sendable, Equatable {
        public var id: String
        public var first: Date
        public var last: Date
        /// In the order they first showed up.
        public var agents: [String] = []
        /// Turn id → its agent, for the turns whose last state was neither `completed` nor `failed`.
        public var running: [String: String] = [:]
        /// Feed bodies with `type` and `time`, oldest first, at most `eventLimit`.
        public var events: [JSONValue] = []
        /// Older events let go to keep `eventLimit`.
        public var dropped = 0

        public var live: Bool { !running.isEmpty }
    }

    /// The topics that belong to a session (`agent.state` only when it carries one).
    public static let topics: Set<String> = ["agent.state", "turn.call", "turn.delegated", "turn.handoff"]
    /// A text field longer than this is cut: a delegation's message or a reason is for a tooltip.
    static let textLimit = 300

    public let limit: Int
    public let eventLimit: Int
    /// Least recently active first.
    private(set) var sessions: [Session] = []

    public init(limit: Int = 16, eventLimit: Int = 400) {
        self.limit = limit
        self.eventLimit = eventLimit
    }

    public var newestFirst: [Session] { sessions.reversed() }

    /// Folds one feed event in; true when it changed a session. `agent.left` ends the agent's running turns,
    /// since a worker that is gone never sends their last state.
    @discardableResult
    public mutating func apply(topic: String, fields: [String: JSONValue], time: Date) -> Bool {
        let agent = fields["agent"]?.stringValue ?? ""
        if topic == "agent.left" {
            var changed = false
            for index in sessions.indices where sessions[index].running.values.contains(agent) {
                sessions[index].running = sessions[index].running.filter { $0.value != agent }
                changed = true
            }
            return changed
        }
        guard Self.topics.contains(topic), let id = fields["session"]?.stringValue, !id.isEmpty else { return false }
        var session = take(id) ?? Session(id: id, first: time, last: time)
        session.last = max(session.last, time)
        if !agent.isEmpty, !session.agents.contains(agent) { session.agents.append(agent) }
        if let to = fields["to"]?.stringValue, !to.isEmpty, !session.agents.contains(to) { session.agents.append(to) }
        if topic == "agent.state", let turn = fields["turn"]?.stringValue {
            let state = fields["state"]?.stringValue ?? ""
            if state == "completed" || state == "failed" {
                session.running[turn] = nil
            } else {
                session.running[turn] = agent
            }
        }
        var body = Self.compact(fields)
        body["type"] = .string(topic)
        body["time"] = .string(FeedEvent.timestamp(time))
        session.events.append(.object(body))
        if session.events.count > eventLimit {
            session.dropped += session.events.count - eventLimit
            session.events.removeFirst(session.events.count - eventLimit)
        }
        sessions.append(session)
        if sessions.count > limit { sessions.removeFirst(sessions.count - limit) }
        return true
    }

    private mutating func take(_ id: String) -> Session? {
        guard let index = sessions.lastIndex(where: { $0.id == id }) else { return nil }
        return sessions.remove(at: index)
    }

    /// What a timeline needs of an event: no call parameters or results (any size), texts cut.
    static func compact(_ fields: [String: JSONValue]) -> [String: JSONValue] {
        var body = fields
        body["parameters"] = nil
        if var call = body["call"]?.objectValue {
            call["parameters"] = nil
            call["result"] = nil
            if var error = call["error"]?.objectValue {
                error = error.filter { $0.key == "code" || $0.key == "message" }.mapValues(cut)
                call["error"] = .object(error)
            }
            body["call"] = .object(call)
        }
        return body.mapValues(cut)
    }

    private static func cut(_ value: JSONValue) -> JSONValue {
        guard case .string(let text) = value, text.count > textLimit else { return value }
        return .string(String(text.prefix(textLimit)) + "…")
    }
}

extension RecentSessions {
    /// `GET /sessions`: newest activity first.
    public var json: JSONValue {
        ["sessions": .array(newestFirst.map(\.json))]
    }
}

extension RecentSessions.Session {
    public var json: JSONValue {
        [
            "session": .string(id), "live": .bool(live), "first": .string(FeedEvent.timestamp(first)),
            "last": .string(FeedEvent.timestamp(last)), "agents": .array(agents.map { .string($0) }),
            "running": .object(running.mapValues { .string($0) }), "dropped": .number(Double(dropped)),
            "events": .array(events),
        ]
    }
}
