/// Invocations waiting out their backoff before the next attempt, soonest first. It owns their order: the
/// one due first is always at the front, so the coordinator's loop can sleep until exactly then.
struct RetryQueue: Sendable {
    typealias Request = CoordinatorState.Request

    private var entries: [(due: UInt64, request: Request)] = []

    var count: Int { entries.count }
    var isEmpty: Bool { entries.isEmpty }
    /// When the next one is due; nil when none waits.
    var nextDue: UInt64? { entries.first?.due }

    /// Queues `request` until `due`, after every one due at the same time or earlier.
    mutating func append(_ request: Request, due: UInt64) {
        var low = 0
        var high = entries.count
        while low < high {
            let middle = (low + high) / 2
            if entries[middle].due <= due { low = middle + 1 } else { high = middle }
        }
        entries.insert((due, request), at: low)
    }

    /// Takes every request due by `now`, soonest first.
    mutating func removeDue(now: UInt64) -> [Request] {
        guard let first = entries.first, first.due <= now else { return [] }
        let end = entries.firstIndex { $0.due > now } ?? entries.count
        let due = entries[..<end].map(\.request)
        entries.removeFirst(end)
        return due
    }

    func first(where matches: (Request) -> Bool) -> Request? { entries.first { matches($0.request) }?.request }

    func forEach(_ body: (Request) -> Void) { for entry in entries { body(entry.request) } }

    /// Takes every request that matches.
    mutating func remove(where matches: (Request) -> Bool) -> [Request] {
        let (taken, kept) = entries.split { matches($0.request) }
        entries = kept
        return taken.map(\.request)
    }
}
