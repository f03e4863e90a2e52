/// A rate: requests per second with a burst (PROTOCOL §4.15).
public struct RateLimit: Sendable, Equatable {
    public var perSecond: Double
    public var burst: Int

    public init(perSecond: Double, burst: Int) {
        self.perSecond = perSecond
        self.burst = burst
    }
}

/// The rates a coordinator enforces: per skill, and one that each client connection gets for itself.
public struct RateLimits: Sendable, Equatable {
    public var skills: [String: RateLimit] = [:]
    public var perClient: RateLimit?

    public init(skills: [String: RateLimit] = [:], perClient: RateLimit? = nil) {
        self.skills = skills
        self.perClient = perClient
    }

    public var isEmpty: Bool { skills.isEmpty && perClient == nil }
}

extension RateLimit: CustomStringConvertible {
    /// `2 per second, burst 1`
    public var description: String {
        let rate = perSecond == perSecond.rounded() ? String(Int(perSecond)) : String(perSecond)
        return "\(rate) per second, burst \(burst)"
    }
}

/// A token bucket driven by `now` (monotonic nanoseconds): full at the start, one token per dispatch.
struct TokenBucket: Sendable {
    let limit: RateLimit
    private(set) var tokens: Double
    private(set) var updated: UInt64

    init(_ limit: RateLimit, now: UInt64) {
        self.limit = limit
        self.tokens = Double(limit.burst)
        self.updated = now
    }

    /// The tokens there would be at `now`.
    func tokens(at now: UInt64) -> Double {
        guard now > updated else { return tokens }
        return min(Double(limit.burst), tokens + Double(now - updated) / 1e9 * limit.perSecond)
    }

    func hasToken(at now: UInt64) -> Bool { tokens(at: now) >= 1 }
    var isFull: Bool { tokens >= Double(limit.burst) }

    mutating func refill(now: UInt64) {
        tokens = tokens(at: now)
        updated = max(updated, now)
    }

    mutating func take(now: UInt64) {
        refill(now: now)
        tokens -= 1
    }

    /// When the next token is there; nil when one is already (as of the last update).
    var nextToken: UInt64? {
        guard tokens < 1 else { return nil }
        return updated &+ UInt64(((1 - tokens) / limit.perSecond * 1e9).rounded(.up))
    }
}

/// The buckets of a coordinator's rate limits: a request may be dispatched only while its skill's bucket
/// and its client's hold a token; one dispatch takes one from each. No limits, no work: `isActive` false.
struct RateLimiter: Sendable {
    private let limits: RateLimits
    private var skills: [String: TokenBucket] = [:]
    private var clients: [PeerID: TokenBucket] = [:]
    let isActive: Bool
    /// Client buckets kept before full ones (which a new bucket would equal) are forgotten.
    static let clientBucketLimit = 4096

    init(_ limits: RateLimits) {
        self.limits = limits
        self.isActive = !limits.isEmpty
    }

    func hasLimit(skill: String) -> Bool { limits.skills[skill] != nil }

    /// Whether `request` may be dispatched at `now`.
    func ready(_ request: CoordinatorState.Request, now: UInt64) -> Bool { holdingBack(request, now: now) == nil }

    /// The limit that keeps `request` from going at `now`: its skill's or its client's; nil when neither does.
    enum Holder { case skill(RateLimit), client(RateLimit) }

    func holdingBack(_ request: CoordinatorState.Request, now: UInt64) -> Holder? {
        if let limit = limits.skills[request.skill], !(skills[request.skill]?.hasToken(at: now) ?? (limit.burst >= 1)) {
            return .skill(limit)
        }
        if let limit = limits.perClient, let client = request.client,
            !(clients[client]?.hasToken(at: now) ?? (limit.burst >= 1))
        {
            return .client(limit)
        }
        return nil
    }

    /// Takes a token for a request that is dispatched.
    mutating func take(_ request: CoordinatorState.Request, now: UInt64) {
        if let limit = limits.skills[request.skill] {
            skills[request.skill, default: TokenBucket(limit, now: now)].take(now: now)
        }
        if let limit = limits.perClient, let client = request.client {
            clients[client, default: TokenBucket(limit, now: now)].take(now: now)
        }
    }

    /// Brings every bucket up to `now`, and forgets full client buckets when there are many.
    mutating func refill(now: UInt64) {
        for key in skills.keys { skills[key]?.refill(now: now) }
        for key in clients.keys { clients[key]?.refill(now: now) }
        if clients.count > Self.clientBucketLimit { clients = clients.filter { !$0.value.isFull } }
    }

    /// The soonest an empty bucket has a token again.
    var nextToken: UInt64? {
        var soonest: UInt64?
        for bucket in skills.values { if let due = bucket.nextToken { soonest = min(soonest ?? due, due) } }
        for bucket in clients.values { if let due = bucket.nextToken { soonest = min(soonest ?? due, due) } }
        return soonest
    }
}
