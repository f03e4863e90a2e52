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
/// one transaction (group commit: under load, one commit carries many rounds), at once when an accept waits for
/// it, else once the first entry lingered `Limits.lingerMs`; then it answers the batch's `accept`s; only then
/// does it checkpoint the write-ahead log or take a step of the retention sweep (`JournalUpkeep`).
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
        /// How long entries nothing waits for (finishes, forgets, session rows) may wait for more before their
        /// commit: one commit then carries the rounds of a few milliseconds, where every commit rewrites the
        /// table's last page and an index page or two however few rows it adds.
        var lingerMs = 2
    }

    private struct Inbox {
        var entries: [JournalEntry] = []
        /// Whether something handed over waits for its commit: an accept (its round waits to start), or any entry
        /// when the coordinator's answers wait for the commit of their documents (`Hooks.onCommitted`).
        var urgent = false
        /// When the first of `entries` was handed over (uptime nanoseconds).
        var since: UInt64 = 0
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
    /// Rounds (accepted or finished) that wait for a database that went away: the journal is behind by that many
    /// (a coordinator group's journal only; PROTOCOL §3.5.9).
    let backlog = Atomic<Int>(0)
    /// Set once a transaction found that another coordinator leads the group (fencing): why.
    let fenced = Mutex<SkillbusError?>(nil)
    let hooks: Hooks
    /// The session roster as the open read it, oldest `lastMs` first, until the coordinator takes it.
    private let sessionsAtOpen = Mutex<[SessionMembership]>([])
    /// The round ids the open found, until the coordinator takes them; then the ids of rows the retention sweep
    /// deleted since the coordinator last took them (its `JournalIDs`).
    private let idsAtOpen = Mutex<[[UInt8]]>([])
    private let deletedIDs = Mutex<[[UInt8]]>([])
    private let inbox = Mutex(Inbox())
    private let wakeup = DispatchSemaphore(value: 0)
    private let exited = DispatchSemaphore(value: 0)
    let logger: Logger

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

    /// The journal of a coordinator group, in PostgreSQL, written by the leader of `epoch` only (every
    /// transaction checks it: `PostgresJournalStore.transaction`).
    convenience init(
        group: CoordinatorGroupSettings, epoch: Int, limits: Limits, logger: Logger, hooks: Hooks = Hooks(),
        onAnswers: @escaping @Sendable ([JournalAnswer]) -> Void
    ) throws(SkillbusError) {
        try self.init(
            location: "group '\(group.group)' at \(PostgresConnection.withoutPassword(group.database))", limits: limits,
            logger: logger, hooks: hooks,
            open: { () throws(SkillbusError) in try PostgresJournalStore(settings: group, epoch: epoch) },
            onAnswers: onAnswers)
    }

    /// What else the journal's thread tells the coordinator, besides the answers to accepts.
    struct Hooks: Sendable {
        /// After each commit: the rounds whose documents it wrote (for `answerAfterCommit`).
        var onCommitted: (@Sendable ([[UInt8]]) -> Void)? = nil
        /// A transaction found another coordinator leading the group: this one must stop (once).
        var onFenced: (@Sendable (SkillbusError) -> Void)? = nil
        /// The backlog of a journal waiting for its database changed.
        var onBacklog: (@Sendable () -> Void)? = nil
    }

    /// Opens the store `open` makes, on the journal's thread, then reads what an open finds.
    init(
        location: String, limits: Limits, logger: Logger, hooks: Hooks = Hooks(),
        open: @escaping @Sendable () throws(SkillbusError) -> any JournalStore,
        onAnswers: @escaping @Sendable ([JournalAnswer]) -> Void
    ) throws(SkillbusError) {
        self.location = location
        self.limits = limits
        self.logger = logger
        self.hooks = hooks
        let opened = DispatchSemaphore(value: 0)
        let outcome = Mutex<SkillbusError?>(nil)
        let thread = Thread { [self] in
            // When both want a core, the bus thread goes first: this one commits in batches, and a batch that
            // waits a little only grows (on Linux niceness is per thread; 0 names the calling one).
            _ = setpriority(__priority_which_t(PRIO_PROCESS.rawValue), 0, Self.niceness)
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

    /// The round ids the journal held when it opened (once; then empty).
    func takeIDsAtOpen() -> [[UInt8]] {
        idsAtOpen.withLock { ids in
            defer { ids = [] }
            return ids
        }
    }

    /// The ids of rounds the retention sweep deleted since the last call.
    func takeDeletedIDs() -> [[UInt8]] {
        deletedIDs.withLock { ids in
            defer { ids = [] }
            return ids
        }
    }

    /// Hands entries to the thread. Never blocks on the disk.
    func submit(_ entries: [JournalEntry]) {
        guard !entries.isEmpty else { return }
        let urgent =
            hooks.onCommitted != nil
            || entries.contains { entry in
                if case .accept = entry { true } else { false }
            }
        let wake = inbox.withLock { box -> Bool in
            // A thread that has entries already is awake or lingers with a deadline: it needs no wake-up for more,
            // only for the first ones and for the first urgent one.
            let wake = box.entries.isEmpty || (urgent && !box.urgent)
            if box.entries.isEmpty { box.since = DispatchTime.now().uptimeNanoseconds }
            box.entries += entries
            box.urgent = box.urgent || urgent
            return wake
        }
        if wake { wakeup.signal() }
    }

    /// Commits what was handed over, closes the database and waits for the thread (at the coordinator's stop).
    /// With `within`, waits that long at most (a coordinator that lost the lead: a commit may hang on a cut
    /// network); returns whether the thread ended.
    @discardableResult
    func close(within: DispatchTimeInterval? = nil) -> Bool {
        let running = inbox.withLock { box -> Bool in
            box.stopping = true
            return !box.exited
        }
        guard running else { return true }
        wakeup.signal()
        if let within {
            guard exited.wait(timeout: .now() + within) == .success else { return false }
        } else {
            exited.wait()
        }
        exited.signal()
        return true
    }

    // MARK: - On the thread

    /// What an open finds: rounds the last coordinator left running are interrupted; the bytes held; the roster.
    private func recover(_ store: any JournalStore) throws(SkillbusError) {
        do {
            // One transaction: in a group, fenced like every other (a coordinator that lost the lead meanwhile
            // interrupts nothing of its successor's).
            try store.transaction { () throws(SkillbusError) in
                let interrupted = try store.interruptRunning(nowMs: Self.nowMs())
                interruptedAtOpen.store(interrupted, ordering: .relaxed)
                storedBytes.store(try store.totalBytes(), ordering: .relaxed)
                let sessions = try store.sessions(idleBeforeMs: Self.nowMs() - Int64(limits.sessionRetentionMs))
                sessionsAtOpen.withLock { $0 = sessions }
                let ids = try store.roundIDs()
                idsAtOpen.withLock { $0 = ids }
            }
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
        // What waits for a database that went away (a group's journal only), in the order it was handed over.
        var waiting: [JournalEntry] = []
        while true {
            let (entries, stopping, lingering) = inbox.withLock { box -> ([JournalEntry], Bool, UInt64?) in
                let until = box.since + UInt64(limits.lingerMs) * 1_000_000
                if !box.entries.isEmpty, !box.urgent, !box.stopping, DispatchTime.now().uptimeNanoseconds < until {
                    return ([], false, until)
                }
                defer { (box.entries, box.urgent) = ([], false) }
                return (box.entries, box.stopping, nil)
            }
            if fenced.withLock({ $0 }) != nil {
                if stopping { return }
                _ = wakeup.wait(timeout: .now() + .milliseconds(100))
                continue
            }
            if !waiting.isEmpty {
                if !catchUp(&waiting, entries, store, onAnswers) {
                    if stopping { return }
                    _ = wakeup.wait(timeout: .now() + .milliseconds(Self.reconnectMs))
                    continue
                }
            } else if !entries.isEmpty {
                let answers = commit(entries, store, waiting: &waiting)
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
                _ = wakeup.wait(timeout: DispatchTime(uptimeNanoseconds: min(until, lingering ?? until)))
            }
        }
    }

    /// The journal thread's niceness: above the bus thread's 0.
    static let niceness: Int32 = 5

    /// How often a journal that waits for its database tries to reach it again.
    static let reconnectMs = 250
    /// Most rounds a journal waiting for its database holds; past them, new rounds are refused.
    static let backlogLimit = 100_000

    /// With entries waiting for the database: reconnects and commits them with `entries` (in order) in one
    /// transaction; returns false when the database is still away (`entries` then wait too, their accepts
    /// answered as `commit` answers them while the database is away).
    private func catchUp(
        _ waiting: inout [JournalEntry], _ entries: [JournalEntry], _ store: any JournalStore,
        _ onAnswers: @Sendable ([JournalAnswer]) -> Void
    ) -> Bool {
        if !store.isConnected {
            do {
                try store.reconnect()
                logger.info("the journal reached its database again; writing the \(waiting.count) entries that waited")
            } catch {
                waiting += entries
                let answers = answersWhileAway(entries)
                if !answers.isEmpty { onAnswers(answers) }
                noteBacklog(waiting)
                return false
            }
        }
        let held = waiting
        waiting = []
        // What waited was answered already: only the new entries' accepts are answered now.
        let answers = commit(held + entries, store, waiting: &waiting, answering: held.count)
        if !answers.isEmpty { onAnswers(answers) }
        noteBacklog(waiting)
        return waiting.isEmpty
    }

    /// A journal that waits for its database serves from memory: a new round runs (it is journaled when the
    /// database is back), unless too many wait already.
    func answersWhileAway(_ entries: [JournalEntry]) -> [JournalAnswer] {
        let full = backlog.load(ordering: .relaxed) >= Self.backlogLimit
        return entries.compactMap { entry in
            guard case .accept(let id, _, _) = entry else { return nil }
            guard !full else {
                return .failed(
                    roundID: id,
                    SkillbusError(
                        .storageUnavailable,
                        "the journal's database is away and \(Self.backlogLimit) rounds wait for it already"))
            }
            return .accepted(roundID: id)
        }
    }

    func noteBacklog(_ waiting: [JournalEntry]) {
        let rounds = waiting.reduce(0) { count, entry in
            switch entry {
            case .accept, .finish: count + 1
            default: count
            }
        }
        if backlog.exchange(rounds, ordering: .relaxed) != rounds { hooks.onBacklog?() }
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
            deletedIDs.withLock { $0 += drop.map { Array($0.id.utf8) } }
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
