/// Within a round, the same skill with the same parameters executes once: a later identical invocation
/// joins the running execution or receives its finished outcome. A plain value, driven by
/// `CoordinatorState`.
///
/// Everything is kept per round, in one table, and a round's invocations are put in canonical form
/// (schema defaults applied, keys sorted, numbers in one spelling) only once it holds a second one: the
/// common round of a single invocation costs no parsing, and one table entry.
struct SingleFlight: Sendable {
    /// One execution of a round, as `finish` wants it back.
    struct ExecutionID: Hashable, Sendable {
        /// Where the round is kept: the same until it is forgotten, and then only after all ran.
        let slot: Int
        /// Which execution of the round.
        let execution: Int
    }

    enum Admission: Equatable {
        /// The first of its kind: execute it, and `finish` it when it ends.
        case first(ExecutionID)
        /// Joined a running execution; `finish` will hand its outcome to this waiter too.
        case joined(ExecutionID)
        /// An identical invocation already finished: here is its outcome.
        case finished(Outcome)
        /// Not shared (no round id, or parameters that are not a JSON object).
        case unshared
    }

    private struct Execution {
        /// Identical invocations that joined it; the one that started it is its caller's to answer.
        var joiners: [Waiter] = []
        var outcome: Outcome?
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
        /// Set each time everything the round ran has finished; its entry in the finish order holds it too.
        var ticket: UInt64 = 0

        subscript(execution: Int) -> Execution {
            get { execution == 0 ? first : others[execution - 1] }
            set { if execution == 0 { first = newValue } else { others[execution - 1] = newValue } }
        }
    }

    let retentionNanos: UInt64
    let limit: Int
    /// Round id → round.
    private var rounds = SlotTable<Round>()
    /// Rounds whose executions all finished, oldest first; an entry is stale when its ticket is not the
    /// round's (the round ran again since, or was forgotten and its slot reused).
    private var finishedRounds = FinishOrder<(slot: Int, ticket: UInt64)>()
    private var lastTicket: UInt64 = 0
    private(set) var retainedOutcomes = 0

    init(retentionMs: Int, limit: Int) {
        retentionNanos = UInt64(retentionMs) * 1_000_000
        self.limit = limit
    }

    /// Rounds remembered, running or finished.
    var count: Int { rounds.count }

    /// Whether the round ran or runs anything this table remembers.
    func knows(round roundID: [UInt8]) -> Bool { rounds.slot(of: roundID) != nil }

    /// Places an invocation among the identical ones of its round. `schema` gives a skill's parameters,
    /// for their defaults; `key`, when the caller already has it, is the invocation's canonical key;
    /// `waiter` is who gets the outcome should it join another.
    mutating func admit(
        round roundID: [UInt8], skill: String, parameters: [UInt8], key: ByteKey? = nil, waiter: Waiter,
        schema: (String) -> ParameterSchema?
    ) -> Admission {
        guard !roundID.isEmpty else { return .unshared }
        let (slot, inserted) = rounds.slot(of: roundID) {
            Round(first: Execution(), uncanonical: (skill, parameters))
        }
        if inserted { return .first(ExecutionID(slot: slot, execution: 0)) }
        // In place: no copy of the round's arrays.
        return Self.admit(
            into: &rounds[slot], slot: slot, skill: skill, parameters: parameters, key: key, waiter: waiter,
            schema: schema)
    }

    private static func admit(
        into round: inout Round, slot: Int, skill: String, parameters: [UInt8], key known: ByteKey?,
        waiter: Waiter, schema: (String) -> ParameterSchema?
    ) -> Admission {
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
            round[number].joiners.append(waiter)
            return .joined(ExecutionID(slot: slot, execution: number))
        }
        round.others.append(Execution())
        round.byKey[key] = round.others.count
        round.running += 1
        return .first(ExecutionID(slot: slot, execution: round.others.count))
    }

    /// An execution ended. With an outcome (the invocation reached an agent) it is kept for the round;
    /// without one (it never ran: unknown skill, busy) it is forgotten, so it may be tried again.
    /// Returns those who joined it (not the invocation that started it).
    mutating func finish(_ id: ExecutionID, outcome: Outcome?, now: UInt64) -> [Waiter] {
        let (waiters, allFinished) = Self.finish(id.execution, in: &rounds[id.slot], outcome: outcome)
        if outcome != nil { retainedOutcomes += 1 }
        if allFinished {
            if rounds[id.slot].finished == 0 {
                // Nothing in it ever ran: nothing to remember.
                rounds.remove(slot: id.slot)
            } else {
                lastTicket += 1
                rounds[id.slot].ticket = lastTicket
                finishedRounds.append((id.slot, lastTicket), at: now)
            }
        }
        evict(now: now)
        return waiters
    }

    /// Who joined a running execution so far (not the invocation that started it): its partial output goes
    /// to them too.
    func joiners(of id: ExecutionID) -> [Waiter] {
        guard rounds.isOccupied(id.slot) else { return [] }
        return rounds[id.slot][id.execution].joiners
    }

    /// Returns the joiners, and whether nothing of the round runs any more.
    private static func finish(_ execution: Int, in round: inout Round, outcome: Outcome?) -> ([Waiter], Bool) {
        let waiters = round[execution].joiners
        round[execution].joiners = []
        round.running -= 1
        if let outcome {
            round[execution].outcome = outcome
            round.finished += 1
        } else if let key = round.byKey.first(where: { $0.value == execution })?.key {
            round.byKey[key] = nil
        } else if execution == 0 {
            round.uncanonical = nil
        }
        return (waiters, round.running == 0)
    }

    /// Forgets rounds finished longer than the retention ago, and the oldest while over the limit.
    mutating func evict(now: UInt64) {
        while let (entry, at) = finishedRounds.oldest, retainedOutcomes > limit || at &+ retentionNanos <= now {
            finishedRounds.removeOldest()
            guard rounds.isOccupied(entry.slot), rounds[entry.slot].ticket == entry.ticket,
                rounds[entry.slot].running == 0
            else { continue }
            retainedOutcomes -= rounds.remove(slot: entry.slot).finished
        }
    }

    /// Skill and parameters in canonical form: schema defaults applied, keys sorted, numbers in one
    /// spelling (`1`, `1.0` and `1e0` are one number). Nil when the parameters are not a JSON object.
    static func canonicalKey(skill: String, parameters: [UInt8], schema: (String) -> ParameterSchema?) -> ByteKey? {
        let fields = schema(skill)?.fields ?? []
        var key = Array(skill.utf8)
        key.append(0)
        // Most parameters are read straight from their bytes; the general path takes the rest.
        let defaults = fields.compactMap { field in field.defaultValue.map { (field.name, $0) } }
        if let canonical = CanonicalJSON.object(parameters, defaults: defaults, after: key) {
            return ByteKey(canonical)
        }
        guard var object = try? JSONValue(parsing: parameters).objectValue else { return nil }
        for (name, value) in defaults where object[name] == nil { object[name] = value }
        JSONValue.object(object).write(to: &key)
        return ByteKey(key)
    }
}

/// Keys in the order they finished, oldest first, to forget them later. Taking the oldest moves a head
/// index; the array is compacted only now and then, so it never shifts on every removal.
struct FinishOrder<Key: Sendable>: Sendable {
    private var items: [(key: Key, at: UInt64)] = []
    private var head = 0

    var count: Int { items.count - head }
    var oldest: (key: Key, at: UInt64)? { head < items.count ? items[head] : nil }

    mutating func append(_ key: Key, at time: UInt64) { items.append((key, time)) }

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

/// Who waits for an invocation's outcome: a client's REQUEST, a step of a round the bus runs, or a call a
/// turn runs itself (CLAIM), whose agent needs no answer.
enum Waiter: Sendable, Hashable {
    case client(PeerID, requestID: [UInt8])
    case step(round: ByteKey, index: Int)
    case claim
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
