import Dispatch
import Foundation
import Synchronization

/// The coordinator's durable journal of rounds (`journal.sqlite` in its data directory, SQLite in WAL mode).
///
/// A round is recorded as running when it is accepted, before any of it runs, and again with its document
/// when it ends; the document stays for the retention window, within a limit of bytes on disk. At open, every
/// round still recorded as running did not finish under the last coordinator: it becomes `interrupted`.
///
/// Threads: the database belongs to the journal's own thread ("skillbus-journal"). The coordinator's thread
/// only hands entries over, once per pass of its loop (`submit`, a short lock), and is woken with the answers
/// (`onAnswers`): it never waits for the disk. The thread commits everything handed over since its last commit in
/// one transaction, at once (group commit: under load, one commit carries many rounds), then answers the
/// batch's `accept`s; only then does it checkpoint the write-ahead log or take a step of the retention sweep
/// (`JournalUpkeep`).
///
/// Durability: an `accept` is answered only after its commit, so a round that ran is journaled as accepted; a
/// `finish` is committed in the next batch after the round was answered. SQLite runs with
/// `synchronous=NORMAL`: a commit survives the coordinator being killed (kill -9), not necessarily a power
/// loss or an operating-system crash that follows it closely.
final class RoundJournal: Sendable {
    struct Limits: Sendable {
        var bytes = 256 << 20
        var retentionMs = 600_000
        /// How often a sweep of ended rounds past the window or over the byte limit starts (in steps).
        var sweepMs = 1000
        /// Sessions nobody served for this long are not read back at open (the coordinator's
        /// `sessionRetentionMs`; while it runs, its roster forgets them itself).
        var sessionRetentionMs = 30 * 86_400_000
    }

    private struct Inbox {
        var entries: [JournalEntry] = []
        var stopping = false
        var exited = false
    }

    /// SQLite's page cache for the journal, in KiB.
    static let cacheKiB = 16384

    let directory: String
    let limits: Limits
    /// Bytes the journal holds now (body and document of every row), as the thread last counted.
    let storedBytes = Atomic<Int>(0)
    /// Rounds the last open found running, now `interrupted`.
    let interruptedAtOpen = Atomic<Int>(0)
    /// The session roster as the open read it, oldest `lastMs` first, until the coordinator takes it.
    private let sessionsAtOpen = Mutex<[SessionMembership]>([])
    private let inbox = Mutex(Inbox())
    private let wakeup = DispatchSemaphore(value: 0)
    private let exited = DispatchSemaphore(value: 0)
    private let logger: Logger

    /// Opens (creating when missing) the journal in `directory` and starts its thread; blocks the calling thread
    /// until the database is open, so call it only from a plain thread (the coordinator's, at start).
    /// `onAnswers` runs on the journal's thread after each commit that answered an `accept`.
    init(
        directory: String, limits: Limits, logger: Logger,
        onAnswers: @escaping @Sendable ([JournalAnswer]) -> Void
    ) throws(SkillbusError) {
        self.directory = directory
        self.limits = limits
        self.logger = logger
        let opened = DispatchSemaphore(value: 0)
        let outcome = Mutex<SkillbusError?>(nil)
        let thread = Thread { [self] in
            let database: SQLiteDatabase
            let lock: DirectoryLock
            do throws(SkillbusError) {
                (lock, database) = try open()
            } catch {
                outcome.withLock { $0 = error }
                opened.signal()
                exited.signal()
                return
            }
            opened.signal()
            serve(database, onAnswers)
            database.close()
            lock.release()
            inbox.withLock { $0.exited = true }
            exited.signal()
        }
        thread.name = "skillbus-journal"
        thread.start()
        opened.wait()
        if let error = outcome.withLock({ $0 }) { throw error }
    }

    /// The session roster the journal held when it opened (once; then empty).
    func takeSessionsAtOpen() -> [SessionMembership] {
        sessionsAtOpen.withLock { rows in
            defer { rows = [] }
            return rows
        }
    }

    /// Hands entries to the thread. Never blocks on the disk.
    func submit(_ entries: [JournalEntry]) {
        guard !entries.isEmpty else { return }
        inbox.withLock { $0.entries += entries }
        wakeup.signal()
    }

    /// Commits what was handed over, closes the database and waits for the thread (at the coordinator's stop).
    func close() {
        let running = inbox.withLock { box -> Bool in
            box.stopping = true
            return !box.exited
        }
        guard running else { return }
        wakeup.signal()
        exited.wait()
        exited.signal()
    }

    // MARK: - On the thread

    private func open() throws(SkillbusError) -> (DirectoryLock, SQLiteDatabase) {
        do {
            try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        } catch {
            throw SkillbusError(
                .storageUnavailable, "cannot create the coordinator's data directory \(directory): "
                    + error.localizedDescription, details: ["directory": .string(directory)])
        }
        let lock = try DirectoryLock(directory: directory, agent: "coordinator")
        do {
            let path = (directory as NSString).appendingPathComponent(JournalSchema.databaseName)
            let database = try SQLiteDatabase.open(path: path, migrations: JournalSchema.migrations)
            // The id index and the last pages of the table stay in memory (SQLite's default keeps 2 MiB).
            try database.execute("PRAGMA cache_size=-\(Self.cacheKiB)")
            database.checkpointWhenAsked()
            try database.run(JournalSchema.interruptRunning, [.integer(Self.nowMs())])
            interruptedAtOpen.store(database.changes, ordering: .relaxed)
            storedBytes.store(try database.integer(JournalSchema.totalBytes) ?? 0, ordering: .relaxed)
            let sessions = try readSessions(database)
            sessionsAtOpen.withLock { $0 = sessions }
            return (lock, database)
        } catch {
            lock.release()
            throw error
        }
    }

    private func serve(_ database: SQLiteDatabase, _ onAnswers: @Sendable ([JournalAnswer]) -> Void) {
        var upkeep = JournalUpkeep(
            sweepEveryNanos: UInt64(limits.sweepMs) * 1_000_000, now: DispatchTime.now().uptimeNanoseconds)
        // A checkpoint that fails is tried again after every commit: its warning is logged once until one succeeds.
        var checkpointFailing = false
        while true {
            let (entries, stopping) = inbox.withLock { box in
                defer { box.entries = [] }
                return (box.entries, box.stopping)
            }
            if !entries.isEmpty {
                let answers = commit(entries, database)
                if !answers.isEmpty { onAnswers(answers) }
            }
            // The rest waits until the rounds of this commit were answered.
            if upkeep.checkpointDue(framesInLog: database.framesInLog) {
                checkpointFailing = !checkpoint(database, logging: !checkpointFailing)
            }
            let now = DispatchTime.now().uptimeNanoseconds
            if upkeep.sweepStepDue(now: now) {
                upkeep.stepped(deleted: sweepStep(database, rows: upkeep.rowsPerStep), now: now)
            }
            if stopping && entries.isEmpty { return }
            if entries.isEmpty, let until = upkeep.sleepUntil {
                _ = wakeup.wait(timeout: DispatchTime(uptimeNanoseconds: until))
            }
        }
    }

    /// Writes one batch in one transaction and answers its `accept`s; when the transaction fails, every
    /// `accept` of it is answered `failed` (those rounds do not run) and its other entries are lost.
    func commit(_ entries: [JournalEntry], _ database: SQLiteDatabase) -> [JournalAnswer] {
        let nowMs = Self.nowMs()
        var added = 0
        do {
            let answers = try database.transaction { () throws(SkillbusError) -> [JournalAnswer] in
                var answers: [JournalAnswer] = []
                for entry in entries {
                    switch entry {
                    case .accept(let id, let body, let idempotent):
                        let answer = try accept(id, body, idempotent: idempotent, nowMs: nowMs, database, &added)
                        answers.append(answer)
                    case .finish(let id, let document):
                        try database.run(
                            JournalSchema.finish,
                            [.utf8(document), .integer(nowMs), .int(document.count), .utf8(id)])
                        added += document.count
                    case .forget(let id):
                        added -= try database.integer(JournalSchema.bytesOf, [.utf8(id)]) ?? 0
                        try database.run(JournalSchema.delete, [.utf8(id)])
                    case .member(let row):
                        try database.run(
                            JournalSchema.upsertMember,
                            [.utf8(row.session), .text(row.agent), .text(row.role), .integer(row.firstMs),
                             .integer(row.lastMs)])
                    case .forgetSession(let session):
                        try database.run(JournalSchema.deleteSession, [.utf8(session)])
                    }
                }
                return answers
            }
            storedBytes.add(added, ordering: .relaxed)
            return answers
        } catch {
            logger.error("the journal could not commit \(entries.count) entries: \(error.message)")
            return entries.compactMap { entry in
                guard case .accept(let id, _, _) = entry else { return nil }
                return .failed(roundID: id, error)
            }
        }
    }

    private func accept(
        _ id: [UInt8], _ body: [UInt8], idempotent: Bool, nowMs: Int64, _ database: SQLiteDatabase, _ added: inout Int
    ) throws(SkillbusError) -> JournalAnswer {
        // Most rounds are new: one statement for them, and a read only for an id the journal holds.
        try database.run(
            JournalSchema.insert, [.utf8(id), .utf8(body), .int(idempotent ? 1 : 0), .integer(nowMs), .int(body.count)])
        if database.changes == 1 {
            added += body.count
            return .accepted(roundID: id)
        }
        var stored: (body: [UInt8], state: String, idempotent: Bool, document: [UInt8]?)?
        try database.rows(JournalSchema.select, [.utf8(id)]) { row in
            stored = (row.bytes(0), row.text(1), row.int(2) != 0, row.isNull(3) ? nil : row.bytes(3))
        }
        guard let stored else {
            throw SkillbusError(
                .internalError, "round '\(String(decoding: id, as: UTF8.self))' is neither new nor in the journal")
        }
        guard stored.body == body else { return .conflict(roundID: id) }
        switch stored.state {
        case "done":
            return .stored(roundID: id, document: stored.document ?? [])
        case "interrupted" where stored.idempotent:
            try database.run(JournalSchema.rerun, [.integer(nowMs), .utf8(id)])
            return .accepted(roundID: id)
        case "interrupted":
            return .interrupted(roundID: id)
        default:
            // Running under this coordinator: the state machine holds it, so this is a second accept by mistake.
            return .failed(
                roundID: id, SkillbusError(.internalError, "round '\(String(decoding: id, as: UTF8.self))' is journaled as running"))
        }
    }

    /// The session roster, without the sessions idle past the retention window (deleted first).
    private func readSessions(_ database: SQLiteDatabase) throws(SkillbusError) -> [SessionMembership] {
        try database.run(JournalSchema.deleteIdleSessions, [.integer(Self.nowMs() - Int64(limits.sessionRetentionMs))])
        var rows: [SessionMembership] = []
        try database.rows(JournalSchema.members) { row in
            rows.append(
                SessionMembership(
                    session: row.bytes(0), agent: row.text(1), role: row.text(2), firstMs: row.int64(3),
                    lastMs: row.int64(4)))
        }
        return rows
    }

    /// One step of the retention sweep: deletes at most `rows` of the ended rounds past the window or over the byte
    /// limit, oldest first, in one transaction. Returns how many it deleted.
    private func sweepStep(_ database: SQLiteDatabase, rows: Int) -> Int {
        let rule = JournalRetention(limitBytes: limits.bytes, retentionMs: Int64(limits.retentionMs))
        do {
            var oldest: [JournalRetention.Row] = []
            try database.rows(JournalSchema.oldestEnded, [.int(rows)]) { row in
                oldest.append(.init(id: row.text(0), bytes: row.int(1), finished: row.int64(2)))
            }
            let total = storedBytes.load(ordering: .relaxed)
            let (drop, after) = rule.expired(oldest, totalBytes: total, nowMs: Self.nowMs())
            guard !drop.isEmpty else { return 0 }
            try database.transaction { () throws(SkillbusError) in
                for row in drop { try database.run(JournalSchema.delete, [.text(row.id)]) }
            }
            storedBytes.add(after - total, ordering: .relaxed)
            return drop.count
        } catch {
            logger.warning("the journal could not delete old rounds: \(error.message)")
            return 0
        }
    }

    /// Copies the write-ahead log into the database file, after the commit's answers went out rather than inside
    /// the commit. A failure only leaves the log longer (commits still go to it); returns whether it succeeded.
    private func checkpoint(_ database: SQLiteDatabase, logging: Bool) -> Bool {
        do {
            try database.checkpoint()
            return true
        } catch {
            if logging { logger.warning("the journal could not checkpoint its write-ahead log: \(error.message)") }
            return false
        }
    }

    static func nowMs() -> Int64 { SQLiteDatabase.milliseconds(Date()) }
}

/// Where the journal's answers wait for the coordinator's thread, which takes them when the journal wakes it.
final class JournalMailbox: Sendable {
    private let answers = Mutex<[JournalAnswer]>([])

    func post(_ batch: [JournalAnswer]) { answers.withLock { $0 += batch } }

    func take() -> [JournalAnswer] {
        answers.withLock { box in
            defer { box = [] }
            return box
        }
    }
}
