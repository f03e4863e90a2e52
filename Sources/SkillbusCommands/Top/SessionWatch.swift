import Skillbus

/// The sessions `skillbus top` lists, from the feed's turn events (PROTOCOL §7): which agents work in each
/// and in which state, how many calls their turns made, and how long ago it all began and last moved. A
/// nested turn (`parent`, `depth`) names the agent that asked for it; `turn.delegated` and `turn.handoff`
/// are noted when the bus publishes them. A session drops off once it was quiet for `linger` seconds with no
/// turn running, or for `stale` seconds whatever it shows (an agent may have gone without a last state).
/// Pure: events come in with the time they arrived.
struct SessionWatch: Sendable {
    struct Member: Sendable, Equatable {
        var agent: String
        /// As `TopModel.describeState` writes it: `executingSkill(echo)`.
        var state: String
        /// The agent whose turn asked for this agent's current one, for a nested turn.
        var askedBy: String?
        /// Its current turn ended (`completed`, `failed`) or its agent left.
        var ended: Bool
    }

    struct Session: Sendable, Equatable {
        var id: String
        var firstSeen: Double
        var lastSeen: Double
        /// In the order they first showed up.
        var members: [Member] = []
        var calls = 0
        /// The latest delegation or handoff: `a→b` or `a⇒b`.
        var note: String?
        /// Turn id → its agent, to name who asked for a nested turn.
        var turns: [String: String] = [:]

        var running: Bool { members.contains { !$0.ended } }
    }

    let linger: Double
    let stale: Double
    private(set) var sessions: [String: Session] = [:]

    init(linger: Double = 60, stale: Double = 600) {
        self.linger = linger
        self.stale = stale
    }

    /// One feed event; those of no session are ignored (but `agent.left` ends the agent's turns).
    mutating func apply(topic: String, event: JSONValue, at now: Double) {
        let agent = event["agent"]?.stringValue ?? ""
        if topic == "agent.left" {
            for (id, session) in sessions where session.members.contains(where: { $0.agent == agent && !$0.ended }) {
                sessions[id]?.members = session.members.map {
                    $0.agent == agent && !$0.ended ? Member(agent: agent, state: "left", ended: true) : $0
                }
            }
            return
        }
        guard let id = event["session"]?.stringValue, !id.isEmpty, !agent.isEmpty else { return }
        var session = sessions[id] ?? Session(id: id, firstSeen: now, lastSeen: now)
        session.lastSeen = now
        let turn = event["turn"]?.stringValue ?? ""
        switch topic {
        case "agent.state":
            guard !turn.isEmpty else { return }
            session.turns[turn] = agent
            let state = event["state"]?.stringValue ?? ""
            let member = Member(
                agent: agent, state: TopModel.describeState(event),
                askedBy: event["parent"]?.stringValue.flatMap { session.turns[$0] },
                ended: state == "completed" || state == "failed")
            if let index = session.members.firstIndex(where: { $0.agent == agent }) {
                session.members[index] = member
            } else {
                session.members.append(member)
            }
        case "turn.call":
            session.calls += 1
        case "turn.delegated", "turn.handoff":
            let to = event["to"]?.stringValue ?? "?"
            let next = event[topic == "turn.delegated" ? "child" : "next"]?.stringValue ?? ""
            if !next.isEmpty { session.turns[next] = to }
            session.note = agent + (topic == "turn.delegated" ? "→" : "⇒") + to
        default:
            return
        }
        sessions[id] = session
    }

    /// The sessions still shown at `now`: running ones first, then the most recently active.
    mutating func current(now: Double) -> [Session] {
        sessions = sessions.filter { _, session in
            let quiet = now - session.lastSeen
            return quiet <= stale && (session.running || quiet <= linger)
        }
        return sessions.values.sorted {
            $0.running != $1.running
                ? $0.running : $0.lastSeen != $1.lastSeen ? $0.lastSeen > $1.lastSeen : $0.id < $1.id
        }
    }
}
