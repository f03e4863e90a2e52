import Foundation

/// The database under a `RoundJournal`: the statements its thread needs, one method each, so that the journal's
/// rules (what an accept answers, batches, retention, what an open finds) are written once over both stores:
/// SQLite in the coordinator's data directory (`SQLiteJournalStore`), or PostgreSQL for a coordinator group
/// (`PostgresJournalStore`). A store belongs to the journal's thread, which opens it, uses it and closes it.
protocol JournalStore: AnyObject {
    /// Runs `body` in one transaction: committed when it returns, rolled back when it throws.
    func transaction<T>(_ body: () throws(SkillbusError) -> T) throws(SkillbusError) -> T

    /// Records new rounds as running; returns the ids it inserted (an id journaled already, or a second time in
    /// `rounds`, is not).
    func insertRunning(_ rounds: [NewRound], nowMs: Int64) throws(SkillbusError) -> Set<[UInt8]>
    /// What the journal holds for `id`.
    func stored(_ id: [UInt8]) throws(SkillbusError) -> StoredRound?
    /// An interrupted idempotent round runs again: `running` once more.
    func rerun(_ id: [UInt8], nowMs: Int64) throws(SkillbusError)
    /// Ends rounds with their documents; a round without a row gets one (done, with its body).
    func finish(_ rounds: [FinishedRow], nowMs: Int64) throws(SkillbusError)
    /// The bytes a row counts, nil without one.
    func bytes(of id: [UInt8]) throws(SkillbusError) -> Int?
    func delete(_ id: [UInt8]) throws(SkillbusError)
    func upsertMember(_ row: SessionMembership) throws(SkillbusError)
    func deleteSession(_ session: [UInt8]) throws(SkillbusError)

    /// At open: every round still running did not finish under the last coordinator; returns how many.
    func interruptRunning(nowMs: Int64) throws(SkillbusError) -> Int
    func totalBytes() throws(SkillbusError) -> Int
    /// Every round id the journal holds (at open: the coordinator's `JournalIDs`).
    func roundIDs() throws(SkillbusError) -> [[UInt8]]
    /// The session roster without the sessions nobody served since `idleBeforeMs` (deleted first), oldest
    /// `lastMs` first.
    func sessions(idleBeforeMs: Int64) throws(SkillbusError) -> [SessionMembership]
    /// At most `limit` ended rounds, oldest first (the retention sweep's candidates): in SQLite the first accepted,
    /// in PostgreSQL the first ended.
    func oldestEnded(limit: Int) throws(SkillbusError) -> [JournalRetention.Row]

    /// Whether the store can wait for its database to come back (PostgreSQL: the server restarts; SQLite, a
    /// file of the coordinator's own, never goes away), whether it is connected now, and connecting again.
    var waitsForDatabase: Bool { get }
    var isConnected: Bool { get }
    func reconnect() throws(SkillbusError)

    /// Pages of write-ahead log not yet checkpointed (0 for a store that has none of its own to keep).
    var framesInLog: Int { get }
    func checkpoint() throws(SkillbusError)
    func close()
}

/// A round to journal as running.
struct NewRound: Sendable, Equatable {
    var id: [UInt8]
    var body: [UInt8]
    var idempotent: Bool
}

/// A round's end as the journal writes it.
struct FinishedRow: Sendable, Equatable {
    var id: [UInt8]
    var body: [UInt8]
    var document: [UInt8]
}

/// A journaled round as an accept finds it.
struct StoredRound: Sendable, Equatable {
    var body: [UInt8]
    /// `running`, `done` or `interrupted`.
    var state: String
    var idempotent: Bool
    var document: [UInt8]?
}

/// The journal in `journal.sqlite` of the coordinator's data directory, which it holds locked while it runs.
final class SQLiteJournalStore: JournalStore {
    private let database: SQLiteDatabase
    private let lock: DirectoryLock
    /// Where each id's row is: read at open, kept with every insert and delete.
    private var index: JournalRowIndex
    /// What the running transaction changed in `index`, undone when it rolls back: (id, row, inserted).
    private var indexChanges: [(id: [UInt8], seq: Int64, inserted: Bool)] = []

    /// SQLite's page cache for the journal, in KiB.
    static let cacheKiB = 16384

    init(directory: String, index: JournalRowIndex = JournalRowIndex()) throws(SkillbusError) {
        self.index = index
        do {
            try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        } catch {
            throw SkillbusError(
                .storageUnavailable,
                "cannot create the coordinator's data directory \(directory): "
                    + error.localizedDescription, details: ["directory": .string(directory)])
        }
        lock = try DirectoryLock(directory: directory, agent: "coordinator")
        do {
            let path = (directory as NSString).appendingPathComponent(JournalSchema.databaseName)
            database = try SQLiteDatabase.open(path: path, migrations: JournalSchema.migrations)
            // The last pages of the table stay in memory (SQLite's default keeps 2 MiB).
            try database.execute("PRAGMA cache_size=-\(Self.cacheKiB)")
            database.checkpointWhenAsked()
            try database.rows(JournalSchema.rows) { row in self.index.insert(row.bytes(1), row: row.int64(0)) }
        } catch {
            lock.release()
            throw error
        }
    }

    func transaction<T>(_ body: () throws(SkillbusError) -> T) throws(SkillbusError) -> T {
        indexChanges = []
        do {
            return try database.transaction(body)
        } catch {
            for change in indexChanges.reversed() {
                if change.inserted {
                    index.remove(change.id, row: change.seq)
                } else {
                    index.insert(change.id, row: change.seq)
                }
            }
            indexChanges = []
            throw error
        }
    }

    private func indexed(_ id: [UInt8], row seq: Int64) {
        index.insert(id, row: seq)
        if database.inTransaction { indexChanges.append((id, seq, true)) }
    }

    private func unindexed(_ id: [UInt8], row seq: Int64) {
        index.remove(id, row: seq)
        if database.inTransaction { indexChanges.append((id, seq, false)) }
    }

    /// The row of `id`, or nil when the journal holds none.
    private func row(of id: [UInt8]) throws(SkillbusError) -> Int64? {
        try index.row(of: id) { seq throws(SkillbusError) in
            try database.integer(JournalSchema.isRow, [.integer(seq), .utf8(id)]) != nil
        }
    }

    func insertRunning(_ rounds: [NewRound], nowMs: Int64) throws(SkillbusError) -> Set<[UInt8]> {
        var inserted: Set<[UInt8]> = []
        for round in rounds where try row(of: round.id) == nil {
            try database.run(
                JournalSchema.insert,
                [
                    .utf8(round.id), .utf8(round.body), .int(round.idempotent ? 1 : 0), .integer(nowMs),
                    .int(round.body.count),
                ])
            indexed(round.id, row: database.lastInsertedRow)
            inserted.insert(round.id)
        }
        return inserted
    }

    func stored(_ id: [UInt8]) throws(SkillbusError) -> StoredRound? {
        var stored: StoredRound?
        _ = try index.row(of: id) { seq throws(SkillbusError) in
            try database.rows(JournalSchema.select, [.integer(seq), .utf8(id)]) { row in
                stored = StoredRound(
                    body: row.bytes(0), state: row.text(1), idempotent: row.int(2) != 0,
                    document: row.isNull(3) ? nil : row.bytes(3))
            }
            return stored != nil
        }
        return stored
    }

    func rerun(_ id: [UInt8], nowMs: Int64) throws(SkillbusError) {
        guard let seq = try row(of: id) else { return }
        try database.run(JournalSchema.rerun, [.integer(nowMs), .integer(seq), .utf8(id)])
    }

    func finish(_ rounds: [FinishedRow], nowMs: Int64) throws(SkillbusError) {
        for round in rounds {
            let updated = try index.row(of: round.id) { seq throws(SkillbusError) in
                try database.run(
                    JournalSchema.finish,
                    [
                        .utf8(round.document), .integer(nowMs), .int(round.document.count), .integer(seq),
                        .utf8(round.id),
                    ])
                return database.changes == 1
            }
            guard updated == nil else { continue }
            try database.run(
                JournalSchema.insertFinished,
                [
                    .utf8(round.id), .utf8(round.body), .utf8(round.document), .integer(nowMs),
                    .int(round.document.count),
                ])
            indexed(round.id, row: database.lastInsertedRow)
        }
    }

    func bytes(of id: [UInt8]) throws(SkillbusError) -> Int? {
        var bytes: Int?
        _ = try index.row(of: id) { seq throws(SkillbusError) in
            bytes = try database.integer(JournalSchema.bytesOf, [.integer(seq), .utf8(id)])
            return bytes != nil
        }
        return bytes
    }

    func delete(_ id: [UInt8]) throws(SkillbusError) {
        guard let seq = try row(of: id) else { return }
        try database.run(JournalSchema.delete, [.integer(seq), .utf8(id)])
        unindexed(id, row: seq)
    }

    func upsertMember(_ row: SessionMembership) throws(SkillbusError) {
        try database.run(
            JournalSchema.upsertMember,
            [.utf8(row.session), .text(row.agent), .text(row.role), .integer(row.firstMs), .integer(row.lastMs)])
    }

    func deleteSession(_ session: [UInt8]) throws(SkillbusError) {
        try database.run(JournalSchema.deleteSession, [.utf8(session)])
    }

    func interruptRunning(nowMs: Int64) throws(SkillbusError) -> Int {
        try database.run(JournalSchema.interruptRunning, [.integer(nowMs)])
        return database.changes
    }

    func totalBytes() throws(SkillbusError) -> Int { try database.integer(JournalSchema.totalBytes) ?? 0 }

    func roundIDs() throws(SkillbusError) -> [[UInt8]] {
        var ids: [[UInt8]] = []
        try database.rows(JournalSchema.ids) { row in ids.append(row.bytes(0)) }
        return ids
    }

    func sessions(idleBeforeMs: Int64) throws(SkillbusError) -> [SessionMembership] {
        try database.run(JournalSchema.deleteIdleSessions, [.integer(idleBeforeMs)])
        var rows: [SessionMembership] = []
        try database.rows(JournalSchema.members) { row in
            rows.append(
                SessionMembership(
                    session: row.bytes(0), agent: row.text(1), role: row.text(2), firstMs: row.int64(3),
                    lastMs: row.int64(4)))
        }
        return rows
    }

    func oldestEnded(limit: Int) throws(SkillbusError) -> [JournalRetention.Row] {
        var oldest: [JournalRetention.Row] = []
        try database.rows(JournalSchema.oldestEnded, [.int(limit)]) { row in
            oldest.append(.init(id: row.text(0), bytes: row.int(1), finished: row.int64(2)))
        }
        return oldest
    }

    var framesInLog: Int { database.framesInLog }

    var waitsForDatabase: Bool { false }
    var isConnected: Bool { true }
    func reconnect() throws(SkillbusError) {}

    func checkpoint() throws(SkillbusError) { try database.checkpoint() }

    func close() {
        database.close()
        lock.release()
    }
}
