/// QUERYs (or turns) forwarded to workers and not yet answered, by the id the bus gave them. Each waits
/// for one worker until its deadline.
struct PendingQueries: Sendable {
    struct Entry: Sendable {
        let client: PeerID
        let requestID: String
        /// The agent that answers (a turn handed over moves to another).
        var worker: PeerID
        var agent: String
        let deadline: UInt64
        /// A turn's round: its invocations go when the turn is cancelled.
        var round: [UInt8] = []
        /// A turn's session, for its `turn.call` events.
        var session = ""
        /// The client follows the turn: its states and calls go to it as PROGRESS.
        var progress = false
        /// A turn a ROUND asked for (an ask of a team round): the index of that invocation in the round `round`.
        /// Its answer goes to the round (CoordinatorState+TeamRounds), not to a client; `client` is empty.
        var roundStep: Int?
    }

    private var entries: [String: Entry] = [:]
    private var lastNumber: UInt64 = 0
    /// What the ids start with: `q` for queries, `t` for turns.
    let prefix: String

    init(prefix: String) { self.prefix = prefix }

    var count: Int { entries.count }

    /// Records a query on its way to `worker`; returns the id the worker must answer to.
    mutating func add(_ entry: Entry) -> String {
        lastNumber &+= 1
        let queryID = prefix + String(lastNumber)
        entries[queryID] = entry
        return queryID
    }

    /// The worker answered: the entry, when the id is one it was asked.
    mutating func answered(_ queryID: String, by worker: PeerID) -> Entry? {
        guard let entry = entries[queryID], entry.worker == worker else { return nil }
        entries[queryID] = nil
        return entry
    }

    /// The id and entry of the first that matches.
    func find(where matches: (Entry) -> Bool) -> (id: String, entry: Entry)? {
        entries.first { matches($0.value) }.map { ($0.key, $0.value) }
    }

    /// The id and entry of what `client` asked with `requestID`, if it still waits.
    func find(client: PeerID, requestID: String) -> (id: String, entry: Entry)? {
        entries.first { $0.value.client == client && $0.value.requestID == requestID }.map { ($0.key, $0.value) }
    }

    /// How many entries each worker is answering.
    func countByWorker() -> [PeerID: Int] { entries.values.reduce(into: [:]) { $0[$1.worker, default: 0] += 1 } }

    /// The entry with this id, whoever answers it.
    func entry(_ queryID: String) -> Entry? { entries[queryID] }

    /// The entry `worker` is answering, which stays pending (a turn streaming its reply).
    func entry(_ queryID: String, of worker: PeerID) -> Entry? {
        guard let entry = entries[queryID], entry.worker == worker else { return nil }
        return entry
    }

    /// The queries `worker` will never answer now (it left).
    mutating func removeAll(of worker: PeerID) -> [(id: String, entry: Entry)] {
        remove { $0.worker == worker }
    }

    mutating func removeExpired(now: UInt64) -> [(id: String, entry: Entry)] {
        guard !entries.isEmpty else { return [] }
        return remove { $0.deadline <= now }
    }

    private mutating func remove(where matches: (Entry) -> Bool) -> [(id: String, entry: Entry)] {
        let gone = entries.filter { matches($0.value) }
        for queryID in gone.keys { entries[queryID] = nil }
        return gone.map { ($0.key, $0.value) }
    }
}
