/// Finished rounds by round id, forgotten in the order they finished: the entries in that order, and an
/// index of their hashes (`HashBuckets`) naming each by its serial number. A dictionary of them paid a
/// deletion with a probe-run repair per forgotten round, about as much as the round's document.
///
/// Each round's id, canonical body and document are copied into a `ChunkArena`, one after another, in the order
/// the rounds finished; a chunk is freed whole once its last entry is forgotten. Kept as arrays of their own, the
/// 10,000 documents a bus remembers by default made the coordinator's heap a third larger (docs/PERFORMANCE.md).
struct RememberedRounds: Sendable {
    private struct Entry: Sendable {
        let hash: UInt32
        let finishedAt: UInt64
        /// The serial of the chunk that holds the entry's bytes: id, body, document.
        let chunk: Int
        let offset: Int
        let keyCount: Int32
        let bodyCount: Int32
        let documentCount: Int32
        /// False once the same round id was remembered again (a newer entry holds it).
        var live = true
    }

    static let chunkBytes = ChunkArena.chunkBytes

    private var entries: [Entry] = []
    /// `entries[..<head]` are forgotten, dropped in batches.
    private var head = 0
    /// Serial number of `entries[head]`; the index names entries by serial.
    private var headSerial: UInt32 = 0
    private var index = HashBuckets()
    private var arena = ChunkArena()

    /// Rounds remembered.
    var count: Int { index.count }

    /// Entries not yet forgotten, counting those a newer one replaced.
    var entryCount: Int { entries.count - head }

    /// Chunks holding entries or being filled.
    var liveChunks: Int { arena.liveChunks }

    subscript(key: [UInt8]) -> FinishedRound? {
        guard let position = find(key, HashBuckets.hash(key)).position else { return nil }
        let entry = entries[position]
        return arena.read(entry.chunk) { chunk in
            let bodyStart = entry.offset + Int(entry.keyCount)
            let documentStart = bodyStart + Int(entry.bodyCount)
            return FinishedRound(
                body: Array(chunk[bodyStart..<documentStart]),
                document: Array(chunk[documentStart..<documentStart + Int(entry.documentCount)]),
                finishedAt: entry.finishedAt)
        }
    }

    /// Remembers a round (forgetting what the same id held before).
    mutating func remember(_ key: [UInt8], _ round: FinishedRound) {
        let hash = HashBuckets.hash(key)
        var (position, bucket) = find(key, hash)
        if let position {
            index.remove(hash: hash, value: serial(of: position))
            entries[position].live = false
            bucket = find(key, hash).bucket
        }
        let (chunk, offset, _) = arena.reserve(key.count + round.body.count + round.document.count)
        arena.writeLast { bytes in
            bytes += key
            bytes += round.body
            bytes += round.document
        }
        index.insert(hash: hash, value: serial(of: entries.count), at: bucket)
        entries.append(
            Entry(
                hash: hash, finishedAt: round.finishedAt, chunk: chunk, offset: offset,
                keyCount: Int32(key.count), bodyCount: Int32(round.body.count),
                documentCount: Int32(round.document.count)))
    }

    /// When the oldest entry finished.
    var oldestFinishedAt: UInt64? { head < entries.count ? entries[head].finishedAt : nil }

    /// Forgets the oldest entry, and frees the chunks no entry needs any more (the last stays: it is filled next).
    mutating func forgetOldest() {
        guard head < entries.count else { return }
        if entries[head].live { index.remove(hash: entries[head].hash, value: headSerial) }
        head += 1
        headSerial &+= 1
        arena.free(before: head < entries.count ? entries[head].chunk : nil)
        if head > 1024 && head * 2 > entries.count {
            entries.removeFirst(head)
            head = 0
        }
    }

    private func serial(of position: Int) -> UInt32 { headSerial &+ UInt32(truncatingIfNeeded: position - head) }

    private func position(of serial: UInt32) -> Int { head + Int(serial &- headSerial) }

    private func find(_ key: [UInt8], _ hash: UInt32) -> (position: Int?, bucket: Int) {
        let (serial, bucket) = index.find(hash: hash) { serial in
            let entry = entries[position(of: serial)]
            guard Int(entry.keyCount) == key.count else { return false }
            return arena.read(entry.chunk) { chunk in
                key.elementsEqual(chunk[entry.offset..<entry.offset + key.count])
            }
        }
        return (serial.map { position(of: $0) }, bucket)
    }
}
