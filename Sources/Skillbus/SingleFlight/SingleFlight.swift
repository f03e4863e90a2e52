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

        subscript(execution: Int) -> Execution {
            get { execution == 0 ? first : others[execution - 1] }
            set { if execution == 0 { first = newValue } else { others[execution - 1] = newValue } }
        }

        /// Its executions that ended with an outcome, each under its canonical key, for `FinishedRounds`
        /// (`finish` keeps a round whose only invocation was never made canonical as it came instead).
        var finishedExecutions: [FinishedRounds.Execution] {
            byKey.compactMap { key, number in
                self[number].outcome.map { FinishedRounds.Execution(key: .canonical(key.bytes), outcome: $0) }
            }
        }

        /// A remembered round that runs again, as it was.
        init(finished executions: [FinishedRounds.Execution]) {
            first = Execution(outcome: executions.first?.outcome)
            others = executions.dropFirst().map { Execution(outcome: $0.outcome) }
            running = 0
            finished = executions.count
            for (number, execution) in executions.enumerated() {
                switch execution.key {
                case .raw(let skill, let parameters): uncanonical = (skill, parameters)
                case .canonical(let key): byKey[ByteKey(key)] = number
                }
            }
        }

        init(first: Execution, uncanonical: (skill: String, parameters: [UInt8])) {
            self.first = first
            self.uncanonical = uncanonical
        }
    }

    let retentionNanos: UInt64
    let limit: Int
    /// Round id → round, while something in it runs.
    private var rounds = SlotTable<[UInt8], Round>()
    /// Rounds whose executions all finished, oldest first, in compact form.
    private var finishedRounds = FinishedRounds()
    private(set) var retainedOutcomes = 0

    init(retentionMs: Int, limit: Int) {
        retentionNanos = UInt64(retentionMs) * 1_000_000
        self.limit = limit
    }

    /// Rounds remembered, running or finished.
    var count: Int { rounds.count + finishedRounds.count }

    /// Whether the round ran or runs anything this table remembers.
    func knows(round roundID: [UInt8]) -> Bool {
        rounds.slot(of: roundID) != nil || finishedRounds.find(roundID) != nil
    }

    /// Places an invocation among the identical ones of its round. `schema` gives a skill's parameters,
    /// for their defaults; `key`, when the caller already has it, is the invocation's canonical key;
    /// `waiter` is who gets the outcome should it join another.
    mutating func admit(
        round roundID: [UInt8], skill: String, parameters: [UInt8], key: ByteKey? = nil, waiter: Waiter,
        schema: (String) -> ParameterSchema?
    ) -> Admission {
        guard !roundID.isEmpty else { return .unshared }
        var revived: Round?
        var key = key
        let hash = HashBuckets.hash(roundID)
        if let entry = finishedRounds.find(roundID, hash: hash) {
            switch finishedOutcome(entry, skill: skill, parameters: parameters, key: key, schema: schema) {
            case .outcome(let outcome): return .finished(outcome)
            case .unshared: return .unshared
            case .new(let canonical):
                // Something the round did not run yet: it runs again, with what it remembers.
                revived = Round(finished: finishedRounds.executions(of: entry))
                finishedRounds.remove(entry)
                key = canonical
            }
        }
        let (slot, inserted) = rounds.slot(of: roundID, hash: hash) {
            revived ?? Round(first: Execution(), uncanonical: (skill, parameters))
        }
        if inserted && revived == nil { return .first(ExecutionID(slot: slot, execution: 0)) }
        // In place: no copy of the round's arrays.
        return Self.admit(
            into: &rounds[slot], slot: slot, skill: skill, parameters: parameters, key: key, waiter: waiter,
            schema: schema)
    }

    /// Places an invocation as `admit` does only when an identical one of its round ran or runs: it gets that
    /// outcome, or joins that execution. Nil when it would be the first of its kind; nothing is added then.
    mutating func reuse(
        round roundID: [UInt8], skill: String, parameters: [UInt8], waiter: Waiter,
        schema: (String) -> ParameterSchema?
    ) -> Admission? {
        guard !roundID.isEmpty else { return .unshared }
        let hash = HashBuckets.hash(roundID)
        if let entry = finishedRounds.find(roundID, hash: hash) {
            switch finishedOutcome(entry, skill: skill, parameters: parameters, key: nil, schema: schema) {
            case .outcome(let outcome): return .finished(outcome)
            case .unshared: return .unshared
            case .new: return nil
            }
        }
        guard let slot = rounds.slot(of: roundID) else { return nil }
        Self.makeCanonical(&rounds[slot], schema: schema)
        guard let key = Self.canonicalKey(skill: skill, parameters: parameters, schema: schema) else {
            return .unshared
        }
        guard rounds[slot].byKey[key] != nil else { return nil }
        return Self.admit(
            into: &rounds[slot], slot: slot, skill: skill, parameters: parameters, key: key, waiter: waiter,
            schema: schema)
    }

    /// The round's first invocation under its canonical key, once a second one must be compared with it.
    private static func makeCanonical(_ round: inout Round, schema: (String) -> ParameterSchema?) {
        guard let first = round.uncanonical else { return }
        // Parameters that are no JSON object match nothing; their key cannot equal a canonical one, which starts
        // with a skill identifier in ASCII.
        let key = canonicalKey(skill: first.skill, parameters: first.parameters, schema: schema) ?? ByteKey([0xFF])
        round.byKey[key] = 0
        round.uncanonical = nil
    }

    private static func admit(
        into round: inout Round, slot: Int, skill: String, parameters: [UInt8], key known: ByteKey?,
        waiter: Waiter, schema: (String) -> ParameterSchema?
    ) -> Admission {
        makeCanonical(&round, schema: schema)
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
            // Nothing runs in it: it is kept compactly, unless nothing in it ever ran.
            let roundID = rounds.key(id.slot)
            let round = rounds.remove(slot: id.slot)
            if let (skill, parameters) = round.uncanonical, let outcome = round.first.outcome {
                // The common round of one invocation: no array to build.
                let execution = FinishedRounds.Execution(
                    key: .raw(skill: skill, parameters: parameters), outcome: outcome)
                finishedRounds.append(roundID: roundID, executions: CollectionOfOne(execution), finishedAt: now)
            } else if round.finished > 0 {
                finishedRounds.append(roundID: roundID, executions: round.finishedExecutions, finishedAt: now)
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
        while let at = finishedRounds.oldestFinishedAt, retainedOutcomes > limit || at &+ retentionNanos <= now {
            retainedOutcomes -= finishedRounds.removeOldest()
        }
    }

    private enum FinishedLookup {
        case outcome(Outcome)
        /// Nothing identical ran in the round; this is the invocation's canonical key.
        case new(ByteKey)
        /// Parameters that are not a JSON object.
        case unshared
    }

    /// The outcome of a remembered round's execution identical to this invocation: first by its bytes
    /// as they came (a resend), then in canonical form.
    private func finishedOutcome(
        _ entry: Int, skill: String, parameters: [UInt8], key known: ByteKey?, schema: (String) -> ParameterSchema?
    ) -> FinishedLookup {
        // A key in canonical form that equals these bytes is their canonical form too.
        let resent = finishedRounds.outcome(of: entry) { key in
            key.bytes.count == skill.utf8.count + 1 + parameters.count && key.bytes.starts(with: skill.utf8)
                && key.bytes[skill.utf8.count] == 0 && key.bytes[(skill.utf8.count + 1)...].elementsEqual(parameters)
        }
        if let resent { return .outcome(resent) }
        guard let canonical = known ?? Self.canonicalKey(skill: skill, parameters: parameters, schema: schema) else {
            return .unshared
        }
        let outcome = finishedRounds.outcome(of: entry) { key in
            guard key.raw else { return key.bytes.elementsEqual(canonical.bytes) }
            guard let split = key.bytes.firstIndex(of: 0) else { return false }
            let skill = String(decoding: key.bytes[..<split], as: UTF8.self)
            let parameters = Array(key.bytes[(split + 1)...])
            return Self.canonicalKey(skill: skill, parameters: parameters, schema: schema) == canonical
        }
        return outcome.map { .outcome($0) } ?? .new(canonical)
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

    /// The same key for parameters that are an object in canonical form already (a round's: the bus read them so,
    /// or wrote them itself): unless the schema fills in defaults, the bytes as they are.
    static func canonicalKey(
        skill: String, canonicalParameters parameters: [UInt8], schema: ParameterSchema?
    ) -> ByteKey? {
        if let schema, schema.fields.contains(where: { $0.defaultValue != nil }) {
            return canonicalKey(skill: skill, parameters: parameters, schema: { _ in schema })
        }
        var key: [UInt8] = []
        key.reserveCapacity(skill.utf8.count + 1 + parameters.count)
        key += skill.utf8
        key.append(0)
        key += parameters
        return ByteKey(key)
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

/// Who waits for an invocation's outcome: a client's REQUEST, a step of a round the bus runs, a call a
/// turn runs itself (CLAIM), whose agent needs no answer, or a turn's call offered to run on its agent that
/// joined an identical one (OFFER, answered VERDICT `done`). Only the first three start executions.
enum Waiter: Sendable, Hashable {
    case client(PeerID, requestID: [UInt8])
    case step(round: ByteKey, index: Int)
    case claim
    case offer(PeerID, turnID: String, callID: String)
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
