import Dispatch
import Foundation
import Synchronization

/// The coordinator's durable journal of rounds: `journal.sqlite` in its data directory (SQLite in WAL mode), or
/// a coordinator group's tables in PostgreSQL (`JournalStore`: the rules here, the statements there).
///
/// A round is recorded as running when it is accepted, before any of it runs, and again with its document
/// when it ends; the document stays for the retention window, within a limit of bytes on disk. At open, every
/// round still recorded as running did not finish under the last coordinator: it becomes `interrupted`.
///
/// Threads: the store belongs to the journal's own thread ("skillbus-journal"). The coordinator's thread
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

    /// Where the journal is, for messages: a directory, or a database and group.
    let location: String
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
    convenience init(
        directory: String, limits: Limits, logger: Logger,
        onAnswers: @escaping @Sendable ([JournalAnswer]) -> Void
    ) throws(SkillbusError) {
        try self.init(
            location: directory, limits: limits, logger: logger,
            open: { () throws(SkillbusError) in try SQLiteJournalStore(directory: directory) }, onAnswers: onAnswers)
    }

    /// The journal of a coordinator group, in PostgreSQL.
    convenience init(
        group: CoordinatorGroupSettings, limits: Limits, logger: Logger,
        onAnswers: @escaping @Sendable ([JournalAnswer]) -> Void
    ) throws(SkillbusError) {
        try self.init(
            location: "group '\(group.group)' at \(PostgresConnection.withoutPassword(group.database))", limits: limits,
            logger: logger, open: { () throws(SkillbusError) in try PostgresJournalStore(settings: group) },
            onAnswers: onAnswers)
    }

    /// Opens the store `open` makes, on the journal's thread, then reads what an open finds.
    init(
        location: String, limits: Limits, logger: Logger,
        open: @escaping @Sendable () throws(SkillbusError) -> any JournalStore,
        onAnswers: @escaping @Sendable ([JournalAnswer]) -> Void
    ) throws(SkillbusError) {
        self.location = location
        self.limits = limits
        self.logger = logger
        let opened = DispatchSemaphore(value: 0)
        let outcome = Mutex<SkillbusError?>(nil)
        let thread = Thread { [self] in
            let store: any JournalStore
            do throws(SkillbusError) {
                store = try open()
                try recover(store)
            } catch {
                outcome.withLock { $0 = error }
                opened.signal()
                exited.signal()
                return
            }
            opened.signal()
            serve(store, onAnswers)
            store.close()
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

    /// What an open finds: rounds the last coordinator left running are interrupted; the bytes held; the roster.
    private func recover(_ store: any JournalStore) throws(SkillbusError) {
        do {
            let interrupted = try store.interruptRunning(nowMs: Self.nowMs())
            interruptedAtOpen.store(interrupted, ordering: .relaxed)
            storedBytes.store(try store.totalBytes(), ordering: .relaxed)
            let sessions = try store.sessions(idleBeforeMs: Self.nowMs() - Int64(limits.sessionRetentionMs))
            sessionsAtOpen.withLock { $0 = sessions }
        } catch {
            store.close()
            throw error
        }
    }

    private func serve(_ store: any JournalStore, _ onAnswers: @Sendable ([JournalAnswer]) -> Void) {
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
                let answers = commit(entries, store)
                if !answers.isEmpty { onAnswers(answers) }
            }
            // The rest waits until the rounds of this commit were answered.
            if upkeep.checkpointDue(framesInLog: store.framesInLog) {
                checkpointFailing = !checkpoint(store, logging: !checkpointFailing)
            }
            let now = DispatchTime.now().uptimeNanoseconds
            if upkeep.sweepStepDue(now: now) {
                upkeep.stepped(deleted: sweepStep(store, rows: upkeep.rowsPerStep), now: now)
            }
            if stopping && entries.isEmpty { return }
            if entries.isEmpty, let until = upkeep.sleepUntil {
                _ = wakeup.wait(timeout: DispatchTime(uptimeNanoseconds: until))
            }
        }
    }

    /// Writes one batch in one transaction and answers its `accept`s; when the transaction fails, every
    /// `accept` of it is answered `failed` (those rounds do not run) and its other entries are lost.
    func commit(_ entries: [JournalEntry], _ store: any JournalStore) -> [JournalAnswer] {
        let nowMs = Self.nowMs()
        var added = 0
        do {
            let answers = try store.transaction { () throws(SkillbusError) -> [JournalAnswer] in
                var answers: [JournalAnswer] = []
                for entry in entries {
                    switch entry {
                    case .accept(let id, let body, let idempotent):
                        answers.append(try accept(id, body, idempotent: idempotent, nowMs: nowMs, store, &added))
                    case .finish(let id, let document):
                        try store.finish(id, document: document, nowMs: nowMs)
                        added += document.count
                    case .forget(let id):
                        added -= try store.bytes(of: id) ?? 0
                        try store.delete(id)
                    case .member(let row):
                        try store.upsertMember(row)
                    case .forgetSession(let session):
                        try store.deleteSession(session)
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
        _ id: [UInt8], _ body: [UInt8], idempotent: Bool, nowMs: Int64, _ store: any JournalStore, _ added: inout Int
    ) throws(SkillbusError) -> JournalAnswer {
        // Most rounds are new: one statement for them, and a read only for an id the journal holds.
        if try store.insertRunning(id, body: body, idempotent: idempotent, nowMs: nowMs) {
            added += body.count
            return .accepted(roundID: id)
        }
        guard let stored = try store.stored(id) else {
            throw SkillbusError(
                .internalError, "round '\(String(decoding: id, as: UTF8.self))' is neither new nor in the journal")
        }
        guard stored.body == body else { return .conflict(roundID: id) }
        switch stored.state {
        case "done":
            return .stored(roundID: id, document: stored.document ?? [])
        case "interrupted" where stored.idempotent:
            try store.rerun(id, nowMs: nowMs)
            return .accepted(roundID: id)
        case "interrupted":
            return .interrupted(roundID: id)
        default:
            // Running under this coordinator: the state machine holds it, so this is a second accept by mistake.
            return .failed(
                roundID: id, SkillbusError(.internalError, "round '\(String(decoding: id, as: UTF8.self))' is journaled as running"))
        }
    }

    /// One step of the retention sweep: deletes at most `rows` of the ended rounds past the window or over the byte
    /// limit, oldest first, in one transaction. Returns how many it deleted.
    private func sweepStep(_ store: any JournalStore, rows: Int) -> Int {
        let rule = JournalRetention(limitBytes: limits.bytes, retentionMs: Int64(limits.retentionMs))
        do {
            let oldest = try store.oldestEnded(limit: rows)
            let total = storedBytes.load(ordering: .relaxed)
            let (drop, after) = rule.expired(oldest, totalBytes: total, nowMs: Self.nowMs())
            guard !drop.isEmpty else { return 0 }
            try store.transaction { () throws(SkillbusError) in
                for row in drop { try store.delete(Array(row.id.utf8)) }
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
    private func checkpoint(_ store: any JournalStore, logging: Bool) -> Bool {
        do {
            try store.checkpoint()
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
