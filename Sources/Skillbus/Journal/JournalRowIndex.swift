/// Where each round id's row is in the SQLite journal (its `seq`), kept in memory rather than in an index of the
/// table: round ids are random, so an index on them wrote a page at a random place for every round.
///
/// Keyed by the id's hash (this process's `Hasher`, so the map stays as small as the row count allows): ids whose
/// hashes collide have several candidate rows, and the caller tells them apart by the id the row holds.
struct JournalRowIndex: Sendable {
    /// The id's key: its hash, or in tests a key that makes ids collide.
    private let key: @Sendable ([UInt8]) -> Int
    private var rows: [Int: Int64] = [:]
    /// Further rows of ids whose hashes collide with an earlier one's (almost always empty).
    private var collided: [Int: [Int64]] = [:]

    init(key: @escaping @Sendable ([UInt8]) -> Int = { ByteKey($0).hashValue }) { self.key = key }

    /// The first candidate row of `id` for which `matches` says it holds `id`.
    func row<E: Error>(of id: [UInt8], where matches: (Int64) throws(E) -> Bool) throws(E) -> Int64? {
        let key = key(id)
        guard let first = rows[key] else { return nil }
        if try matches(first) { return first }
        for seq in collided[key] ?? [] where try matches(seq) { return seq }
        return nil
    }

    mutating func insert(_ id: [UInt8], row seq: Int64) {
        let key = key(id)
        if rows[key] == nil {
            rows[key] = seq
        } else {
            collided[key, default: []].append(seq)
        }
    }

    mutating func remove(_ id: [UInt8], row seq: Int64) {
        let key = key(id)
        if rows[key] == seq {
            // The first of the collided rows, if any, takes its place.
            if var others = collided[key], !others.isEmpty {
                rows[key] = others.removeFirst()
                collided[key] = others.isEmpty ? nil : others
            } else {
                rows[key] = nil
            }
        } else if var others = collided[key], let at = others.firstIndex(of: seq) {
            others.remove(at: at)
            collided[key] = others.isEmpty ? nil : others
        }
    }
}
