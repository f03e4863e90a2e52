import Dispatch
import Foundation
import Synchronization

/// The agent store's own thread, and everything it shares with callers.
///
/// The thread ("skillbus-store-<agent>") takes the directory's lock, opens the database, and from then on is the
/// only code that touches the connection: it runs the jobs handed to it (history reads, flushes, test hooks)
/// and commits the queued changes when the flush deadline passes. Callers never wait for it on Swift's
/// cooperative pool: async callers await a continuation the thread resumes; synchronous reads and writes only
/// take `contents`' lock, which is never held across I/O.
final class StoreThread: Sendable {
    /// A job for the thread: it receives the open database, or nil once the database is closed.
    typealias Job = @Sendable (SQLiteDatabase?) -> Void

    private struct Inbox {
        var jobs: [Job] = []
        var stopping = false
        var exited = false
        var exitWaiters: [@Sendable () -> Void] = []
    }

    let agent: String
    let directory: String
    let databasePath: String
    let options: AgentStore.Options
    /// The in-memory state; its lock is held only for quick in-memory work.
    let contents = Mutex(StoreContents())
    /// Successful commits since the store opened.
    let commits = Atomic<Int>(0)
    private let inbox = Mutex(Inbox())
    private let wakeup = DispatchSemaphore(value: 0)
    private let logger: Logger

    init(directory: String, agent: String, options: AgentStore.Options) {
        self.agent = agent
        self.directory = directory
        self.databasePath = (directory as NSString).appendingPathComponent(AgentStoreSchema.databaseName)
        self.options = options
        self.logger = Logger(label: "store.\(agent)")
    }

    /// The flush interval in nanoseconds (saturating: a huge interval means "only at flush and close").
    var intervalNanoseconds: UInt64 {
        let (value, overflow) = UInt64(max(0, options.flushIntervalMs)).multipliedReportingOverflow(by: 1_000_000)
        return overflow ? UInt64.max : value
    }

    /// How long after a failed commit the next try comes: the flush interval, but never less than 100 ms, so
    /// that a store told to commit at once does not spin on a full disk.
    var retryNanoseconds: UInt64 { max(intervalNanoseconds, 100_000_000) }

    // MARK: - Starting and stopping

    /// Starts the thread, which opens the store and reports the outcome to `started` (from the thread).
    func launch(started: @escaping @Sendable (Result<Void, SkillbusError>) -> Void) {
        let thread = Thread { [self] in
            let lock: DirectoryLock
            let database: SQLiteDatabase
            switch Result(catching: { () throws(SkillbusError) in try open() }) {
            case .success(let opened): (lock, database) = opened
            case .failure(let error):
                exit()
                started(.failure(error))
                return
            }
            started(.success(()))
            serve(database)
            if case .failure(let error) = commit(database) {
                let lost = contents.withLock { $0.pending.count }
                logger.error("closing with \(lost) changes that could not be committed and are lost: \(error.message)")
            }
            database.close()
            lock.release()
            exit()
        }
        thread.name = "skillbus-store-\(agent)"
        thread.start()
    }

    /// Asks the thread to commit what is pending, close the database and release the lock; `onExit` runs once
    /// it has (at once when it already has). Writes are refused from now on. Never blocks.
    func stop(onExit: (@Sendable () -> Void)? = nil) {
        contents.withLock { $0.closed = true }
        let exited = inbox.withLock { box -> Bool in
            if !box.exited {
                box.stopping = true
                if let onExit { box.exitWaiters.append(onExit) }
            }
            return box.exited
        }
        if exited { onExit?() } else { wakeup.signal() }
    }

    /// Hands `job` to the thread; once the thread has exited, runs it at once with nil. Never blocks.
    func submit(_ job: @escaping Job) {
        let accepted = inbox.withLock { box -> Bool in
            if !box.exited { box.jobs.append(job) }
            return !box.exited
        }
        if accepted { wakeup.signal() } else { job(nil) }
    }

    /// Runs `body` on the thread with the database and returns what it returned; awaits, never blocks.
    func perform<T: Sendable>(
        _ body: @escaping @Sendable (SQLiteDatabase) throws(SkillbusError) -> T
    ) async throws(SkillbusError) -> T {
        let closed = closedError()
        let outcome: Result<T, SkillbusError> = await withCheckedContinuation { continuation in
            submit { database in
                guard let database else { return continuation.resume(returning: .failure(closed)) }
                continuation.resume(returning: Result { () throws(SkillbusError) in try body(database) })
            }
        }
        return try outcome.get()
    }

    /// Wakes the thread so it notices a newly scheduled flush.
    func wake() { wakeup.signal() }

    func closedError() -> SkillbusError {
        SkillbusError(
            .storageUnavailable, "agent \(agent)'s store in \(directory) is closed",
            details: ["directory": .string(directory)])
    }

    // MARK: - On the thread

    private func open() throws(SkillbusError) -> (DirectoryLock, SQLiteDatabase) {
        do {
            try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        } catch {
            throw SkillbusError(
                .storageUnavailable, "cannot create the store directory \(directory): \(error.localizedDescription)",
                details: ["directory": .string(directory)])
        }
        let lock = try DirectoryLock(directory: directory, agent: agent)
        do {
            let database = try SQLiteDatabase.open(path: databasePath, migrations: AgentStoreSchema.migrations)
            let loaded = try AgentStoreSchema.load(database)
            contents.withLock { $0 = loaded }
            return (lock, database)
        } catch {
            lock.release()
            throw error
        }
    }

    /// Runs jobs and timed commits until asked to stop.
    private func serve(_ database: SQLiteDatabase) {
        while true {
            let (jobs, stopping) = inbox.withLock { box in
                defer { box.jobs = [] }
                return (box.jobs, box.stopping)
            }
            for job in jobs { job(database) }
            if stopping { return }
            let deadline = contents.withLock { $0.flushDeadline }
            if let deadline, deadline <= DispatchTime.now().uptimeNanoseconds {
                _ = commit(database)
            } else if jobs.isEmpty {
                _ = wakeup.wait(timeout: deadline.map { DispatchTime(uptimeNanoseconds: $0) } ?? .distantFuture)
            }
        }
    }

    /// Commits everything pending in one transaction. On failure the changes stay pending, the problem is
    /// recorded and a retry is scheduled one interval later.
    func commit(_ database: SQLiteDatabase) -> Result<Void, SkillbusError> {
        let batch = contents.withLock { contents -> StoreBatch? in
            contents.flushDeadline = nil
            return contents.batch()
        }
        guard let batch else { return .success(()) }
        do {
            try database.transaction { () throws(SkillbusError) in try AgentStoreSchema.write(batch, to: database) }
        } catch {
            let now = DispatchTime.now().uptimeNanoseconds
            let first = contents.withLock { contents -> Bool in
                defer { contents.problem = error }
                contents.flushDeadline = nil
                _ = contents.scheduleFlush(now: now, interval: retryNanoseconds)
                return contents.problem == nil
            }
            if first { logger.warning("writes are refused until a commit works again: \(error.message)") }
            return .failure(error)
        }
        commits.add(1, ordering: .relaxed)
        let now = DispatchTime.now().uptimeNanoseconds
        let recovered = contents.withLock { contents -> Bool in
            let recovered = contents.committed(batch.changes.count)
            if !contents.pending.isEmpty { _ = contents.scheduleFlush(now: now, interval: intervalNanoseconds) }
            return recovered
        }
        if recovered { logger.info("commits work again; writes are accepted") }
        return .success(())
    }

    /// Marks the thread gone, then fails the jobs that came too late and resumes whoever awaits the exit.
    private func exit() {
        let (late, waiters) = inbox.withLock { box in
            box.exited = true
            defer {
                box.jobs = []
                box.exitWaiters = []
            }
            return (box.jobs, box.exitWaiters)
        }
        for job in late { job(nil) }
        for waiter in waiters { waiter() }
    }
}
