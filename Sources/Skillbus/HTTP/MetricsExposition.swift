import Foundation

/// The Prometheus text exposition format (version 0.0.4) of a `BusSnapshot`: `GET /metrics`.
public struct MetricsExposition {
    public static let contentType = "text/plain; version=0.0.4; charset=utf-8"

    private var text = ""

    /// `extra` holds what only the HTTP thread knows (process memory, its own connections), as
    /// (name, help, type, value).
    public static func render(_ snapshot: BusSnapshot, extra: [(String, String, String, Double)] = []) -> String {
        var out = MetricsExposition()
        let metrics = snapshot.metrics
        out.pairs(
            "skillbus_requests_total", "REQUESTs answered by their own execution, by skill and status.", metrics.requests, "skill", "status")
        out.histograms(
            "skillbus_request_duration_seconds", "Time from a REQUEST to its REPLY, by skill.", metrics.requestSeconds)
        out.pairs(
            "skillbus_round_invocations_total", "A round's own invocations ended, by skill and status.",
            metrics.invocations, "skill", "status")
        out.histograms(
            "skillbus_round_invocation_duration_seconds", "Time a round's executed invocation took, by skill.",
            metrics.invocationSeconds)
        out.singles("skillbus_rounds_total", "ROUNDs finished, by status.", "counter", "status", metrics.rounds)
        out.histogram("skillbus_round_duration_seconds", "Time from a ROUND to its document.", metrics.roundSeconds)
        out.pairs(
            "skillbus_executions_total", "Invocations sent to an agent to execute, by skill and agent.",
            metrics.executions, "skill", "agent")
        out.singles(
            "skillbus_deduplications_total", "Invocations that reused an identical one of their round, by skill.",
            "counter", "skill", metrics.deduplications)
        out.singles(
            "skillbus_cache_hits_total", "Invocations answered from the result cache, by skill.", "counter", "skill",
            metrics.cacheHits)
        out.singles(
            "skillbus_retries_total", "Failed attempts tried again, by skill.", "counter", "skill", metrics.retries)
        out.singles(
            "skillbus_cancellations_total", "Executions the bus stopped, by reason.", "counter", "reason",
            metrics.cancellations)
        out.singles(
            "skillbus_refusals_total", "Messages and connections refused before reaching the bus's logic, by reason.", "counter",
            "reason", metrics.refusals)
        out.singles(
            "skillbus_registration_refusals_total", "Registrations (or skills of one) refused, by reason.", "counter",
            "reason", metrics.registrationRefusals)
        out.singles(
            "skillbus_feed_events_total", "Events the bus published, by topic.", "counter", "topic",
            metrics.feedEvents)
        out.scalar("skillbus_agent_joins_total", "Agents registered.", "counter", Double(metrics.agentsJoined))
        out.scalar("skillbus_agent_departures_total", "Agents removed.", "counter", Double(metrics.agentsLeft))

        out.agents(snapshot.agents)
        out.scalar("skillbus_wait_queue_depth", "Requests waiting for a free provider.", "gauge", Double(snapshot.waiting))
        out.scalar("skillbus_rounds_running", "ROUNDs running now.", "gauge", Double(snapshot.runningRounds))
        out.scalar(
            "skillbus_registry_sequence", "Number of the latest registry update.", "gauge",
            Double(snapshot.registrySequence))
        out.scalar("skillbus_registry_agents", "Agents in the registry.", "gauge", Double(snapshot.agents.count))
        out.scalar("skillbus_registry_skills", "Skill identifiers on offer.", "gauge", Double(snapshot.registrySkills))
        if let group = snapshot.group {
            out.scalar(
                "skillbus_group_leader", "1 while this coordinator leads its group, 0 while it is a standby.", "gauge",
                group.leading ? 1 : 0)
            out.scalar(
                "skillbus_group_epoch", "The group's leader epoch as this coordinator knows it (0: none known).",
                "gauge",
                Double(group.leader?.epoch ?? 0))
            out.scalar(
                "skillbus_journal_backlog_rounds", "Rounds that wait for the group's database (the journal is behind).",
                "gauge", Double(group.journalBacklog))
        }
        for (name, help, type, value) in extra { out.scalar(name, help, type, value) }
        return out.text
    }

    private mutating func family(_ name: String, _ help: String, _ type: String) {
        text += "# HELP \(name) \(help)\n# TYPE \(name) \(type)\n"
    }

    private mutating func sample(_ name: String, _ labels: [(String, String)], _ value: Double) {
        text += name
        if !labels.isEmpty {
            text += "{" + labels.map { "\($0.0)=\"\(Self.escaped($0.1))\"" }.joined(separator: ",") + "}"
        }
        text += " \(Self.number(value))\n"
    }

    private mutating func scalar(_ name: String, _ help: String, _ type: String, _ value: Double) {
        family(name, help, type)
        sample(name, [], value)
    }

    private mutating func singles(_ name: String, _ help: String, _ type: String, _ label: String, _ table: [String: Int]) {
        family(name, help, type)
        for key in table.keys.sorted() { sample(name, [(label, key)], Double(table[key] ?? 0)) }
    }

    private mutating func pairs(
        _ name: String, _ help: String, _ table: [BusMetrics.Pair: Int], _ first: String, _ second: String
    ) {
        family(name, help, "counter")
        let keys = table.keys.sorted { ($0.first, $0.second) < ($1.first, $1.second) }
        for key in keys { sample(name, [(first, key.first), (second, key.second)], Double(table[key] ?? 0)) }
    }

    private mutating func histograms(_ name: String, _ help: String, _ table: [String: BusMetrics.Histogram]) {
        family(name, help, "histogram")
        for skill in table.keys.sorted() { buckets(name, [("skill", skill)], table[skill] ?? .init()) }
    }

    private mutating func histogram(_ name: String, _ help: String, _ histogram: BusMetrics.Histogram) {
        family(name, help, "histogram")
        buckets(name, [], histogram)
    }

    /// Cumulative `_bucket` lines ending in `le="+Inf"`, then `_sum` and `_count`.
    private mutating func buckets(_ name: String, _ labels: [(String, String)], _ histogram: BusMetrics.Histogram) {
        var cumulative = 0
        for (index, bound) in BusMetrics.latencyBuckets.enumerated() {
            cumulative += histogram.counts[index]
            sample(name + "_bucket", labels + [("le", Self.number(bound))], Double(cumulative))
        }
        sample(name + "_bucket", labels + [("le", "+Inf")], Double(histogram.count))
        sample(name + "_sum", labels, histogram.sum)
        sample(name + "_count", labels, Double(histogram.count))
    }

    /// Per agent its capacity and load, and its state as a one-hot set over every state name.
    private mutating func agents(_ agents: [BusSnapshot.Agent]) {
        family("skillbus_agent_capacity", "Invocations an agent runs at once.", "gauge")
        for agent in agents { sample("skillbus_agent_capacity", [("agent", agent.name)], Double(agent.capacity)) }
        family("skillbus_agent_in_flight", "Invocations an agent holds now.", "gauge")
        for agent in agents { sample("skillbus_agent_in_flight", [("agent", agent.name)], Double(agent.inFlight)) }
        family("skillbus_agent_state", "1 for the state an agent is in, 0 for the others.", "gauge")
        for agent in agents {
            for state in Self.stateNames {
                sample("skillbus_agent_state", [("agent", agent.name), ("state", state)], agent.state.name == state ? 1 : 0)
            }
        }
        family("skillbus_agents", "Live agents, by state.", "gauge")
        for state in Self.stateNames {
            sample("skillbus_agents", [("state", state)], Double(agents.count { $0.state.name == state }))
        }
    }

    static let stateNames = [
        "idle", "thinking", "selectingSkill", "executingSkill", "streaming", "completed", "failed",
    ]

    /// Label values escape backslash, double quote and line feed.
    static func escaped(_ value: String) -> String {
        value.replacingOccurrences(of: "\\", with: "\\\\").replacingOccurrences(of: "\"", with: "\\\"")
            .replacingOccurrences(of: "\n", with: "\\n")
    }

    /// Integers without a fraction; others as Swift prints a Double (which Go's ParseFloat reads).
    static func number(_ value: Double) -> String {
        if value == value.rounded(), abs(value) < 1e15 { return String(Int64(value)) }
        return String(value)
    }
}
