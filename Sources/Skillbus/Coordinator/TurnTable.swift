/// Turns through the bus and what each holds (PROTOCOL §3.7, §3.10): the turns waiting for their agent's TURNEND,
/// the lease a turn holds on its round, the calls a turn runs itself and has not reported ended (claims), and the
/// rounds of cancelled turns, marked until a while after the turn ended so that a call of theirs still on its way
/// is refused. It owns what ties them together: a round has at most one lease, held by a turn of this table that
/// was granted it when it started; a claim is made by the turn that holds its round's lease, or by a turn whose
/// OFFER the bus answered `run` (§3.7.3). A lease ends with its turn: every path that ends a turn (TURNEND, its
/// deadline, its agent lost) calls `endLease` (CoordinatorState+Turns), which also hands back what waited behind
/// it (`ParkedRequests`).
///
/// Teams (§3.7.1, §3.7.2): a turn asked by another turn's agent is nested under it (its parent, its depth); the
/// message and agent of every turn are kept so that a delegation that would go round in a circle is refused.
struct TurnTable: Sendable {
    typealias Turn = PendingQueries.Entry

    struct Lease: Sendable, Equatable {
        let holder: PeerID
        let turnID: String
    }

    struct ClaimKey: Hashable, Sendable {
        let worker: PeerID
        let turnID: String
        let claimID: String
    }

    /// A call a turn runs itself, entered among its round's executions.
    struct Claim: Sendable {
        let execution: SingleFlight.ExecutionID
        let round: [UInt8]
        let accepted: UInt64
        /// An offered call's name among its round's sub-calls (nil for a leased turn's).
        var subCall: [UInt8]? = nil
    }

    /// How long a cancelled turn's round stays marked after the turn ended.
    static let cancelledRoundGraceNanos: UInt64 = 30_000_000_000

    /// How long the reports of a turn whose deadline passed are still taken: its agent, which has the same
    /// deadline, ends it a moment after the bus gave up on it.
    static let lateTurnGraceNanos: UInt64 = 10_000_000_000

    /// A turn the bus gave up on at its deadline, whose TURNEND has not come yet.
    private struct LateTurn {
        let entry: Turn
        var standing: Standing
        let until: UInt64
    }

    /// Where a running turn stands in its team.
    struct Standing: Sendable {
        let agent: String
        let message: String
        /// The turn whose agent asked for this one; nil for a client's own.
        let parent: String?
        /// 0 for a client's turn, its parent's + 1 for a nested one.
        let depth: Int
        /// Agents the client's ASK went through by handoff before this one (bounded like depth).
        var handoffs = 0
        /// The STATEs and STEPs of the turn its worker sent: the rest its TURNEND's document holds.
        var statesSent = 0
        var stepsSent = 0
    }

    private var turns = PendingQueries(prefix: "t")
    private var standings: [String: Standing] = [:]
    /// Turns whose deadline passed, until their TURNEND or the grace: what their agent still reports goes on
    /// the feed (a turn's last state is often left to its TURNEND's document).
    private var late: [String: LateTurn] = [:]
    private var rotation = 0
    /// Agents whose planner could not reach its endpoint, until when (monotonic ns): unnamed turns pass them by.
    private var plannersDown: [PeerID: UInt64] = [:]
    private var leases: [ByteKey: Lease] = [:]
    private var claims: [ClaimKey: Claim] = [:]
    private var waitingOffers: [ByteKey: [WaitingOffer]] = [:]
    /// Round → until when it stays marked (monotonic nanoseconds; `UInt64.max` while its turn runs).
    private var cancelledRounds: [ByteKey: UInt64] = [:]

    var count: Int { turns.count }

    // MARK: Turns

    /// A turn starts: it waits for its agent's TURNEND, and holds its round when `leasing` (the caller checked that
    /// nothing else does); returns its id.
    mutating func start(_ turn: Turn, leasing: Bool, standing: Standing) -> String {
        let turnID = turns.add(turn)
        standings[turnID] = standing
        if leasing {
            guard leases.updateValue(Lease(holder: turn.worker, turnID: turnID), forKey: ByteKey(turn.round)) == nil
            else { preconditionFailure("a round was leased to a second turn: a round has at most one lease") }
        }
        return turnID
    }

    /// The turn `worker` runs as `turnID`, which goes on.
    func turn(_ turnID: String, of worker: PeerID) -> Turn? { turns.entry(turnID, of: worker) }

    /// The turn `client` asked for with `requestID`.
    func turn(client: PeerID, requestID: String) -> (id: String, turn: Turn)? {
        turns.find(client: client, requestID: requestID).map { ($0.id, $0.entry) }
    }

    /// A turn running in `round`.
    func turn(inRound round: [UInt8]) -> (id: String, turn: Turn)? {
        guard turns.count > 0 else { return nil }
        return turns.find { $0.round == round }.map { ($0.id, $0.entry) }
    }

    /// The turn that answers invocation `index` of the ROUND `round` (an ask of a team round), if it runs.
    func turn(answering round: [UInt8], step index: Int) -> (id: String, turn: Turn)? {
        guard turns.count > 0 else { return nil }
        return turns.find { $0.roundStep == index && $0.round == round }.map { ($0.id, $0.entry) }
    }

    /// TURNEND from `worker`: the turn, when it is one `worker` runs; it leaves. A late turn's TURNEND ends
    /// its grace and answers nothing (nil).
    mutating func answered(_ turnID: String, by worker: PeerID) -> Turn? {
        guard let turn = turns.answered(turnID, by: worker) else {
            if !late.isEmpty, late[turnID]?.entry.worker == worker { late[turnID] = nil }
            return nil
        }
        standings[turnID] = nil
        return turn
    }

    /// Turns whose time ran out: they leave, and their reports are taken until their TURNEND or the grace.
    mutating func removeExpired(now: UInt64) -> [(id: String, entry: Turn)] {
        let expired = turns.removeExpired(now: now)
        for (turnID, entry) in expired {
            guard let standing = standings.removeValue(forKey: turnID) else { continue }
            late[turnID] = LateTurn(entry: entry, standing: standing, until: now &+ Self.lateTurnGraceNanos)
        }
        if !late.isEmpty { late = late.filter { $0.value.until > now } }
        return expired
    }

    /// The turns of an agent that left: they leave.
    mutating func removeAll(of worker: PeerID) -> [(id: String, entry: Turn)] {
        if !late.isEmpty { late = late.filter { $0.value.entry.worker != worker } }
        return forget(turns.removeAll(of: worker))
    }

    /// The turn `turnID` of `worker` whose STATEs and STEPs the bus takes: running, or late (its deadline
    /// passed, its TURNEND not yet come).
    func reporting(_ turnID: String, of worker: PeerID) -> (entry: Turn, standing: Standing)? {
        if let entry = turns.entry(turnID, of: worker), let standing = standings[turnID] { return (entry, standing) }
        guard !late.isEmpty, let turn = late[turnID], turn.entry.worker == worker else { return nil }
        return (turn.entry, turn.standing)
    }

    private mutating func forget(_ removed: [(id: String, entry: Turn)]) -> [(id: String, entry: Turn)] {
        for (turnID, _) in removed { standings[turnID] = nil }
        return removed
    }

    // MARK: Teams

    /// Turns running on each agent now.
    func runningCounts() -> [PeerID: Int] { turns.countByWorker() }

    /// `worker`'s planner could not reach its endpoint at `now`.
    mutating func plannerDown(_ worker: PeerID, now: UInt64) { plannersDown[worker] = now &+ Self.plannerDownNanos }

    /// Whether `worker`'s planner failed to reach its endpoint lately.
    func isPlannerDown(_ worker: PeerID, now: UInt64) -> Bool {
        !plannersDown.isEmpty && (plannersDown[worker] ?? 0) > now
    }

    static let plannerDownNanos: UInt64 = 30_000_000_000

    /// A number that moves on at each call: who goes first among equally loaded agents.
    mutating func nextRotation() -> Int {
        rotation &+= 1
        return rotation & Int.max
    }

    /// Where the running turn `turnID` stands; nil when it is not running.
    func standing(of turnID: String) -> Standing? { standings[turnID] }

    /// Counts a STATE (or STEP) of a running or late turn from its worker.
    mutating func countReport(of turnID: String, from worker: PeerID, step: Bool) {
        if turns.entry(turnID, of: worker) != nil {
            if step { standings[turnID]?.stepsSent += 1 } else { standings[turnID]?.statesSent += 1 }
        } else if !late.isEmpty, late[turnID]?.entry.worker == worker {
            if step { late[turnID]?.standing.stepsSent += 1 } else { late[turnID]?.standing.statesSent += 1 }
        }
    }

    /// The running turn `turnID`, whoever runs it.
    func turn(_ turnID: String) -> Turn? { turns.entry(turnID) }

    /// The chain of turns from `turnID` up to the client's turn, nearest first.
    func ancestry(of turnID: String) -> [(id: String, standing: Standing)] {
        var chain: [(String, Standing)] = []
        var next: String? = turnID
        while let id = next, let standing = standings[id], chain.count <= standings.count {
            chain.append((id, standing))
            next = standing.parent
        }
        return chain
    }

    /// The running turns that `turnID` asked for, and theirs, all the way down.
    func descendants(of turnID: String) -> [String] {
        var found: [String] = []
        var frontier = [turnID]
        while let parent = frontier.popLast() {
            let children = standings.filter { $0.value.parent == parent }.map(\.key).sorted()
            found += children
            frontier += children
        }
        return found
    }

    // MARK: Leases

    var hasLeases: Bool { !leases.isEmpty }

    func lease(of round: ByteKey) -> Lease? { leases.isEmpty ? nil : leases[round] }

    /// The round comes back from turn `turnID`: the OFFERs that waited for it, in the order they came; nil when
    /// that turn did not hold it.
    mutating func endLease(of round: ByteKey, turnID: String) -> [WaitingOffer]? {
        guard let index = leases.index(forKey: round), leases.values[index].turnID == turnID else { return nil }
        leases.remove(at: index)
        return waitingOffers.removeValue(forKey: round) ?? []
    }

    /// An OFFER of another turn of a held round (a team round's, §3.7.3): decided when the round comes back.
    struct WaitingOffer: Sendable {
        let worker: PeerID
        let turnID: String
        let callID: String
        let skill: String
        let parameters: [UInt8]
    }

    /// At most this many OFFERs wait for one round; past it they go the REQUEST path, which bounds its own.
    static let waitingOffersLimit = 1024

    /// Keeps `offer` until its round comes back; false when the round already holds as many as it may.
    mutating func wait(_ offer: WaitingOffer, for round: ByteKey) -> Bool {
        guard waitingOffers[round, default: []].count < Self.waitingOffersLimit else { return false }
        waitingOffers[round, default: []].append(offer)
        return true
    }

    /// The OFFERs waiting for `round`, in the order they came, taken out (the round stays held).
    mutating func takeWaitingOffers(of round: ByteKey) -> [WaitingOffer] {
        waitingOffers.isEmpty ? [] : waitingOffers.removeValue(forKey: round) ?? []
    }

    // MARK: Claims

    /// A turn's call enters its round as an execution, to be settled when the turn reports it ended.
    mutating func claim(_ claim: Claim, as key: ClaimKey) {
        guard lease(of: ByteKey(claim.round))?.turnID == key.turnID else {
            preconditionFailure("a claim was made by a turn that does not hold its round")
        }
        claims[key] = claim
    }

    /// A call the bus told a turn to run on its agent (OFFER answered `run`): a claim with no lease.
    mutating func offered(_ claim: Claim, as key: ClaimKey) { claims[key] = claim }

    /// The turn reported the call ended: its claim leaves.
    mutating func takeClaim(_ key: ClaimKey) -> Claim? { claims.isEmpty ? nil : claims.removeValue(forKey: key) }

    /// Claims that will never be reported (their turn ended, or their agent left): they leave.
    mutating func takeClaims(where matches: (ClaimKey) -> Bool) -> [(key: ClaimKey, claim: Claim)] {
        guard !claims.isEmpty else { return [] }
        let taken = claims.filter { matches($0.key) }
        for key in taken.keys { claims[key] = nil }
        return taken.map { ($0.key, $0.value) }
    }

    // MARK: Cancelled turns' rounds

    /// The turn in `round` was cancelled: a call of its still on the way is refused, until a while after it ended.
    mutating func markCancelled(round: [UInt8]) { cancelledRounds[ByteKey(round)] = .max }

    /// A turn in `round` ended: a cancelled one's mark goes after the grace.
    mutating func turnEnded(round: [UInt8], now: UInt64) {
        let key = ByteKey(round)
        guard !cancelledRounds.isEmpty, cancelledRounds[key] != nil else { return }
        cancelledRounds[key] = now &+ Self.cancelledRoundGraceNanos
    }

    /// Whether `round` is a cancelled turn's.
    func isCancelled(round: [UInt8]) -> Bool { !cancelledRounds.isEmpty && cancelledRounds[ByteKey(round)] != nil }

    /// The marks whose grace has passed go.
    mutating func evictCancelled(now: UInt64) {
        if !cancelledRounds.isEmpty { cancelledRounds = cancelledRounds.filter { $0.value > now } }
    }
}
