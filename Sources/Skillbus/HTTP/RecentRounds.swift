/// The latest rounds as the dashboard lists them, folded from feed events: a ROUND with its invocations, or
/// a REQUEST's round with the REQUESTs sent in it (a client's, or a skill's sub-calls). Newest first,
/// bounded; no sockets.
public struct RecentRounds: Sendable {
    public struct Invocation: Sendable, Equatable {
        public var id: String
        public var skill = ""
        public var agent = ""
        /// `waiting`, `running`, then `ok`, `error`, `cancelled` or `skipped`.
        public var status = "waiting"
        public var durationMs: Double?
        /// It did not run: it joined or reused an identical invocation of its round (`reusing` names it, when known).
        public var deduplicated = false
        public var reusing: String?
        public var cached = false
    }

    public struct Round: Sendable, Equatable {
        public var id: String
        /// `invoke`, `fanout`, `plan`, or `request` for REQUESTs that share a round id without a ROUND.
        public var shape: String
        /// `running`, then `ok` or `error`.
        public var status = "running"
        public var totalMs: Double?
        public var invocations: [Invocation] = []
    }

    public let limit: Int
    public static let invocationLimit = 100
    /// Newest last.
    private(set) var rounds: [Round] = []

    public init(limit: Int = 30) { self.limit = limit }

    public var newestFirst: [Round] { rounds.reversed() }

    /// Applies one event; returns the round it changed, if any.
    @discardableResult
    public mutating func apply(_ event: FeedEvent) -> Round? {
        switch event {
        case .roundAccepted(let round, let shape, let invocations):
            remove(round)
            var entry = Round(id: round, shape: shape)
            entry.invocations = invocations.prefix(Self.invocationLimit).map { Invocation(id: $0) }
            append(entry)
            return entry
        case .invocationDispatched(let round, let invocation, let skill, let agent, _):
            return update(round, invocation) {
                $0.skill = skill
                $0.agent = agent
                $0.status = "running"
            }
        case .invocationDeduplicated(let round, let invocation, let reusing):
            return update(round, invocation) {
                $0.deduplicated = true
                $0.reusing = reusing.isEmpty ? nil : reusing
                $0.status = "running"
            }
        case .invocationCached(let round, let invocation, let skill, let agent):
            return update(round, invocation) {
                $0.skill = skill
                $0.agent = agent
                $0.cached = true
            }
        case .invocationDone(let round, let invocation, let skill, let agent, let status, let micros, let deduplicated):
            return update(round, invocation) {
                $0.skill = skill
                if !agent.isEmpty { $0.agent = agent }
                $0.status = status.rawValue
                $0.durationMs = Double(micros) / 1000
                $0.deduplicated = $0.deduplicated || deduplicated
            }
        case .roundDone(let round, let status, let summary):
            guard let index = rounds.lastIndex(where: { $0.id == round }) else { return nil }
            rounds[index].status = status.rawValue
            rounds[index].totalMs = summary.totalMs
            return rounds[index]
        case .requestQueued(let round, let request, let skill, _, _):
            return update(round, request, creating: true) { $0.skill = skill }
        case .requestDispatched(let round, let request, let skill, let agent, _):
            return update(round, request, creating: true) {
                $0.skill = skill
                $0.agent = agent
                $0.status = "running"
            }
        case .requestDeduplicated(let round, let request, let skill, _):
            return update(round, request, creating: true) {
                $0.skill = skill
                $0.deduplicated = true
            }
        case .requestCached(let round, let request, let skill, let agent):
            return update(round, request, creating: true) {
                $0.skill = skill
                $0.agent = agent
                $0.cached = true
            }
        case .requestDone(let round, let request, let skill, let agent, let status, let micros, _):
            let changed = update(round, request, creating: true) {
                $0.skill = skill
                if !agent.isEmpty { $0.agent = agent }
                $0.status = status.rawValue
                $0.durationMs = Double(micros) / 1000
            }
            return finishRequestRound(round) ?? changed
        default:
            return nil
        }
    }

    /// A round of REQUESTs alone is done when none of them runs any more.
    private mutating func finishRequestRound(_ round: String) -> Round? {
        guard let index = rounds.lastIndex(where: { $0.id == round }), rounds[index].shape == "request" else {
            return nil
        }
        let ended = rounds[index].invocations.filter { $0.status != "running" && $0.status != "waiting" }
        guard ended.count == rounds[index].invocations.count else { return nil }
        rounds[index].status = ended.contains { $0.status == "error" } ? "error" : "ok"
        rounds[index].totalMs = ended.compactMap(\.durationMs).max()
        return rounds[index]
    }

    /// Changes the invocation `id` of `round`: a REQUEST's round and its entry are made when missing
    /// (`creating`); a round invocation of a round not seen (accepted before the dashboard started) is ignored.
    private mutating func update(
        _ round: String, _ id: String, creating: Bool = false, _ change: (inout Invocation) -> Void
    ) -> Round? {
        var index = rounds.lastIndex { $0.id == round }
        if index == nil, creating {
            append(Round(id: round, shape: "request"))
            index = rounds.count - 1
        }
        guard let index else { return nil }
        var entry: Int
        if let found = rounds[index].invocations.firstIndex(where: { $0.id == id }) {
            entry = found
        } else {
            guard creating, rounds[index].invocations.count < Self.invocationLimit else { return nil }
            rounds[index].invocations.append(Invocation(id: id))
            entry = rounds[index].invocations.count - 1
        }
        change(&rounds[index].invocations[entry])
        if rounds[index].shape == "request" { rounds[index].status = "running" }
        return rounds[index]
    }

    private mutating func append(_ round: Round) {
        rounds.append(round)
        if rounds.count > limit { rounds.removeFirst(rounds.count - limit) }
    }

    private mutating func remove(_ round: String) {
        rounds.removeAll { $0.id == round }
    }
}

extension RecentRounds.Round {
    public var json: JSONValue {
        var object: [String: JSONValue] = [
            "round": .string(id), "shape": .string(shape), "status": .string(status),
            "invocations": .array(invocations.map(\.json)),
        ]
        if let totalMs { object["totalMs"] = .number(totalMs) }
        return .object(object)
    }
}

extension RecentRounds.Invocation {
    public var json: JSONValue {
        var object: [String: JSONValue] = [
            "id": .string(id), "skill": .string(skill), "agent": .string(agent), "status": .string(status),
            "deduplicated": .bool(deduplicated), "cached": .bool(cached),
        ]
        if let durationMs { object["durationMs"] = .number(durationMs) }
        if let reusing { object["reusing"] = .string(reusing) }
        return .object(object)
    }
}
