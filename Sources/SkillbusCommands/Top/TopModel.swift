import Skillbus

/// What `skillbus top` knows: the bus's last AGENTS listing (PROTOCOL §5.13), agent states and the registry
/// sequence as the feed moves them on, the completions of the last seconds, and the sessions turns run in.
/// Pure: events and listings come in with the time they arrived; `frame` says what to show.
struct TopModel: Sendable {
    private(set) var listing: JSONValue?
    /// Agent → its state as the feed last told it, newer than the listing's.
    private var states: [String: String] = [:]
    private var registrySeq: Int?
    private(set) var window: ActivityWindow
    private(set) var sessions = SessionWatch()

    init(span: Double = 10, started: Double) {
        window = ActivityWindow(span: span, started: started)
    }

    /// A fresh AGENTS listing: it holds every agent's state as the bus has it now.
    mutating func apply(listing: JSONValue) {
        self.listing = listing
        states = [:]
        if let seq = listing["registry"]?["seq"]?.intValue { registrySeq = max(registrySeq ?? 0, seq) }
    }

    /// One feed event (§7); topics top does not use are ignored.
    mutating func apply(topic: String, event: JSONValue, at now: Double) {
        switch topic {
        case "agent.state":
            guard let agent = event["agent"]?.stringValue else { return }
            states[agent] = Self.describeState(event)
            sessions.apply(topic: topic, event: event, at: now)
        case "turn.call", "turn.delegated", "turn.handoff", "agent.left":
            sessions.apply(topic: topic, event: event, at: now)
        case "request.done", "invocation.done":
            // A joined or skipped invocation ran nowhere: it is no completion of an agent.
            let status = event["status"]?.stringValue ?? ""
            guard status != "skipped", event["deduplicated"]?.boolValue != true,
                let skill = event["skill"]?.stringValue
            else { return }
            window.record(
                .init(
                    at: now, agent: event["agent"]?.stringValue ?? "", skill: skill,
                    durationMs: event["durationMs"]?.doubleValue ?? 0, ok: status == "ok"))
        case "registry.heartbeat", "registry.update":
            if let seq = event["seq"]?.intValue { registrySeq = max(registrySeq ?? 0, seq) }
        default:
            break
        }
    }

    /// `executingSkill(echo)`, `failed(cancelled)`, `idle`.
    static func describeState(_ state: JSONValue) -> String {
        var text = state["state"]?.stringValue ?? "?"
        if let skill = state["skill"]?.stringValue { text += "(\(skill))" }
        if let reason = state["reason"]?.stringValue, !reason.isEmpty { text += "(\(reason))" }
        return text
    }

    /// The rows to show at `now`.
    mutating func frame(now: Double) -> TopFrame {
        window.trim(now: now)
        let agents = listing?["agents"]?.arrayValue ?? []
        let activity = listing?["bySkill"]?.objectValue ?? [:]
        var providers: [String: Int] = [:]
        let agentRows = agents.compactMap { agent -> TopFrame.AgentRow? in
            guard let name = agent["agent"]?.stringValue else { return nil }
            let skills = agent["skills"]?.arrayValue?.compactMap(\.stringValue) ?? []
            for skill in skills { providers[skill, default: 0] += 1 }
            return TopFrame.AgentRow(
                name: name, state: states[name] ?? agent["state"].map(Self.describeState) ?? "?", skills: skills,
                inFlight: agent["inFlight"]?.intValue ?? 0, capacity: agent["capacity"]?.intValue ?? 0,
                activity: window.summary(now: now) { $0.agent == name },
                ok: agent["results"]?["ok"]?.intValue ?? 0, errors: agent["results"]?["error"]?.intValue ?? 0,
                sessions: agent["sessions"]?.intValue)
        }
        let skillRows = Set(providers.keys).union(activity.keys).map { skill in
            TopFrame.SkillRow(
                name: skill, providers: providers[skill] ?? 0, activity: window.summary(now: now) { $0.skill == skill },
                ok: activity[skill]?["ok"]?.intValue ?? 0, errors: activity[skill]?["error"]?.intValue ?? 0,
                waiting: activity[skill]?["waiting"]?.intValue ?? 0)
        }
        return TopFrame(
            agents: agentRows, skills: skillRows, bus: window.summary(now: now),
            waiting: listing?["waiting"]?.intValue ?? 0, registrySeq: registrySeq,
            sessions: sessions.current(now: now).map {
                TopFrame.SessionRow(session: $0, age: now - $0.firstSeen, quiet: now - $0.lastSeen)
            })
    }
}

/// One frame's figures, before layout.
struct TopFrame: Sendable, Equatable {
    struct AgentRow: Sendable, Equatable {
        var name: String
        var state: String
        var skills: [String]
        var inFlight: Int
        var capacity: Int
        /// From the feed, over the window.
        var activity: ActivityWindow.Summary
        /// From the bus: RESULTs since the agent registered.
        var ok: Int
        var errors: Int
        var sessions: Int?
    }

    struct SkillRow: Sendable, Equatable {
        var name: String
        var providers: Int
        var activity: ActivityWindow.Summary
        var ok: Int
        var errors: Int
        var waiting: Int
    }

    var agents: [AgentRow]
    var skills: [SkillRow]
    /// Every completion the feed showed, agent or not.
    var bus: ActivityWindow.Summary
    var waiting: Int
    var registrySeq: Int?
    /// Running first, then the most recently active.
    var sessions: [SessionRow] = []

    struct SessionRow: Sendable, Equatable {
        var session: SessionWatch.Session
        /// Seconds since its first event, and since its latest.
        var age: Double
        var quiet: Double
    }
}
