/// Finished rounds by round id, forgotten in the order they finished: the entries in that order, and an
/// index of their hashes (`HashBuckets`) naming each by its serial number. A dictionary of them paid a
/// deletion with a probe-run repair per forgotten round, about as much as the round's document.
struct RememberedRounds: Sendable {
    private struct Entry: Sendable {
        let key: [UInt8]
        let hash: UInt32
        let finishedAt: UInt64
        /// Nil once the same round id was remembered again (a newer entry holds it).
        var round: FinishedRound?
    }

    private var entries: [Entry] = []
    /// `entries[..<head]` are forgotten, dropped in batches.
    private var head = 0
    /// Serial number of `entries[head]`; the index names entries by serial.
    private var headSerial: UInt32 = 0
    private var index = HashBuckets()

    /// Rounds remembered.
    var count: Int { index.count }

    /// Entries not yet forgotten, counting those a newer one replaced.
    var entryCount: Int { entries.count - head }

    subscript(key: [UInt8]) -> FinishedRound? {
        find(key, HashBuckets.hash(key)).position.flatMap { entries[$0].round }
    }

    /// Remembers a round (forgetting what the same id held before).
    mutating func remember(_ key: [UInt8], _ round: FinishedRound) {
        let hash = HashBuckets.hash(key)
        var (position, bucket) = find(key, hash)
        if let position {
            index.remove(hash: hash, value: serial(of: position))
            entries[position].round = nil
            bucket = find(key, hash).bucket
        }
        index.insert(hash: hash, value: serial(of: entries.count), at: bucket)
        entries.append(Entry(key: key, hash: hash, finishedAt: round.finishedAt, round: round))
    }

    /// When the oldest entry finished.
    var oldestFinishedAt: UInt64? { head < entries.count ? entries[head].finishedAt : nil }

    /// Forgets the oldest entry.
    mutating func forgetOldest() {
        guard head < entries.count else { return }
        if entries[head].round != nil { index.remove(hash: entries[head].hash, value: headSerial) }
        head += 1
        headSerial &+= 1
        if head > 1024 && head * 2 > entries.count {
            entries.removeFirst(head)
            head = 0
        }
    }

    private func serial(of position: Int) -> UInt32 { headSerial &+ UInt32(truncatingIfNeeded: position - head) }

    private func position(of serial: UInt32) -> Int { head + Int(serial &- headSerial) }

    private func find(_ key: [UInt8], _ hash: UInt32) -> (position: Int?, bucket: Int) {
        let (serial, bucket) = index.find(hash: hash) { entries[position(of: $0)].key == key }
        return (serial.map { position(of: $0) }, bucket)
    }
}
