/// What the bus has done since it started, counted from the events its state machine publishes (whether or
/// not anyone subscribes to them) and the messages its loop refuses. A plain value on the coordinator's
/// thread; the HTTP thread reads copies of it (`BusSnapshot`).
public struct BusMetrics: Sendable, Equatable {
    /// Two label values, such as (skill, status).
    public struct Pair: Hashable, Sendable {
        public var first: String
        public var second: String
        public init(_ first: String, _ second: String) {
            self.first = first
            self.second = second
        }
    }

    /// Observations in `latencyBuckets`: `counts[i]` holds those in bucket i alone (not cumulative); the last
    /// entry is above every bound.
    public struct Histogram: Sendable, Equatable {
        public var counts = [Int](repeating: 0, count: BusMetrics.latencyBuckets.count + 1)
        public var sum = 0.0
        public var count = 0

        public init() {}

        mutating func observe(seconds: Double) {
            let bucket = BusMetrics.latencyBuckets.firstIndex { seconds <= $0 } ?? BusMetrics.latencyBuckets.count
            counts[bucket] += 1
            sum += seconds
            count += 1
        }
    }

    /// Upper bounds of the latency histograms, in seconds: from half a millisecond to a minute.
    public static let latencyBuckets: [Double] = [
        0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60,
    ]
    /// Most distinct label values one metric keeps; later ones are counted under `overflowLabel`, so that
    /// clients naming random skills cannot grow the exposition without bound.
    public static let seriesLimit = 1000
    public static let overflowLabel = "_other"

    /// REQUESTs that ran (or failed) to their REPLY, by (skill, status `ok`/`error`), and their latency by
    /// skill (`request.done`). One answered by a deduplication or the cache counts there instead.
    public var requests: [Pair: Int] = [:]
    public var requestSeconds: [String: Histogram] = [:]
    /// A round's own invocations ended, by (skill, status `ok`/`error`/`cancelled`/`skipped`), and their latency.
    public var invocations: [Pair: Int] = [:]
    public var invocationSeconds: [String: Histogram] = [:]
    /// ROUNDs finished, by status, and their latency.
    public var rounds: [String: Int] = [:]
    public var roundSeconds = Histogram()
    /// INVOKEs sent to agents, by (skill, agent).
    public var executions: [Pair: Int] = [:]
    /// Invocations that joined or reused an identical one of their round instead of running, by skill.
    public var deduplications: [String: Int] = [:]
    /// Invocations answered from the result cache, by skill.
    public var cacheHits: [String: Int] = [:]
    /// Attempts that failed retryably and were tried again, by skill.
    public var retries: [String: Int] = [:]
    /// Executions the bus stopped, by reason (`client`, `deadline`, `lost race`).
    public var cancellations: [String: Int] = [:]
    /// Messages and connections refused before the state machine saw them, by reason: the message's error
    /// code, or `handshake` for a connection the ZAP handler turned away.
    public var refusals: [String: Int] = [:]
    /// READYs (or one skill of a READY or SKILLS) refused, by error code (`agent.refused`).
    public var registrationRefusals: [String: Int] = [:]
    /// Events the bus built, by topic (the feed sends each one only to subscribers of its topic).
    public var feedEvents: [String: Int] = [:]
    public var agentsJoined = 0
    public var agentsLeft = 0

    public init() {}

    public mutating func record(_ event: FeedEvent) {
        Self.add(event.topic, to: &feedEvents)
        switch event {
        case .requestDone(_, _, let skill, _, let status, let micros, _):
            Self.add(Pair(skill, status.rawValue), to: &requests)
            Self.observe(micros, skill, in: &requestSeconds)
        case .invocationDone(_, _, let skill, _, let status, let micros, let deduplicated):
            Self.add(Pair(skill, status.rawValue), to: &invocations)
            if deduplicated {
                Self.add(skill, to: &deduplications)
            } else {
                Self.observe(micros, skill, in: &invocationSeconds)
            }
        case .roundDone(_, let status, let summary):
            Self.add(status.rawValue, to: &rounds)
            roundSeconds.observe(seconds: summary.totalMs / 1000)
        case .requestDispatched(_, _, let skill, let agent, _), .invocationDispatched(_, _, let skill, let agent, _):
            Self.add(Pair(skill, agent), to: &executions)
        case .requestDeduplicated(_, _, let skill, _):
            Self.add(skill, to: &deduplications)
        case .requestCached(_, _, let skill, _), .invocationCached(_, _, let skill, _):
            Self.add(skill, to: &cacheHits)
        case .requestRetrying(_, _, let skill, _, _, _, _), .invocationRetrying(_, _, let skill, _, _, _, _):
            Self.add(skill, to: &retries)
        case .requestCancelled(_, _, _, _, let reason), .invocationCancelled(_, _, _, let reason):
            Self.add(reason, to: &cancellations)
        case .registrationRefused(_, let error):
            Self.add(error.code.rawValue, to: &registrationRefusals)
        case .securityRefused(_, _, _, _, let total):
            // Only some refusals are published; each event carries the count of all of them.
            refusals["handshake"] = max(refusals["handshake"] ?? 0, total)
        case .agentJoined:
            agentsJoined += 1
        case .agentLeft:
            agentsLeft += 1
        default:
            break
        }
    }

    /// A message the loop refused before the state machine saw it, by its error code.
    public mutating func refused(_ code: String) {
        Self.add(code, to: &refusals)
    }

    private static func add<Key: Hashable>(_ key: Key, to table: inout [Key: Int]) {
        if table[key] != nil || table.count < seriesLimit {
            table[key, default: 0] += 1
        } else if let overflow = overflowKey(like: key) {
            table[overflow, default: 0] += 1
        }
    }

    private static func overflowKey<Key>(like key: Key) -> Key? {
        if key is String { return overflowLabel as? Key }
        if let pair = key as? Pair { return Pair(overflowLabel, pair.second) as? Key }
        return nil
    }

    private static func observe(_ micros: Int, _ skill: String, in table: inout [String: Histogram]) {
        let key = table[skill] != nil || table.count < seriesLimit ? skill : overflowLabel
        table[key, default: Histogram()].observe(seconds: Double(micros) / 1_000_000)
    }
}
