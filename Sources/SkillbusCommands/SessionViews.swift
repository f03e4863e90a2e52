import Skillbus

/// What `skillbus sessions` and `skillbus history` make of several agents' answers (PROTOCOL §5.21, §5.22):
/// plain functions of JSON, so that they are tested without a bus.
enum SessionViews {
    /// One session's history from the histories its agents keep: every message with `agent` added, in time
    /// order. Messages of the same millisecond keep the order of `histories` (the roster's: who served first),
    /// and within one agent their index.
    static func mergedHistory(_ histories: [(agent: String, messages: [JSONValue])]) -> [JSONValue] {
        var tagged: [(time: String, rank: Int, index: Int, message: JSONValue)] = []
        for (rank, history) in histories.enumerated() {
            for (position, message) in history.messages.enumerated() {
                var object = message.objectValue ?? [:]
                object["agent"] = .string(history.agent)
                // ISO 8601 UTC with milliseconds (§5.17) sorts as text.
                let time = message["time"]?.stringValue ?? ""
                tagged.append((time, rank, message["index"]?.intValue ?? position, .object(object)))
            }
        }
        tagged.sort { ($0.time, $0.rank, $0.index) < ($1.time, $1.rank, $1.index) }
        return tagged.map(\.message)
    }

    /// Every session with its agents: those the bus's roster names (`roster`: the `sessions` of a roster
    /// answer, §5.17), each with what its own store says of the session (`stores`: each agent's session
    /// summaries) — and sessions or agents only a store knows. The most recently active session first.
    static func listing(roster: [JSONValue], stores: [(agent: String, sessions: [JSONValue])]) -> [JSONValue] {
        var order: [String] = []
        var agentsBySession: [String: [[String: JSONValue]]] = [:]
        func add(_ session: String, _ agent: [String: JSONValue]) {
            if agentsBySession[session] == nil { order.append(session) }
            agentsBySession[session, default: []].append(agent)
        }
        for entry in roster {
            guard let session = entry["session"]?.stringValue else { continue }
            for agent in entry["agents"]?.arrayValue ?? [] { add(session, agent.objectValue ?? [:]) }
        }
        for (agent, summaries) in stores.sorted(by: { $0.agent < $1.agent }) {
            for summary in summaries {
                guard let session = summary["session"]?.stringValue else { continue }
                var fields = summary.objectValue ?? [:]
                fields["session"] = nil
                let known = agentsBySession[session]?.firstIndex { $0["agent"]?.stringValue == agent }
                if let known {
                    agentsBySession[session]?[known].merge(fields) { roster, _ in roster }
                } else {
                    fields["agent"] = .string(agent)
                    add(session, fields)
                }
            }
        }
        /// The latest time anything says of the session.
        func latest(_ session: String) -> String {
            (agentsBySession[session] ?? []).flatMap { [$0["last"], $0["updated"]] }.compactMap { $0?.stringValue }
                .max() ?? ""
        }
        let recency = Dictionary(uniqueKeysWithValues: order.map { ($0, latest($0)) })
        return order.sorted { (recency[$0] ?? "", $1) > (recency[$1] ?? "", $0) }.map { session in
            [
                "session": .string(session),
                "agents": .array((agentsBySession[session] ?? []).map(JSONValue.object)),
            ]
        }
    }
}
