/// Requests that wait for a free slot: by skill (any provider will do) and by agent (a fan-out's
/// invocation, which only its agent may run). It owns the count over both, which the bus's
/// `queueLimit` bounds, and never keeps an empty queue.
struct WaitQueues: Sendable {
    typealias Request = CoordinatorState.Request

    /// Skill identifier → requests waiting for any provider, oldest first.
    private var bySkill: [String: [Request]] = [:]
    /// Agent → fan-out invocations waiting for a slot on it, oldest first.
    private var byTarget: [PeerID: [Request]] = [:]
    private(set) var count = 0

    mutating func append(_ request: Request, skill: String) {
        bySkill[skill, default: []].append(request)
        count += 1
    }

    mutating func append(_ request: Request, target: PeerID) {
        byTarget[target, default: []].append(request)
        count += 1
    }

    /// The next request `worker` should run: one only it may run first, else the oldest waiting for any
    /// of its skills — of a skill it can run now (below the skill's concurrency limit).
    mutating func next(for worker: CoordinatorState.Worker) -> Request? {
        guard count > 0 else { return nil }
        if let request = Self.removeFirst(from: &byTarget, key: worker.peer, where: worker.canRun) {
            count -= 1
            return request
        }
        var oldest: (skill: String, accepted: UInt64)?
        for skill in worker.skills.keys where worker.limits.isEmpty || worker.canRun(skill) {
            guard let head = bySkill[skill]?.first else { continue }
            if let current = oldest, current.accepted <= head.accepted { continue }
            oldest = (skill, head.accepted)
        }
        guard let skill = oldest?.skill, let request = Self.removeFirst(from: &bySkill, key: skill) else { return nil }
        count -= 1
        return request
    }

    /// Takes every request waiting for `skill`.
    mutating func removeAll(skill: String) -> [Request] {
        let requests = bySkill.removeValue(forKey: skill) ?? []
        count -= requests.count
        return requests
    }

    /// Takes every request waiting for `target`.
    mutating func removeAll(target: PeerID) -> [Request] {
        let requests = byTarget.removeValue(forKey: target) ?? []
        count -= requests.count
        return requests
    }

    /// Takes the agent-bound requests that match, with the agent each waited for.
    mutating func removeTargeted(where matches: (Request) -> Bool) -> [(target: PeerID, request: Request)] {
        var removed: [(PeerID, Request)] = []
        for (target, queue) in byTarget {
            let (taken, kept) = queue.split(by: matches)
            guard !taken.isEmpty else { continue }
            byTarget[target] = kept.isEmpty ? nil : kept
            count -= taken.count
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
        for (skill, queue) in bySkill {
            let (taken, kept) = queue.split(by: matches)
            guard !taken.isEmpty else { continue }
            bySkill[skill] = kept.isEmpty ? nil : kept
            count -= taken.count
            removed += taken
        }
        // removeTargeted keeps the count itself.
        return removed + removeTargeted(where: matches).map(\.request)
    }

    /// Takes the requests waiting by skill whose deadline has passed, with their skill.
    mutating func removeExpiredBySkill(now: UInt64) -> [(skill: String, request: Request)] {
        guard count > 0 else { return [] }
        var removed: [(String, Request)] = []
        for (skill, queue) in bySkill {
            let (expired, kept) = queue.split { $0.deadline <= now }
            guard !expired.isEmpty else { continue }
            bySkill[skill] = kept.isEmpty ? nil : kept
            count -= expired.count
            removed += expired.map { (skill, $0) }
        }
        return removed
    }

    private static func removeFirst<Key: Hashable>(from queues: inout [Key: [Request]], key: Key) -> Request? {
        guard let index = queues.index(forKey: key) else { return nil }
        let request = queues.values[index].removeFirst()
        if queues.values[index].isEmpty { queues.remove(at: index) }
        return request
    }

    /// The oldest request under `key` whose skill `runnable` accepts (a fan-out's invocations may be of a
    /// skill at its limit while the next one is not).
    private static func removeFirst<Key: Hashable>(
        from queues: inout [Key: [Request]], key: Key, where runnable: (String) -> Bool
    ) -> Request? {
        guard let index = queues.index(forKey: key),
            let position = queues.values[index].firstIndex(where: { runnable($0.skill) })
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
