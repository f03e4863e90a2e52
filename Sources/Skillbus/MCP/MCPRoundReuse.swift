/// Which round an MCP call runs in. Identical calls of one MCP session within `window` share a round, so
/// an assistant that calls again after losing the answer gets the stored result (or joins the run still
/// going) instead of a second execution; a call may also name its round in `_meta` ("skillbus/round").
/// A call that failed is forgotten, so calling it again really runs it again.
struct MCPRoundReuse {
    var window: Duration
    private var recent: [String: (round: String, at: ContinuousClock.Instant)] = [:]

    init(window: Duration) { self.window = window }

    /// The key of a call: the tool and its arguments in canonical form (keys sorted, numbers normalised).
    static func key(tool: String, arguments: JSONValue) -> String {
        tool + "\u{0}" + arguments.jsonString
    }

    /// The round for a call with `key`: the one an identical call used within the window, else `fresh()`.
    mutating func round(
        for key: String, now: ContinuousClock.Instant, fresh: () -> String
    ) -> (round: String, reused: Bool) {
        recent = recent.filter { now - $0.value.at < window }
        if let entry = recent[key] { return (entry.round, true) }
        let round = fresh()
        if window > .zero { recent[key] = (round, now) }
        return (round, false)
    }

    /// Forgets `key` if it still leads to `round` (its call failed or was cancelled).
    mutating func forget(_ key: String, round: String) {
        if recent[key]?.round == round { recent[key] = nil }
    }

    var count: Int { recent.count }
}
