import Foundation

/// How the user looks at the frame: the sort column and the name filter, changed by keys. Pure.
struct TopView: Sendable, Equatable {
    enum Sort: String, CaseIterable, Sendable {
        case name, rate, p99, errors, load
    }

    var sort = Sort.name
    var filter = ""
    /// `/` was pressed: keys type the filter until Enter or Esc.
    var editingFilter = false
    /// `v` shows the sessions alone (with room for many), and again everything.
    var sessionsOnly = false

    /// What a key does: true when it asks to quit.
    mutating func handle(key: UInt8) -> Bool {
        if editingFilter {
            switch key {
            case 0x0D, 0x0A: editingFilter = false
            case 0x1B:
                editingFilter = false
                filter = ""
            case 0x7F, 0x08: if !filter.isEmpty { filter.removeLast() }
            case 0x03: return true
            case 0x20...0x7E: if filter.count < 64 { filter.append(Character(UnicodeScalar(key))) }
            default: break
            }
            return false
        }
        switch key {
        case UInt8(ascii: "q"), UInt8(ascii: "Q"), 0x03: return true
        case UInt8(ascii: "s"): sort = Self.next(after: sort, by: 1)
        case UInt8(ascii: "S"): sort = Self.next(after: sort, by: -1)
        case UInt8(ascii: "/"): editingFilter = true
        case UInt8(ascii: "v"), UInt8(ascii: "V"): sessionsOnly.toggle()
        case 0x1B: filter = ""
        default: break
        }
        return false
    }

    private static func next(after sort: Sort, by step: Int) -> Sort {
        let all = Sort.allCases
        let index = all.firstIndex(of: sort) ?? 0
        return all[(index + step + all.count) % all.count]
    }

    func shows(_ name: String) -> Bool { filter.isEmpty || name.localizedCaseInsensitiveContains(filter) }
}

/// Lays a frame out as lines of at most `width` columns: a bus line, the agents table, the skills table, the
/// sessions table (or the sessions alone, `v`), and a line of keys. Pure: the same frame, view and width give
/// the same text.
enum TopLayout {
    static func lines(
        _ frame: TopFrame, view: TopView, width: Int, height: Int? = nil, title: String, keysLine: Bool = true
    ) -> [String] {
        let width = max(width, 20)
        let bus = frame.bus
        var lines = [
            title,
            "bus: \(rate(bus.perSecond)) req/s, p50 \(ms(bus.p50Ms)), p99 \(ms(bus.p99Ms)), "
                + "\(frame.waiting) waiting, registry seq \(frame.registrySeq.map(String.init) ?? "-"), "
                + "\(frame.agents.count) agent(s), \(frame.skills.count) skill(s)",
            "",
        ]
        if !view.sessionsOnly {
            lines += agentsAndSkills(frame, view: view)
            lines.append("")
        }
        lines += sessions(frame.sessions, view: view)
        if keysLine {
            let filter =
                view.editingFilter
                ? "filter: \(view.filter)_ (Enter keeps, Esc clears)"
                : view.filter.isEmpty ? "/ filters by name" : "filter: \(view.filter) (/ edits, Esc clears)"
            if let height {
                // The keys stay on the last line: what does not fit above them is cut.
                lines = Array(lines.prefix(max(height - 1, 1)))
                lines += Array(repeating: "", count: max(height - 1 - lines.count, 0))
            }
            let other = view.sessionsOnly ? "all" : "sessions"
            lines.append("sort: \(view.sort.rawValue) (s)  \(filter)  v \(other)  q quits")
        }
        return lines.map { clip($0, width) }
    }

    private static func agentsAndSkills(_ frame: TopFrame, view: TopView) -> [String] {
        var lines: [String] = []
        let agents = sorted(frame.agents.filter { view.shows($0.name) }, by: view.sort)
        let agentNames = max(5, agents.map(\.name.count).max() ?? 0)
        lines.append(
            pad("AGENT", agentNames) + "  " + pad("STATE", 24) + right("LOAD", 7) + right("REQ/S", 8)
                + right("P50", 9) + right("P99", 9) + right("OK", 8) + right("ERR", 6) + right("SESS", 6) + "  SKILLS")
        for agent in agents {
            lines.append(
                pad(agent.name, agentNames) + "  " + pad(agent.state, 24)
                    + right("\(agent.inFlight)/\(agent.capacity)", 7)
                    + right(rate(agent.activity.perSecond), 8) + right(ms(agent.activity.p50Ms), 9)
                    + right(ms(agent.activity.p99Ms), 9) + right("\(agent.ok)", 8) + right("\(agent.errors)", 6)
                    + right(agent.sessions.map(String.init) ?? "-", 6) + "  " + agent.skills.joined(separator: ","))
        }
        if agents.isEmpty { lines.append(frame.agents.isEmpty ? "(no agents registered)" : "(no agent matches)") }
        lines.append("")
        let skills = sortedSkills(frame.skills.filter { view.shows($0.name) }, by: view.sort)
        let skillNames = max(5, skills.map(\.name.count).max() ?? 0)
        lines.append(
            pad("SKILL", skillNames) + right("PROVIDERS", 11) + right("REQ/S", 8) + right("P50", 9) + right("P99", 9)
                + right("OK", 8) + right("ERR", 6) + right("QUEUE", 7))
        for skill in skills {
            lines.append(
                pad(skill.name, skillNames) + right("\(skill.providers)", 11) + right(rate(skill.activity.perSecond), 8)
                    + right(ms(skill.activity.p50Ms), 9) + right(ms(skill.activity.p99Ms), 9) + right("\(skill.ok)", 8)
                    + right("\(skill.errors)", 6) + right("\(skill.waiting)", 7))
        }
        if skills.isEmpty { lines.append(frame.skills.isEmpty ? "(no skills on offer)" : "(no skill matches)") }
        return lines
    }

    /// One line per session: its agents with their states (`b (for a)`: a nested turn b runs for a's turn), and
    /// the latest delegation (`a→b`) or handoff (`a⇒b`). The filter matches the session or one of its agents.
    private static func sessions(_ rows: [TopFrame.SessionRow], view: TopView) -> [String] {
        let shown = rows.filter { row in
            view.shows(row.session.id) || row.session.members.contains { view.shows($0.agent) }
        }
        let names = max(7, shown.map(\.session.id.count).max() ?? 0)
        var lines = [pad("SESSION", names) + right("AGE", 7) + right("QUIET", 7) + right("CALLS", 7) + "  AGENTS"]
        for row in shown {
            let members = row.session.members.map { member in
                member.agent + (member.askedBy.map { " (for \($0))" } ?? "") + ": " + member.state
            }
            lines.append(
                pad(row.session.id, names) + right(age(row.age), 7) + right(age(row.quiet), 7)
                    + right("\(row.session.calls)", 7) + "  " + members.joined(separator: ", ")
                    + (row.session.note.map { "  [\($0)]" } ?? ""))
        }
        if shown.isEmpty { lines.append(rows.isEmpty ? "(no session with turns lately)" : "(no session matches)") }
        return lines
    }

    /// `42s`, `7m`, `3h`.
    static func age(_ seconds: Double) -> String {
        let whole = Int(max(seconds, 0))
        return whole < 60 ? "\(whole)s" : whole < 3600 ? "\(whole / 60)m" : "\(whole / 3600)h"
    }

    private static func sorted(_ agents: [TopFrame.AgentRow], by sort: TopView.Sort) -> [TopFrame.AgentRow] {
        agents.sorted { left, right in
            let (a, b) = (key(left, sort), key(right, sort))
            return a != b ? a > b : left.name < right.name
        }
    }

    private static func sortedSkills(_ skills: [TopFrame.SkillRow], by sort: TopView.Sort) -> [TopFrame.SkillRow] {
        skills.sorted { left, right in
            let (a, b) = (key(left, sort), key(right, sort))
            return a != b ? a > b : left.name < right.name
        }
    }

    /// Larger first; by name, every key is equal and the names decide.
    private static func key(_ agent: TopFrame.AgentRow, _ sort: TopView.Sort) -> Double {
        switch sort {
        case .name: 0
        case .rate: agent.activity.perSecond
        case .p99: agent.activity.p99Ms ?? -1
        case .errors: Double(agent.errors)
        case .load: agent.capacity > 0 ? Double(agent.inFlight) / Double(agent.capacity) : 0
        }
    }

    private static func key(_ skill: TopFrame.SkillRow, _ sort: TopView.Sort) -> Double {
        switch sort {
        case .name: 0
        case .rate: skill.activity.perSecond
        case .p99: skill.activity.p99Ms ?? -1
        case .errors: Double(skill.errors)
        case .load: Double(skill.waiting)
        }
    }

    static func rate(_ value: Double) -> String { value < 10 ? String(format: "%.1f", value) : String(Int(value)) }

    static func ms(_ value: Double?) -> String {
        guard let value else { return "-" }
        return value < 10 ? String(format: "%.2fms", value) : value < 1000 ? String(format: "%.1fms", value)
            : String(format: "%.2fs", value / 1000)
    }

    static func pad(_ text: String, _ width: Int) -> String {
        text.count >= width ? text : text + String(repeating: " ", count: width - text.count)
    }

    static func right(_ text: String, _ width: Int) -> String {
        text.count >= width - 1 ? " " + text : String(repeating: " ", count: width - text.count) + text
    }

    static func clip(_ line: String, _ width: Int) -> String { line.count > width ? String(line.prefix(width)) : line }
}
