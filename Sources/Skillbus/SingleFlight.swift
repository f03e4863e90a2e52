/// Within a round, the same skill with the same parameters executes once: a later identical invocation
/// joins the running execution or receives its finished outcome. A plain value, driven by
/// `CoordinatorState`.
///
/// Everything is kept per round, in one table, and a round's invocations are put in canonical form
/// (schema defaults applied, keys sorted, numbers in one spelling) only once it holds a second one: the
/// common round of a single invocation costs no parsing, and one table entry.
struct SingleFlight: Sendable {
    enum Admission: Equatable {
        /// The first of its kind: execute it; `execution` names it within its round.
        case first(execution: Int)
        /// Joined a running execution; its outcome will come to every waiter.
        case joined
        /// An identical invocation already finished: here is its outcome.
        case finished(Outcome)
        /// Not shared (no round id, or parameters that are not a JSON object).
        case unshared
    }

    private struct Execution {
        // The first waiter inline: most executions have one, and then no array is allocated.
        var first: Waiter?
        var more: [Waiter] = []
        var outcome: Outcome?

        init(_ waiter: Waiter) { first = waiter }

        mutating func takeWaiters() -> [Waiter] {
            defer {
                first = nil
                more = []
            }
            guard let first else { return more }
            return more.isEmpty ? [first] : [first] + more
        }
    }

    private struct Round {
        // The first execution inline: most rounds have one, and then no array is allocated.
        var first: Execution
        var others: [Execution] = []
        /// The first invocation's skill and parameters, until a second one makes both canonical.
        var uncanonical: (skill: String, parameters: [UInt8])?
        /// Canonical skill and parameters → execution number (0 is `first`).
        var byKey: [ByteKey: Int] = [:]
        var running = 1
        var finished = 0
        var lastFinished: UInt64 = 0

        subscript(execution: Int) -> Execution {
            get { execution == 0 ? first : others[execution - 1] }
            set { if execution == 0 { first = newValue } else { others[execution - 1] = newValue } }
        }
    }

    let retentionNanos: UInt64
    let limit: Int
    private var rounds: [ByteKey: Round] = [:]
    /// Rounds whose executions all finished, oldest first; an entry is stale when the round moved on.
    private var finishedRounds = FinishOrder()
    private(set) var retainedOutcomes = 0

    init(retentionMs: Int, limit: Int) {
        retentionNanos = UInt64(retentionMs) * 1_000_000
        self.limit = limit
    }

    /// Rounds remembered, running or finished.
    var count: Int { rounds.count }

    /// Places an invocation among the identical ones of its round. `schema` gives a skill's parameters,
    /// for their defaults; `key`, when the caller already has it, is the invocation's canonical key.
    mutating func admit(
        round roundID: [UInt8], skill: String, parameters: [UInt8], key: ByteKey? = nil, waiter: Waiter,
        schema: (String) -> ParameterSchema?
    ) -> Admission {
        guard !roundID.isEmpty else { return .unshared }
        // In place (one lookup, no copy of the round's arrays).
        return Self.admit(
            into: &rounds[ByteKey(roundID)], skill: skill, parameters: parameters, key: key, waiter: waiter,
            schema: schema)
    }

    private static func admit(
        into slot: inout Round?, skill: String, parameters: [UInt8], key known: ByteKey?, waiter: Waiter,
        schema: (String) -> ParameterSchema?
    ) -> Admission {
        guard var round = slot.take() else {
            slot = Round(first: Execution(waiter), uncanonical: (skill, parameters))
            return .first(execution: 0)
        }
        defer { slot = round }
        if let first = round.uncanonical {
            // Parameters that are no JSON object match nothing; their key cannot equal a canonical one,
            // which starts with a skill identifier in ASCII.
            let key = canonicalKey(skill: first.skill, parameters: first.parameters, schema: schema) ?? ByteKey([0xFF])
            round.byKey[key] = 0
            round.uncanonical = nil
        }
        guard let key = known ?? canonicalKey(skill: skill, parameters: parameters, schema: schema) else {
            return .unshared
        }
        if let number = round.byKey[key] {
            if let outcome = round[number].outcome { return .finished(outcome) }
            round[number].more.append(waiter)
            return .joined
        }
        round.others.append(Execution(waiter))
        round.byKey[key] = round.others.count
        round.running += 1
        return .first(execution: round.others.count)
    }

    /// An execution ended. With an outcome (the invocation reached an agent) it is kept for the round;
    /// without one (it never ran: unknown skill, busy) it is forgotten, so it may be tried again.
    /// Returns everyone waiting for it.
    mutating func finish(_ execution: Int, round roundID: [UInt8], outcome: Outcome?, now: UInt64) -> [Waiter] {
        let roundKey = ByteKey(roundID)
        let (waiters, retained, allFinished) = Self.finish(execution, in: &rounds[roundKey], outcome: outcome, now: now)
        if retained { retainedOutcomes += 1 }
        if allFinished { finishedRounds.append(roundKey, at: now) }
        evict(now: now)
        return waiters
    }

    /// Returns the waiters, whether the outcome is kept, and whether the round has just finished everything
    /// it ran (and is kept).
    private static func finish(
        _ execution: Int, in slot: inout Round?, outcome: Outcome?, now: UInt64
    ) -> ([Waiter], Bool, Bool) {
        guard var round = slot.take() else { return ([], false, false) }
        let waiters = round[execution].takeWaiters()
        round.running -= 1
        if let outcome {
            round[execution].outcome = outcome
            round.finished += 1
        } else if let key = round.byKey.first(where: { $0.value == execution })?.key {
            round.byKey[key] = nil
        } else if execution == 0 {
            round.uncanonical = nil
        }
        guard round.running == 0 else {
            slot = round
            return (waiters, outcome != nil, false)
        }
        // Nothing in it ever ran: nothing to remember.
        guard round.finished > 0 else { return (waiters, false, false) }
        round.lastFinished = now
        slot = round
        return (waiters, outcome != nil, true)
    }

    /// Forgets rounds finished longer than the retention ago, and the oldest while over the limit.
    mutating func evict(now: UInt64) {
        while let (roundKey, at) = finishedRounds.oldest, retainedOutcomes > limit || at &+ retentionNanos <= now {
            finishedRounds.removeOldest()
            // Stale: the round ran more since (a later entry stands for it), or it runs now: put it back.
            guard let round = rounds.removeValue(forKey: roundKey) else { continue }
            guard round.running == 0, round.lastFinished == at else {
                rounds[roundKey] = round
                continue
            }
            retainedOutcomes -= round.finished
        }
    }

    /// Skill and parameters in canonical form: schema defaults applied, keys sorted, numbers in one
    /// spelling (`1`, `1.0` and `1e0` are one number). Nil when the parameters are not a JSON object.
    static func canonicalKey(skill: String, parameters: [UInt8], schema: (String) -> ParameterSchema?) -> ByteKey? {
        guard var object = try? JSONValue(parsing: parameters).objectValue else { return nil }
        for field in schema(skill)?.fields ?? [] where object[field.name] == nil {
            if let value = field.defaultValue { object[field.name] = value }
        }
        var key = Array(skill.utf8)
        key.append(0)
        JSONValue.object(object).write(to: &key)
        return ByteKey(key)
    }
}

/// Keys in the order they finished, oldest first, to forget them later. Taking the oldest moves a head
/// index; the array is compacted only now and then, so it never shifts on every removal.
struct FinishOrder: Sendable {
    private var items: [(key: ByteKey, at: UInt64)] = []
    private var head = 0

    var count: Int { items.count - head }
    var oldest: (key: ByteKey, at: UInt64)? { head < items.count ? items[head] : nil }

    mutating func append(_ key: ByteKey, at time: UInt64) { items.append((key, time)) }

    mutating func removeOldest() {
        head += 1
        if head > 1024 && head * 2 > items.count {
            items.removeFirst(head)
            head = 0
        }
    }
}

/// Bytes as a dictionary key, hashed in one call.
struct ByteKey: Hashable, Sendable {
    let bytes: [UInt8]
    init(_ bytes: [UInt8]) { self.bytes = bytes }

    func hash(into hasher: inout Hasher) {
        bytes.withUnsafeBytes { hasher.combine(bytes: $0) }
    }
}

/// Who waits for an invocation's outcome: a client's REQUEST, or a step of a round the bus runs.
enum Waiter: Sendable, Equatable {
    case client(PeerID, requestID: [UInt8])
    case step(round: ByteKey, index: Int)
}

/// How an execution ended, kept to answer identical invocations of its round.
struct Outcome: Sendable, Equatable {
    let status: ReplyStatus
    let agent: [UInt8]
    let payload: [UInt8]
    let durationMicros: Int

    /// This outcome as the REPLY to one request.
    func reply(requestID: [UInt8], roundID: [UInt8]) -> BusToClientMessage {
        .reply(
            InvokeReply(
                frames: requestID, roundID, status: status, agent: agent, durationMicros: durationMicros,
                payload: payload))
    }
}
