/// What `skillbus top` learns from the feed's `request.done` and `invocation.done`: the completions of the
/// last `span` seconds, turned into rates and latency percentiles. Pure: time is passed in, no sockets.
struct ActivityWindow: Sendable {
    struct Completion: Sendable, Equatable {
        /// Seconds on the caller's monotonic clock.
        let at: Double
        /// `""` when no agent took it (unknown skill, busy).
        let agent: String
        let skill: String
        let durationMs: Double
        let ok: Bool
    }

    /// Rate and latency of some completions.
    struct Summary: Sendable, Equatable {
        var count = 0
        var errors = 0
        /// Completions per second over the time watched.
        var perSecond = 0.0
        var p50Ms: Double?
        var p99Ms: Double?
    }

    let span: Double
    /// Bounds memory under a heavy load; the rate then covers the time the kept completions span.
    let limit: Int
    /// When watching began: the first seconds' rate is over the time watched, not over the whole span.
    let started: Double
    private var completions: [Completion] = []
    /// Index of the oldest completion kept (older ones are dropped in batches, not one at a time).
    private var head = 0

    init(span: Double = 10, limit: Int = 100_000, started: Double) {
        self.span = span
        self.limit = limit
        self.started = started
    }

    var kept: Int { completions.count - head }

    mutating func record(_ completion: Completion) {
        completions.append(completion)
        if kept > limit { head += kept - limit }
        compact()
    }

    /// Forgets completions older than the span.
    mutating func trim(now: Double) {
        while head < completions.count, completions[head].at < now - span { head += 1 }
        compact()
    }

    private mutating func compact() {
        if head > 1024, head * 2 > completions.count {
            completions.removeFirst(head)
            head = 0
        }
    }

    /// The completions within the span that `include` accepts.
    func summary(now: Double, where include: (Completion) -> Bool = { _ in true }) -> Summary {
        var durations: [Double] = []
        var summary = Summary()
        for completion in completions[head...] where completion.at >= now - span && include(completion) {
            summary.count += 1
            if !completion.ok { summary.errors += 1 }
            durations.append(completion.durationMs)
        }
        var from = max(now - span, started)
        if kept >= limit { from = max(from, completions[head].at) }
        // Half a second at least, so that the first completion seen is no huge rate.
        summary.perSecond = Double(summary.count) / max(now - from, 0.5)
        durations.sort()
        summary.p50Ms = Self.percentile(50, of: durations)
        summary.p99Ms = Self.percentile(99, of: durations)
        return summary
    }

    /// Nearest rank: the smallest value with at least `percent`% of the values at or below it.
    static func percentile(_ percent: Double, of sorted: [Double]) -> Double? {
        guard !sorted.isEmpty else { return nil }
        let rank = Int((percent / 100 * Double(sorted.count)).rounded(.up))
        return sorted[min(max(rank, 1), sorted.count) - 1]
    }
}
