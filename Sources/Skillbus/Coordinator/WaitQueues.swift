/// Requests that wait for a free slot: by skill and priority (any provider will do) and by agent (a
/// fan-out's invocation, which only its agent may run). It owns the count over both, which the bus's
/// `queueLimit` bounds, and each client's count, which its share bounds; it never keeps an empty queue.
struct WaitQueues: Sendable {
    typealias Request = CoordinatorState.Request

    /// One queue per skill and priority: each is oldest first, so its head is its best candidate.
    struct Lane: Hashable, Sendable {
        let skill: String
        let priority: InvocationPriority
    }

    /// Skill and priority → requests waiting for any provider, oldest first.
    private var bySkill: [Lane: [Request]] = [:]
    /// Agent → fan-out invocations waiting for a slot on it, oldest first.
    private var byTarget: [PeerID: [Request]] = [:]
    /// Client → how many of its requests wait (only clients with at least one).
    private var byClient: [PeerID: Int] = [:]
    private(set) var count = 0

    /// Whether any request waits for `skill` (by skill, not for an agent).
    func isWaiting(skill: String) -> Bool {
        InvocationPriority.allCases.contains { bySkill[Lane(skill: skill, priority: $0)] != nil }
    }

    /// How many of `client`'s requests wait.
    func count(of client: PeerID) -> Int { byClient[client] ?? 0 }

    mutating func append(_ request: Request, skill: String) {
        bySkill[Lane(skill: skill, priority: request.priority), default: []].append(request)
        added(request)
    }

    mutating func append(_ request: Request, target: PeerID) {
        byTarget[target, default: []].append(request)
        added(request)
    }

    private mutating func added(_ request: Request) {
        count += 1
        if let client = request.client { byClient[client, default: 0] += 1 }
    }

    private mutating func taken(_ request: Request) {
        count -= 1
        guard let client = request.client, let index = byClient.index(forKey: client) else { return }
        if byClient.values[index] <= 1 { byClient.remove(at: index) } else { byClient.values[index] -= 1 }
    }

    private mutating func taken(_ requests: [Request]) { for request in requests { taken(request) } }

    /// The next request `worker` should run: one only it may run first, else the best waiting for any of its
    /// skills — of a skill it can run now (below the skill's concurrency limit) and that `ready` lets go
    /// (its rate limit) — by rank (priority, promoted after waiting `promotionNanos`), then age.
    mutating func next(
        for worker: CoordinatorState.Worker, now: UInt64, promotionNanos: UInt64,
        ready: ((Request) -> Bool)? = nil
    ) -> Request? {
        guard count > 0 else { return nil }
        let runnable: (Request) -> Bool = { request in
            worker.canRun(request.skill) && (ready?(request) ?? true)
        }
        if let request = Self.removeFirst(from: &byTarget, key: worker.peer, where: runnable) {
            taken(request)
            return request
        }
        var best: (lane: Lane, position: Int, rank: Int, accepted: UInt64)?
        for skill in worker.skills.keys where worker.limits.isEmpty || worker.canRun(skill) {
            for priority in InvocationPriority.allCases {
                let lane = Lane(skill: skill, priority: priority)
                guard let queue = bySkill[lane] else { continue }
                // Under a rate limit the head may belong to a client that must wait: the first that may go.
                guard let position = ready == nil ? 0 : queue.firstIndex(where: ready!) else { continue }
                let head = queue[position]
                let rank = priority.rank(waited: now &- head.accepted, promotionNanos: promotionNanos)
                if let current = best, (current.rank, current.accepted) <= (rank, head.accepted) { continue }
                best = (lane, position, rank, head.accepted)
            }
        }
        guard let best, let index = bySkill.index(forKey: best.lane) else { return nil }
        let request = bySkill.values[index].remove(at: best.position)
        if bySkill.values[index].isEmpty { bySkill.remove(at: index) }
        taken(request)
        return request
    }

    /// Takes every request waiting for `skill`.
    mutating func removeAll(skill: String) -> [Request] {
        var requests: [Request] = []
        for priority in InvocationPriority.allCases {
            requests += bySkill.removeValue(forKey: Lane(skill: skill, priority: priority)) ?? []
        }
        taken(requests)
        return requests.sorted { $0.accepted < $1.accepted }
    }

    /// Takes every request waiting for `target`.
    mutating func removeAll(target: PeerID) -> [Request] {
        let requests = byTarget.removeValue(forKey: target) ?? []
        taken(requests)
        return requests
    }

    /// Takes the agent-bound requests that match, with the agent each waited for.
    mutating func removeTargeted(where matches: (Request) -> Bool) -> [(target: PeerID, request: Request)] {
        var removed: [(PeerID, Request)] = []
        for (target, queue) in byTarget {
            let (taken, kept) = queue.split(by: matches)
            guard !taken.isEmpty else { continue }
            byTarget[target] = kept.isEmpty ? nil : kept
            self.taken(taken)
            removed += taken.map { (target, $0) }
        }
        return removed
    }

    /// The first waiting request that matches, in either kind of queue.
    func first(where matches: (Request) -> Bool) -> Request? {
        guard count > 0 else { return nil }
        for queue in bySkill.values { if let request = queue.first(where: matches) { return request } }
        for queue in byTarget.values { if let request = queue.first(where: matches) { return request } }
        return nil
    }

    func forEach(_ body: (Request) -> Void) {
        for queue in bySkill.values { queue.forEach(body) }
        for queue in byTarget.values { queue.forEach(body) }
    }

    /// Takes every waiting request that matches, from both kinds of queue.
    mutating func remove(where matches: (Request) -> Bool) -> [Request] {
        guard count > 0 else { return [] }
        var removed: [Request] = []
        for (lane, queue) in bySkill {
            let (taken, kept) = queue.split(by: matches)
            guard !taken.isEmpty else { continue }
            bySkill[lane] = kept.isEmpty ? nil : kept
            self.taken(taken)
            removed += taken
        }
        // removeTargeted keeps the count itself.
        return removed + removeTargeted(where: matches).map(\.request)
    }

    /// Takes the requests waiting by skill whose deadline has passed, with their skill.
    mutating func removeExpiredBySkill(now: UInt64) -> [(skill: String, request: Request)] {
        guard count > 0 else { return [] }
        var removed: [(String, Request)] = []
        for (lane, queue) in bySkill {
            let (expired, kept) = queue.split { $0.deadline <= now }
            guard !expired.isEmpty else { continue }
            bySkill[lane] = kept.isEmpty ? nil : kept
            taken(expired)
            removed += expired.map { (lane.skill, $0) }
        }
        return removed
    }

    /// The oldest request under `key` whose skill `runnable` accepts (a fan-out's invocations may be of a
    /// skill at its limit while the next one is not).
    private static func removeFirst<Key: Hashable>(
        from queues: inout [Key: [Request]], key: Key, where runnable: (Request) -> Bool
    ) -> Request? {
        guard let index = queues.index(forKey: key),
            let position = queues.values[index].firstIndex(where: runnable)
        else { return nil }
        let request = queues.values[index].remove(at: position)
        if queues.values[index].isEmpty { queues.remove(at: index) }
        return request
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
