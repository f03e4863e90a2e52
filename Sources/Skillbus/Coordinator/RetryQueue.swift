/// The retry order, an index into the `RequestTable`: the keys of its entries backing off, soonest due first. It
/// owns their order: the one due first is always at the front, so the coordinator's loop can sleep until exactly
/// then. The backoffs' jitter comes from here too.
struct RetryQueue: Sendable {
    typealias Key = RequestTable.Key

    private var entries: [(due: UInt64, key: Key)] = []
    /// SplitMix64's state: fast, and repeatable from its seed.
    private var jitterState: UInt64

    init(jitterSeed: UInt64 = 0) { jitterState = jitterSeed }

    var count: Int { entries.count }
    var isEmpty: Bool { entries.isEmpty }
    /// When the next one is due; nil when none waits.
    var nextDue: UInt64? { entries.first?.due }

    /// Queues `key` until `due`, after every one due at the same time or earlier.
    mutating func append(_ key: Key, due: UInt64) {
        var low = 0
        var high = entries.count
        while low < high {
            let middle = (low + high) / 2
            if entries[middle].due <= due { low = middle + 1 } else { high = middle }
        }
        entries.insert((due, key), at: low)
    }

    /// Takes every key due by `now`, soonest first.
    mutating func removeDue(now: UInt64) -> [Key] {
        guard let first = entries.first, first.due <= now else { return [] }
        let end = entries.firstIndex { $0.due > now } ?? entries.count
        let due = entries[..<end].map(\.key)
        entries.removeFirst(end)
        return due
    }

    /// A number from 0 to 1 for a backoff's jitter.
    mutating func nextJitter() -> Double {
        jitterState &+= 0x9E37_79B9_7F4A_7C15
        var value = jitterState
        value = (value ^ (value >> 30)) &* 0xBF58_476D_1CE4_E5B9
        value = (value ^ (value >> 27)) &* 0x94D0_49BB_1331_11EB
        value ^= value >> 31
        return Double(value >> 11) / Double(1 << 53)
    }

    /// Takes `key` out, where it must be.
    mutating func remove(_ key: Key) {
        guard let index = entries.firstIndex(where: { $0.key == key }) else {
            preconditionFailure("an entry backing off was not in the retry order")
        }
        entries.remove(at: index)
    }
}
