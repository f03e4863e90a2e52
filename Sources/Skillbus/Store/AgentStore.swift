import Dispatch
import Foundation
import Synchronization

/// One agent's own context, persisted: its sessions with their message history, and memory (key → JSON) for the
/// agent and for each session, in one SQLite database in the agent's data directory.
///
/// Files in `directory`: `context.sqlite` (with SQLite's `-wal` and `-shm` beside it while open) and
/// `store.lock`, which the open store holds with `flock` so that nobody else opens the directory.
///
/// Memory and the session summaries are held in memory and read from there at once; message histories stay on
/// disk and `history` reads them on the store's thread. Writes (`append`, `setMemory`, `deleteMemory`) change
/// the in-memory state at once, so every read sees them, and queue the change; the store's thread commits all
/// queued changes in one transaction at most every `flushIntervalMs` (300 ms by default), and at `flush()` and
/// `close()`.
///
/// Durability (docs/ARCHITECTURE.md states it in full): unless commits fail, a write that returned is committed
/// within one flush interval, or by the time `flush()` returns; one commit holds every write queued before it.
/// A committed write survives the process being killed (kill -9, a crash): killing it loses at most the writes
/// of the last interval, those not yet committed. SQLite runs in WAL mode with `synchronous=NORMAL`, so a power
/// loss or operating-system crash may also lose the last commits before it, but never corrupts the database.
///
/// When a commit fails (disk full, read-only, I/O error) the changes stay queued and are retried every interval
/// (at least 100 ms); `storageProblem` says why. While a problem stands, writes are refused with
/// `storage_unavailable` and change nothing, so a caller never believes something is kept that may not be;
/// reads keep working. The first retry (or `flush()`) that commits clears the problem, and writes are accepted
/// again. The queued changes live only in memory until then: a process that stops with the problem still
/// standing loses them.
///
/// Threads: the database connection belongs to the store's own thread ("skillbus-store-<agent>") and is used
/// nowhere else. Reads and writes take a short in-memory lock and never wait for the disk; `history`, `flush`
/// and `close` await the store's thread. Nothing here blocks Swift's cooperative pool except the synchronous
/// `init`, which is for synchronous callers only.
public final class AgentStore: Sendable {
    public struct Options: Sendable {
        public var flushIntervalMs = 300
        /// The largest serialized JSON of one memory value (and of one message's content).
        public var maxValueBytes = 1 << 20
        public var maxKeyBytes = 1024
        public var maxSessionIDBytes = 128
        public init() {}
    }

    private let thread: StoreThread

    private init(thread: StoreThread) { self.thread = thread }

    /// Opens (creating when missing) the store in `directory` for agent `agent`: takes the directory's lock
    /// (a lock file with flock, held while open; a second opener — another process or the same one — is refused
    /// with `store_refused` naming the directory and, when readable, the pid and name of the holder), opens the
    /// database, checks it, migrates it, and loads the session summaries and all memory into memory.
    ///
    /// A database written by a newer Skillbus, one that fails SQLite's integrity check, or a file that is no
    /// SQLite database is refused with `store_refused` and left exactly as it is. Failing to create or open
    /// the files is `storage_unavailable`.
    public static func open(
        directory: String, agent: String, options: Options = Options()
    ) async throws(SkillbusError) -> AgentStore {
        let thread = StoreThread(directory: directory, agent: agent, options: options)
        let outcome: Result<Void, SkillbusError> = await withCheckedContinuation { continuation in
            thread.launch { continuation.resume(returning: $0) }
        }
        try outcome.get()
        return AgentStore(thread: thread)
    }

    /// The synchronous form of `open`, for synchronous callers: it blocks the calling thread until the store's
    /// thread has opened the store. Never call it on the cooperative pool; async code uses `open`.
    public convenience init(directory: String, agent: String, options: Options = Options()) throws(SkillbusError) {
        let thread = StoreThread(directory: directory, agent: agent, options: options)
        let opened = DispatchSemaphore(value: 0)
        let outcome = Mutex<Result<Void, SkillbusError>?>(nil)
        thread.launch { result in
            outcome.withLock { $0 = result }
            opened.signal()
        }
        opened.wait()
        try outcome.withLock { $0 ?? .failure(SkillbusError(.internalError, "the store thread reported nothing")) }
            .get()
        self.init(thread: thread)
    }

    /// A store that was never closed asks its thread to commit and close; this does not wait for it.
    deinit { thread.stop() }

    public var directory: String { thread.directory }
    public var databasePath: String { thread.databasePath }

    // MARK: - Sessions

    /// Every session's summary, the most recently updated first.
    public func sessions() -> [SessionSummary] {
        thread.contents.withLock { $0.sortedSessions }
    }

    public func session(_ id: String) -> SessionSummary? {
        thread.contents.withLock { $0.sessions[id]?.summary }
    }

    public var sessionCount: Int {
        thread.contents.withLock { $0.sessions.count }
    }

    /// The session's messages in order, committed or still queued; nil for a session the store does not know.
    public func history(_ session: String) async throws(SkillbusError) -> [SessionMessage]? {
        guard self.session(session) != nil else { return nil }
        let thread = thread
        return try await thread.perform { database throws(SkillbusError) in
            // Commits run on this same thread, so nothing moves from the queue to the table meanwhile.
            let committed = try AgentStoreSchema.messages(session, in: database)
            return committed + thread.contents.withLock { $0.pendingMessages(session) }
        }
    }

    /// Appends a message to `session` (created on first use), counting a new turn when `round` is new for it
    /// ("" is no round and counts none). The title is the first user message's text, or until there is one,
    /// the first skill called (`content` a string, or an object's "skill"), cut to 80 characters.
    public func append(
        _ role: SessionMessage.Role, _ content: JSONValue, session: String, round: String
    ) throws(SkillbusError) {
        try checkSession(session)
        let serialized = try checkedSize(content, "the content of a \(role.rawValue) message")
        let time = SQLiteDatabase.milliseconds(Date())
        try write { contents in
            _ = contents.append(role, content, serialized: serialized, session: session, round: round, time: time)
        }
    }

    // MARK: - Memory

    public func memory(_ key: String, scope: MemoryScope) -> JSONValue? {
        thread.contents.withLock { $0.memory[scope.column]?[key] }
    }

    public func setMemory(_ key: String, _ value: JSONValue, scope: MemoryScope) throws(SkillbusError) {
        try checkKey(key)
        try checkScope(scope)
        let serialized = try checkedSize(value, "the memory value of '\(key)'")
        try write { contents in contents.setMemory(key, value, serialized: serialized, scope: scope.column) }
    }

    /// Removes the entry; returns false (and changes nothing) when there was none.
    @discardableResult
    public func deleteMemory(_ key: String, scope: MemoryScope) throws(SkillbusError) -> Bool {
        try checkKey(key)
        try checkScope(scope)
        return try write { contents in contents.deleteMemory(key, scope: scope.column) }
    }

    /// The entries of `scope` whose keys begin with `prefix` (byte for byte), sorted by key.
    public func memory(prefix: String, scope: MemoryScope) -> [(key: String, value: JSONValue)] {
        thread.contents.withLock { $0.memory(prefix: prefix, scope: scope.column) }
    }

    // MARK: - Durability

    /// Why writes are failing now (disk full, read-only, I/O error), or nil when the last commit worked.
    public var storageProblem: SkillbusError? {
        thread.contents.withLock { $0.problem }
    }

    /// Commits everything pending now; throws `storage_unavailable` if the commit fails (the writes stay
    /// pending) or the store is closed.
    public func flush() async throws(SkillbusError) {
        let thread = thread
        try await thread.perform { database throws(SkillbusError) in try thread.commit(database).get() }
    }

    /// Final flush, then closes the database and releases the lock. Idempotent. Changes the final flush cannot
    /// commit are lost (and logged).
    public func close() async {
        await withCheckedContinuation { continuation in thread.stop { continuation.resume() } }
    }

    // MARK: - For tests

    /// Successful commits (transactions that wrote queued changes) since the store opened.
    var commitCount: Int { thread.commits.load(ordering: .relaxed) }

    /// Runs `body` with the database on the store's thread.
    func onStoreThread<T: Sendable>(
        _ body: @escaping @Sendable (SQLiteDatabase) throws(SkillbusError) -> T
    ) async throws(SkillbusError) -> T {
        try await thread.perform(body)
    }

    // MARK: - Writing and checking

    /// Applies `change` under the lock unless writes are refused, and schedules the next commit.
    private func write<T: Sendable>(_ change: (inout StoreContents) -> T) throws(SkillbusError) -> T {
        let now = DispatchTime.now().uptimeNanoseconds
        let interval = thread.intervalNanoseconds
        let (value, wake) = try thread.contents.withLock { contents throws(SkillbusError) -> (T, Bool) in
            if contents.closed { throw thread.closedError() }
            if let problem = contents.problem { throw refusal(problem) }
            let value = change(&contents)
            return (value, !contents.pending.isEmpty && contents.scheduleFlush(now: now, interval: interval))
        }
        if wake { thread.wake() }
        return value
    }

    private func refusal(_ problem: SkillbusError) -> SkillbusError {
        SkillbusError(
            .storageUnavailable,
            "agent \(thread.agent)'s store cannot commit, so this write was refused (reads still work, and writes "
                + "are accepted again once a retry commits): \(problem.message)",
            details: problem.details)
    }

    private func checkSession(_ id: String) throws(SkillbusError) {
        let bytes = id.utf8.count
        guard bytes == 0 || bytes > thread.options.maxSessionIDBytes else { return }
        throw SkillbusError(
            .invalidParameters,
            bytes == 0
                ? "the session id is empty"
                : "the session id is \(bytes) bytes long; the limit is \(thread.options.maxSessionIDBytes) bytes",
            details: [
                "session": .string(String(id.prefix(64))), "limit": .number(Double(thread.options.maxSessionIDBytes)),
            ])
    }

    private func checkScope(_ scope: MemoryScope) throws(SkillbusError) {
        if case .session(let id) = scope { try checkSession(id) }
    }

    private func checkKey(_ key: String) throws(SkillbusError) {
        let bytes = key.utf8.count
        guard bytes == 0 || bytes > thread.options.maxKeyBytes else { return }
        throw SkillbusError(
            .invalidParameters,
            bytes == 0
                ? "the memory key is empty"
                : "the memory key is \(bytes) bytes long; the limit is \(thread.options.maxKeyBytes) bytes (UTF-8)",
            details: ["key": .string(String(key.prefix(64))), "limit": .number(Double(thread.options.maxKeyBytes))])
    }

    /// The serialized value, or `invalid_parameters` when it is larger than `maxValueBytes`.
    private func checkedSize(_ value: JSONValue, _ what: String) throws(SkillbusError) -> [UInt8] {
        let serialized = value.serialized()
        let limit = thread.options.maxValueBytes
        guard serialized.count > limit else { return serialized }
        throw SkillbusError(
            .invalidParameters, "\(what) is \(serialized.count) bytes as JSON; the limit is \(limit) bytes",
            details: ["bytes": .number(Double(serialized.count)), "limit": .number(Double(limit))])
    }
}
