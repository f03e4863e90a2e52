/// How the bus retries a failed invocation of a skill: the `retry` object of a skill descriptor
/// (PROTOCOL §5.2.1). Which failures are retried depends on the descriptor as a whole (`isRetryable`):
/// `agent_lost` and `timeout` only for an idempotent skill, since a lost or slow agent may have done part
/// of the work; any code the policy lists in `on`.
public struct RetryPolicy: Sendable, Equatable {
    /// Attempts in all, the first included.
    public var attempts: Int
    /// The wait before the first retry, in milliseconds.
    public var backoffMs: Int
    /// Each later wait is the one before times this.
    public var multiplier: Double
    /// No wait is longer than this (before jitter).
    public var maxBackoffMs: Int
    /// Each wait is scaled by a random factor from 1 − jitter to 1 + jitter, so that retries of many
    /// requests that failed together do not arrive together.
    public var jitter: Double
    /// Error codes retried besides `agent_lost` and `timeout` of an idempotent skill, as the skill chose
    /// them (`busy`, `unknown_skill`, a code of its own, …).
    public var on: [String]
    /// How long one attempt may run before the bus gives up on it with `timeout` (and retries it while the
    /// deadline leaves time); nil: an attempt has all the time left until the deadline.
    public var attemptTimeoutMs: Int?

    /// The first attempt and at most three retries.
    public static let defaultAttempts = 4
    /// Retries a client may ask for in a round (`retries`, PROTOCOL §3.5.1), which makes 11 attempts.
    public static let maxRetries = 10
    /// Codes that are never retried: the client or the bus wanted the invocation to stop, or it was refused.
    public static let neverRetried: Set<String> = ["cancelled", "confirmation_required"]

    public init(
        attempts: Int = RetryPolicy.defaultAttempts, backoffMs: Int = 100, multiplier: Double = 2,
        maxBackoffMs: Int = 10_000, jitter: Double = 0.2, on: [String] = [], attemptTimeoutMs: Int? = nil
    ) {
        self.attempts = attempts
        self.backoffMs = backoffMs
        self.multiplier = multiplier
        self.maxBackoffMs = maxBackoffMs
        self.jitter = jitter
        self.on = on
        self.attemptTimeoutMs = attemptTimeoutMs
    }

    /// The wait before retry number `retry` (1 for the first), with `random` from 0 to 1 giving the jitter.
    public func backoffNanos(retry: Int, random: Double) -> UInt64 {
        var ms = Double(backoffMs)
        for _ in 1..<max(retry, 1) { ms = min(ms * multiplier, Double(maxBackoffMs)) }
        ms = min(ms, Double(maxBackoffMs)) * (1 - jitter + 2 * jitter * min(max(random, 0), 1))
        return UInt64(max(ms, 0) * 1_000_000)
    }

    /// The normalised form: every key, `attemptTimeoutMs` only when set.
    public var json: JSONValue {
        var object: [String: JSONValue] = [
            "attempts": .number(Double(attempts)), "backoffMs": .number(Double(backoffMs)),
            "multiplier": .number(multiplier), "maxBackoffMs": .number(Double(maxBackoffMs)),
            "jitter": .number(jitter), "on": .array(on.map { .string($0) }),
        ]
        if let attemptTimeoutMs { object["attemptTimeoutMs"] = .number(Double(attemptTimeoutMs)) }
        return .object(object)
    }

    /// Reads a `retry` object; absent keys take their defaults. `skill` names the descriptor in errors.
    public init(json: JSONValue, skill: String) throws(SkillbusError) {
        func refuse(_ message: String) -> SkillbusError {
            SkillbusError(.invalidRegistration, "skill '\(skill)': 'retry' \(message)")
        }
        guard let object = json.objectValue else { throw refuse("must be an object") }
        func int(_ key: String, _ range: ClosedRange<Int>, _ fallback: Int?) throws(SkillbusError) -> Int? {
            guard let value = object[key], value != .null else { return fallback }
            guard let number = value.intValue, range.contains(number) else {
                throw refuse("'\(key)' must be an integer from \(range.lowerBound) to \(range.upperBound)")
            }
            return number
        }
        func number(_ key: String, _ range: ClosedRange<Double>, _ fallback: Double) throws(SkillbusError) -> Double {
            guard let value = object[key], value != .null else { return fallback }
            guard let number = value.doubleValue, range.contains(number) else {
                throw refuse("'\(key)' must be a number from \(range.lowerBound) to \(range.upperBound)")
            }
            return number
        }
        var codes: [String] = []
        if let value = object["on"], value != .null {
            guard let list = value.arrayValue, list.allSatisfy({ ($0.stringValue?.isEmpty ?? true) == false }) else {
                throw refuse("'on' must be an array of error codes (non-empty strings)")
            }
            for code in list.compactMap(\.stringValue) where !codes.contains(code) {
                guard !Self.neverRetried.contains(code) else { throw refuse("'on' cannot name '\(code)': it is never retried") }
                codes.append(code)
            }
        }
        let defaults = RetryPolicy()
        self.init(
            attempts: try int("attempts", 1...(Self.maxRetries + 1), defaults.attempts) ?? defaults.attempts,
            backoffMs: try int("backoffMs", 0...60_000, defaults.backoffMs) ?? defaults.backoffMs,
            multiplier: try number("multiplier", 1...10, defaults.multiplier),
            maxBackoffMs: try int("maxBackoffMs", 0...600_000, defaults.maxBackoffMs) ?? defaults.maxBackoffMs,
            jitter: try number("jitter", 0...1, defaults.jitter), on: codes,
            attemptTimeoutMs: try int("attemptTimeoutMs", 1...Wire.maxTimeoutMs, nil))
    }
}

extension SkillDescriptor {
    /// The keys for retries and concurrency (PROTOCOL §5.2, §5.2.1): `retry`, `idempotent`, `concurrency`.
    static func policies(_ json: JSONValue, _ identifier: String) throws(SkillbusError) -> (
        retry: RetryPolicy?, idempotent: Bool, concurrency: Int?
    ) {
        func refuse(_ message: String) -> SkillbusError {
            SkillbusError(.invalidRegistration, "skill '\(identifier)': \(message)")
        }
        var idempotent = false
        if let value = json["idempotent"], value != .null {
            guard let flag = value.boolValue else { throw refuse("'idempotent' must be true or false") }
            idempotent = flag
        }
        var concurrency: Int?
        if let value = json["concurrency"], value != .null {
            guard let limit = value.intValue, (1...100_000).contains(limit) else {
                throw refuse("'concurrency' must be an integer from 1 to 100000")
            }
            concurrency = limit
        }
        var retry: RetryPolicy?
        if let value = json["retry"], value != .null {
            let policy = try RetryPolicy(json: value, skill: identifier)
            // A lost or slow agent may have done part of the work: repeating it is only safe when that is harmless.
            if !idempotent, let code = policy.on.first(where: { $0 == "agent_lost" || $0 == "timeout" }) {
                throw refuse("'retry' may name '\(code)' only for an idempotent skill ('idempotent': true)")
            }
            retry = policy
        }
        return (retry, idempotent, concurrency)
    }

    /// Whether a failure with `code` may be tried again: never for `cancelled` and
    /// `confirmation_required`; `agent_lost` and `timeout` when the skill is idempotent; any code its
    /// policy lists. Such a failure is never kept as the answer for identical invocations (PROTOCOL §3.4).
    public func isRetryable(_ code: String) -> Bool {
        if RetryPolicy.neverRetried.contains(code) { return false }
        if idempotent && (code == "agent_lost" || code == "timeout") { return true }
        return retry?.on.contains(code) ?? false
    }
}
