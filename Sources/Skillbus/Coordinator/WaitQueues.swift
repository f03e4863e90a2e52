/// The wait queues, an index into the `RequestTable`: the keys of its queued entries by skill and priority (any
/// provider will do) and by agent (a fan-out's invocation, which only its agent may run), each oldest first. It
/// owns the count over both, which the bus's `queueLimit` bounds, and each client's count, which its share bounds;
/// it never keeps an empty queue. Beside each key it keeps what it counts, ranks and expires by (client, times), so
/// that none of that needs a look into the table.
struct WaitQueues: Sendable {
    typealias Key = RequestTable.Key

    /// One queue per skill and priority: each is oldest first, so its head is its best candidate.
    struct Lane: Hashable, Sendable {
        let skill: String
        let priority: InvocationPriority
    }

    /// Which queue a request waits in.
    enum Queue: Sendable {
        case lane(Lane)
        case target(PeerID)
    }

    struct Item: Sendable {
        let key: Key
        let client: PeerID?
        let accepted: UInt64
        let deadline: UInt64
    }

    /// Skill and priority → entries waiting for any provider, oldest first.
    private var bySkill: [Lane: [Item]] = [:]
    /// Agent → fan-out invocations waiting for a slot on it, oldest first.
    private var byTarget: [PeerID: [Item]] = [:]
    /// Client → how many of its requests wait (only clients with at least one).
    private var byClient: [PeerID: Int] = [:]
    private(set) var count = 0

    /// The queue `request` waits in: its target's, else its skill's lane for its priority.
    static func queue(of request: CoordinatorState.Request) -> Queue {
        request.target.map(Queue.target) ?? .lane(Lane(skill: request.skill, priority: request.priority))
    }

    /// Whether any request waits for `skill` (by skill, not for an agent).
    func isWaiting(skill: String) -> Bool {
        InvocationPriority.allCases.contains { bySkill[Lane(skill: skill, priority: $0)] != nil }
    }

    /// How many of `client`'s requests wait.
    func count(of client: PeerID) -> Int { byClient[client] ?? 0 }

    mutating func append(_ item: Item, to queue: Queue) {
        switch queue {
        case .lane(let lane): bySkill[lane, default: []].append(item)
        case .target(let peer): byTarget[peer, default: []].append(item)
        }
        count += 1
        if let client = item.client { byClient[client, default: 0] += 1 }
    }

    /// Takes `key` out of `queue`, where it must be.
    mutating func remove(_ key: Key, from queue: Queue) {
        let item: Item?
        switch queue {
        case .lane(let lane): item = Self.remove(key, from: &bySkill, at: lane)
        case .target(let peer): item = Self.remove(key, from: &byTarget, at: peer)
        }
        guard let item else { preconditionFailure("a queued entry was not in the queue its request names") }
        taken(item)
    }

    private mutating func taken(_ item: Item) {
        count -= 1
        guard let client = item.client, let index = byClient.index(forKey: client) else { return }
        if byClient.values[index] <= 1 { byClient.remove(at: index) } else { byClient.values[index] -= 1 }
    }

    /// The key `worker` should run next: one only it may run whose request `runnable` accepts, first; else the best
    /// waiting for any of its skills — of a skill it can run now (below the skill's concurrency limit), the first
    /// of its lane that `ready` lets go (its rate limit) — by rank (priority, promoted after waiting
    /// `promotionNanos`), then age. It stays queued.
    func next(
        for worker: CoordinatorState.Worker, now: UInt64, promotionNanos: UInt64, runnable: (Key) -> Bool,
        ready: (Key) -> Bool
    ) -> Key? {
        guard count > 0 else { return nil }
        if let index = byTarget.index(forKey: worker.peer),
            let item = byTarget.values[index].first(where: { runnable($0.key) })
        {
            return item.key
        }
        var best: (key: Key, rank: Int, accepted: UInt64)?
        for skill in worker.skills.keys where worker.limits.isEmpty || worker.canRun(skill) {
            for priority in InvocationPriority.allCases {
                guard let index = bySkill.index(forKey: Lane(skill: skill, priority: priority)) else { continue }
                // Under a rate limit the head may belong to a client that must wait: the first that may go.
                guard let head = bySkill.values[index].first(where: { ready($0.key) }) else { continue }
                let rank = priority.rank(waited: now &- head.accepted, promotionNanos: promotionNanos)
                if let current = best, (current.rank, current.accepted) <= (rank, head.accepted) { continue }
                best = (head.key, rank, head.accepted)
            }
        }
        return best?.key
    }

    /// Takes every key waiting for `skill`, oldest first.
    mutating func removeAll(skill: String) -> [Key] {
        var items: [Item] = []
        for priority in InvocationPriority.allCases {
            items += bySkill.removeValue(forKey: Lane(skill: skill, priority: priority)) ?? []
        }
        for item in items { taken(item) }
        return items.sorted { $0.accepted < $1.accepted }.map(\.key)
    }

    /// Takes every key waiting for `target`, oldest first.
    mutating func removeAll(target: PeerID) -> [Key] {
        let items = byTarget.removeValue(forKey: target) ?? []
        for item in items { taken(item) }
        return items.map(\.key)
    }

    /// Takes the keys whose deadline passed by `now`: those waiting for one agent (with it), or those waiting by
    /// skill.
    mutating func removeExpired(now: UInt64, targeted: Bool) -> [(key: Key, target: PeerID?)] {
        guard count > 0 else { return [] }
        var removed: [(Key, PeerID?)] = []
        if targeted {
            for (target, queue) in byTarget {
                let (expired, kept) = queue.split { $0.deadline <= now }
                guard !expired.isEmpty else { continue }
                byTarget[target] = kept.isEmpty ? nil : kept
                for item in expired { taken(item) }
                removed += expired.map { ($0.key, target) }
            }
        } else {
            for (lane, queue) in bySkill {
                let (expired, kept) = queue.split { $0.deadline <= now }
                guard !expired.isEmpty else { continue }
                bySkill[lane] = kept.isEmpty ? nil : kept
                for item in expired { taken(item) }
                removed += expired.map { ($0.key, nil) }
            }
        }
        return removed
    }

    func forEach(_ body: (Key) -> Void) {
        for queue in bySkill.values { for item in queue { body(item.key) } }
        for queue in byTarget.values { for item in queue { body(item.key) } }
    }

    private static func remove<QueueKey: Hashable>(
        _ key: Key, from queues: inout [QueueKey: [Item]], at queueKey: QueueKey
    ) -> Item? {
        guard let index = queues.index(forKey: queueKey),
            let position = queues.values[index].firstIndex(where: { $0.key == key })
        else { return nil }
        let item = queues.values[index].remove(at: position)
        if queues.values[index].isEmpty { queues.remove(at: index) }
        return item
    }
}

extension Array {
    /// The elements that satisfy `condition` and those that do not, in order, in one pass.
    func split(by condition: (Element) -> Bool) -> (matching: [Element], rest: [Element]) {
        var matching: [Element] = []
        var rest: [Element] = []
        for element in self {
            if condition(element) { matching.append(element) } else { rest.append(element) }
        }
        return (matching, rest)
    }
}
