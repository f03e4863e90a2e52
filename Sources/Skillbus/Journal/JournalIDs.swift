/// The round ids the journal may hold, as the coordinator's thread knows them without asking it: every id the
/// journal held when it opened, and every id handed to it since, less the rows deleted since. An idempotent round
/// whose id is not here starts without a row and is written whole when it ends (CoordinatorState+EarlyRounds); any
/// other waits for the journal's answer.
///
/// Ids are kept as hashes (this process's `Hasher`): a collision only sends a round the slow way (it waits for the
/// journal's answer), and the set stays as small as the journal's row count allows.
struct JournalIDs: Sendable {
    private var hashes: Set<Int> = []

    init() {}

    init(_ ids: [[UInt8]]) {
        hashes.reserveCapacity(ids.count)
        for id in ids { hashes.insert(ByteKey(id).hashValue) }
    }

    func mayHold(_ key: ByteKey) -> Bool { hashes.contains(key.hashValue) }

    mutating func insert(_ key: ByteKey) { hashes.insert(key.hashValue) }

    mutating func remove(_ key: ByteKey) { hashes.remove(key.hashValue) }

    mutating func remove(_ ids: [[UInt8]]) {
        for id in ids { hashes.remove(ByteKey(id).hashValue) }
    }
}
