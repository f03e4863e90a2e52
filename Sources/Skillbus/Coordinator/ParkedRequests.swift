/// What the bus accepted and has not started because it waits for something outside the request table, each in the
/// phase `parked(grace | lease | journal)`: a REQUEST or ROUND in the startup grace, waiting for an agent to offer
/// its skill (PROTOCOL §4.17); a REQUEST of a round a turn holds, waiting for the turn to give the round back
/// (§3.7); a ROUND waiting for the journal to record it (§3.5.9). Nothing parked has started, so it leaves only to
/// start, to be refused, or to be cancelled. It owns what ties a round to its wait: a round id is parked at most
/// once in a wait (the same round sent again joins it), and a round cancelled while the journal holds its accept
/// is remembered until that answer comes, so the answer never starts it.
struct ParkedRequests: Sendable {
    /// What a parked item waits for: its phase.
    enum Wait: Sendable, Equatable {
        /// The end of the startup grace, or an agent that offers its skills.
        case grace
        /// The end of the lease a turn holds on this round.
        case lease(ByteKey)
        /// The journal's answer to its accept.
        case journal

        var isLease: Bool {
            if case .lease = self { return true }
            return false
        }
    }

    enum Item: Sendable {
        case invoke(InvokeRequest, client: PeerID, arrived: UInt64)
        case round(AcceptedRound)
    }

    /// A REQUEST parked, as cancel finds it.
    struct ParkedInvoke: Sendable {
        let wait: Wait
        let request: InvokeRequest
        let client: PeerID
        let arrived: UInt64
    }

    /// The journal's answer to a round's accept came: whose it is.
    enum JournalAnswerFor {
        /// The round waiting for it, which leaves.
        case pending(AcceptedRound)
        /// A round cancelled while the journal held its accept; `resent` the same round sent again since, whose
        /// accept goes to the journal now (it stays pending).
        case cancelled(resent: AcceptedRound?)
    }

    /// In the grace, in arrival order.
    private var grace: [Item] = []
    /// Behind a turn's lease, by round, in arrival order: REQUESTs only.
    private var leased: [ByteKey: [Item]] = [:]
    /// Waiting for the journal, by round id.
    private var journal: [ByteKey: AcceptedRound] = [:]
    /// Rounds cancelled while the journal held their accept.
    private var journalCancelled: Set<ByteKey> = []
    /// When the startup grace ends (monotonic nanoseconds; 0: no grace).
    private(set) var graceEnds: UInt64 = 0

    var isEmpty: Bool { grace.isEmpty && leased.isEmpty && journal.isEmpty }
    /// Whether anything waits in the grace.
    var hasGraceItems: Bool { !grace.isEmpty }

    mutating func beginGrace(until end: UInt64) { graceEnds = end }

    func inGrace(now: UInt64) -> Bool { now < graceEnds }

    // MARK: Parking

    /// A REQUEST waits in the grace or behind a lease.
    mutating func park(_ request: InvokeRequest, client: PeerID, arrived: UInt64, _ wait: Wait) {
        switch wait {
        case .grace: grace.append(.invoke(request, client: client, arrived: arrived))
        case .lease(let round): leased[round, default: []].append(.invoke(request, client: client, arrived: arrived))
        case .journal: preconditionFailure("a REQUEST was parked for the journal: only ROUNDs are journaled")
        }
    }

    /// A ROUND waits in the grace or for the journal; it must not wait there already (`join` first).
    mutating func park(_ round: AcceptedRound, _ wait: Wait) {
        let key = ByteKey(round.request.$roundID)
        switch wait {
        case .grace:
            guard self.round(key, in: .grace) == nil else {
                preconditionFailure("a round was parked in the grace twice")
            }
            grace.append(.round(round))
        case .journal:
            guard journal.updateValue(round, forKey: key) == nil else {
                preconditionFailure("a round was parked for the journal twice: the same round sent again joins it")
            }
        case .lease: preconditionFailure("a ROUND was parked behind a lease: a leased round refuses ROUNDs")
        }
    }

    /// The same round sent again while it waits in `wait`: its clients join the one parked (true), or it is a
    /// conflict when its body differs (false); nil when the round does not wait there.
    mutating func join(_ round: AcceptedRound, in wait: Wait) -> Bool? {
        let key = ByteKey(round.request.$roundID)
        guard let parked = self.round(key, in: wait) else { return nil }
        guard parked.body == round.body else { return false }
        updateRound(key, in: wait) { parked in
            for client in round.clients where !parked.clients.contains(where: { $0 == client }) {
                parked.clients.append(client)
            }
        }
        return true
    }

    // MARK: Rounds

    /// The round `key` parked in `wait` (the grace or the journal).
    func round(_ key: ByteKey, in wait: Wait) -> AcceptedRound? {
        switch wait {
        case .journal: return journal.isEmpty ? nil : journal[key]
        case .grace: return graceRound(key).map { $0.round }
        case .lease: return nil
        }
    }

    /// The first parked round `matches` picks, with where it waits: for the journal, then in the grace.
    func round(where matches: (AcceptedRound) -> Bool) -> (round: AcceptedRound, wait: Wait)? {
        if let (_, round) = journal.first(where: { matches($0.value) }) { return (round, .journal) }
        for item in grace { if case .round(let round) = item, matches(round) { return (round, .grace) } }
        return nil
    }

    mutating func updateRound(_ key: ByteKey, in wait: Wait, _ body: (inout AcceptedRound) -> Void) {
        switch wait {
        case .journal:
            guard var round = journal[key] else { preconditionFailure("a round not parked for the journal changed") }
            body(&round)
            journal[key] = round
        case .grace:
            guard let found = graceRound(key) else { preconditionFailure("a round not in the grace changed") }
            var round = found.round
            body(&round)
            grace[found.index] = .round(round)
        case .lease:
            preconditionFailure("a round changed behind a lease: only REQUESTs wait there")
        }
    }

    /// A parked round leaves for good, never started (cancelled). One the journal holds the accept of stays marked
    /// until that answer comes (`journalAnswered`).
    mutating func removeRound(_ key: ByteKey, from wait: Wait) {
        switch wait {
        case .journal:
            journal[key] = nil
            journalCancelled.insert(key)
        case .grace:
            guard let (index, _) = graceRound(key) else { preconditionFailure("a round left the grace it was not in") }
            grace.remove(at: index)
        case .lease:
            preconditionFailure("a round left a lease: only REQUESTs wait there")
        }
    }

    private func graceRound(_ key: ByteKey) -> (index: Int, round: AcceptedRound)? {
        for (index, item) in grace.enumerated() {
            if case .round(let round) = item, round.request.$roundID == key.bytes { return (index, round) }
        }
        return nil
    }

    // MARK: Leaving

    /// Everything in the grace leaves, to be tried again (what still lacks its skill parks again).
    mutating func takeGrace() -> [Item] {
        defer { grace = [] }
        return grace
    }

    /// Whether anything in the grace `matches`.
    func graceContains(where matches: (Item) -> Bool) -> Bool { grace.contains(where: matches) }

    /// The lease on `round` ended: what waited behind it leaves, oldest first.
    mutating func releaseLease(_ round: ByteKey) -> [Item] {
        leased.isEmpty ? [] : leased.removeValue(forKey: round) ?? []
    }

    /// The REQUESTs behind leases that `expired` picks leave.
    mutating func removeExpiredLeased(where expired: (Item) -> Bool) -> [Item] {
        guard !leased.isEmpty else { return [] }
        var removed: [Item] = []
        for (round, items) in leased {
            let (gone, kept) = items.split(by: expired)
            guard !gone.isEmpty else { continue }
            leased[round] = kept.isEmpty ? nil : kept
            removed += gone
        }
        return removed
    }

    /// The parked REQUESTs (in the grace, then behind leases) that `matches` picks leave, never run.
    mutating func removeRequests(where matches: (ParkedInvoke) -> Bool) -> [ParkedInvoke] {
        func take(_ items: inout [Item], _ wait: Wait) -> [ParkedInvoke] {
            var taken: [ParkedInvoke] = []
            items.removeAll { item in
                guard case .invoke(let request, let client, let arrived) = item else { return false }
                let parked = ParkedInvoke(wait: wait, request: request, client: client, arrived: arrived)
                guard matches(parked) else { return false }
                taken.append(parked)
                return true
            }
            return taken
        }
        var removed = grace.isEmpty ? [] : take(&grace, .grace)
        for round in leased.keys {
            removed += take(&leased[round, default: []], .lease(round))
            if leased[round]?.isEmpty == true { leased[round] = nil }
        }
        return removed
    }

    // MARK: The journal

    /// Whether an accept of `key` is still with the journal for a round cancelled since: the next accept of the id
    /// waits for that answer (one accept of an id at a time).
    func isAcceptOutstanding(_ key: ByteKey) -> Bool { !journalCancelled.isEmpty && journalCancelled.contains(key) }

    /// The journal answered the accept of `key`: whose answer it is; nil when nothing waits for it.
    mutating func journalAnswered(_ key: ByteKey) -> JournalAnswerFor? {
        if !journalCancelled.isEmpty, journalCancelled.remove(key) != nil {
            return .cancelled(resent: journal[key])
        }
        return journal.removeValue(forKey: key).map(JournalAnswerFor.pending)
    }
}
