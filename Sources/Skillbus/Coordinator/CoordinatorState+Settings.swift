extension CoordinatorState {
    /// The coordinator's tunables. Each default is written here once; the file form's keys, bounds and help
    /// are declared once in `declared` below, and `CoordinatorConfiguration` reads and writes them from there.
    public struct Settings: Sendable, Equatable {
        public var heartbeatMs = 1000
        public var missedHeartbeats = 3
        public var defaultTimeoutMs = 15_000
        public var queueLimit = 1024
        public var deduplication = true
        public var roundRetentionMs = 600_000
        public var retainedOutcomesLimit = 100_000
        public var retainedRoundsLimit = 10_000
        public var planStepLimit = 1000
        public var sessionAffinityLimit = 100_000
        /// The agent (or `role:NAME`) an ASK that names none goes to when its session has no agent yet; "": the
        /// least loaded agent with a planner.
        public var defaultAgent = ""
        /// How deep turns may nest: an agent asking another that asks another… (§3.7.1).
        public var delegationDepthLimit = 4
        public var sessionRetentionMs = 30 * 86_400_000
        public var maxOutputBytes = 4 << 20
        public var maxRoundOutputBytes = 256 << 10
        public var cancelGraceMs = 2000
        public var priorityPromotionMs = 5000
        public var clientQueueShare = 0.25
        public var rateLimits = RateLimits()
        public var cacheBytesLimit = 64 << 20
        public var startupGraceMs = 5000
        /// The feed endpoint as workers should reach it; sent in WELCOME so that they can hold a replica.
        /// Set by the coordinator from where its feed is bound, not read from a file.
        public var feedEndpoint = ""
        /// Rounds go through the journal (`journal` actions, answered with `journalAnswered`): set when the
        /// coordinator has a data directory.
        public var journaled = false
        /// Milliseconds since 1970 at monotonic time 0: what the bus shows and journals as a time (the session
        /// roster's) is `now` plus this. Set by the coordinator at its start, not read from a file.
        public var wallClockAtZeroMs: Int64 = 0
        public init() {}

        /// How many waiting requests one client may hold.
        var clientQueueLimit: Int {
            clientQueueShare >= 1 ? queueLimit : max(1, Int(Double(queueLimit) * clientQueueShare))
        }

        /// Every tunable of a coordinator's file: key, bounds and help, once.
        static let declared: [Setting<Settings>] = [
            .integer("heartbeatMs", \.heartbeatMs, 10...maxHeartbeatMs, "Heartbeat interval to workers (ms)."),
            .integer(
                "missedHeartbeats", \.missedHeartbeats, 1...100,
                "A worker is dead after this many of its heartbeat intervals without a word."),
            .integer(
                "defaultTimeoutMs", \.defaultTimeoutMs, 1...Wire.maxTimeoutMs,
                "The timeout of a request that names none and whose skill declares none (ms)."),
            .integer("queueLimit", \.queueLimit, 0...(1 << 40), "Requests that may wait for a free agent, over all skills."),
            .flag(
                "deduplication", \.deduplication,
                "Single-flight within a round: an identical invocation joins the one that ran or runs."),
            .integer(
                "roundRetentionMs", \.roundRetentionMs, 0...(7 * 86_400_000),
                "How long finished outcomes and round documents are kept for a round sent again (ms)."),
            .integer(
                "retainedOutcomesLimit", \.retainedOutcomesLimit, 0...100_000_000,
                "Most finished outcomes kept; beyond it the oldest go first."),
            .integer(
                "retainedRoundsLimit", \.retainedRoundsLimit, 0...10_000_000,
                "Most finished round documents kept for a round id sent again."),
            .integer("planStepLimit", \.planStepLimit, 1...1_000_000, "Most steps a plan may have."),
            .integer(
                "sessionAffinityLimit", \.sessionAffinityLimit, 1...100_000_000,
                "Most sessions whose agents the bus remembers; the least recently used is forgotten first."),
            .integer(
                "sessionRetentionMs", \.sessionRetentionMs, 1000...(366 * 86_400_000),
                "How long the bus remembers the agents of a session nobody served since (ms)."),
            .text(
                "defaultAgent", \.defaultAgent,
                "The agent (or role:NAME) a turn that names none goes to when its session has no agent yet."),
            .integer(
                "delegationDepthLimit", \.delegationDepthLimit, 1...32,
                "How deep turns may nest: an agent asking another agent that asks another…"),
            .integer(
                "maxOutputBytes", \.maxOutputBytes, 0...(1 << 34),
                "Most partial output the bus forwards for one invocation (bytes of parts); the rest is dropped."),
            .integer(
                "maxRoundOutputBytes", \.maxRoundOutputBytes, 0...(1 << 30),
                "Most partial output a round's document keeps, over all its invocations (bytes of parts)."),
            .integer(
                "cancelGraceMs", \.cancelGraceMs, 1...3_600_000,
                "How long an agent may take to answer CANCEL before its skill is reported as ignoring it (ms)."),
            .integer(
                "priorityPromotionMs", \.priorityPromotionMs, 0...86_400_000,
                "A waiting request moves up one priority class for each this long it waits (ms; 0: never)."),
            .fraction(
                "clientQueueShare", \.clientQueueShare,
                "Most of the wait queue one client connection may hold, as a fraction of queueLimit."),
            Setting(
                "rateLimits",
                help: "Requests per second, with a burst, per skill and per client connection (PROTOCOL §4.15).",
                read: { object, settings throws(SkillbusError) in
                    if let limits = try object.rateLimits("rateLimits") { settings.rateLimits = limits }
                }, write: { $0.rateLimits.isEmpty ? JSONValue?.none : $0.rateLimits.json }),
            .integer(
                "cacheBytesLimit", \.cacheBytesLimit, 0...(1 << 40),
                "Most bytes the result cache of pure skills holds (0 turns it off)."),
            .integer(
                "startupGraceMs", \.startupGraceMs, 0...600_000,
                "After start, how long a request for a skill nobody offers yet waits for an agent (ms)."),
        ]
    }
}

extension RateLimits {
    /// The file form: `{"skills": {ID: {"perSecond": R, "burst": B}}, "clients": {…}}`.
    var json: JSONValue {
        func limit(_ rate: RateLimit) -> JSONValue { ["perSecond": .number(rate.perSecond), "burst": .number(Double(rate.burst))] }
        var object: [String: JSONValue] = [:]
        if !skills.isEmpty { object["skills"] = .object(skills.mapValues(limit)) }
        if let perClient { object["clients"] = limit(perClient) }
        return .object(object)
    }
}
