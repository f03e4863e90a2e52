import CSQLite
import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// One SQLite connection, in GRDB's shape but ours: `open` creates or opens the file, checks it, sets WAL and
/// migrates it; then typed statements (`run`, `rows`) that are prepared once and reused, and `transaction`,
/// which every write goes through.
///
/// Threads: a connection is not thread-safe and not `Sendable`. It is opened with `SQLITE_OPEN_NOMUTEX` and
/// used from the one thread that opened it, and only there: for an agent's store that is the store's own
/// thread (`StoreThread`), never Swift's cooperative pool.
///
/// Errors: anything SQLite reports is a `storage_unavailable` `SkillbusError` whose `details` carry
/// `sqlite_code` (the extended result code), `sqlite_error`, `statement` and `database`. A file this build must
/// not touch is refused with `store_refused` and left exactly as it was (see `open`).
final class SQLiteDatabase {
    let path: String
    private(set) var handle: OpaquePointer?
    private var statements: [String: SQLiteStatement] = [:]
    /// Frames in the write-ahead log as of the last commit, written by SQLite's WAL hook once
    /// `checkpointWhenAsked` turned it on; nil until then.
    private var logFrames: UnsafeMutablePointer<Int32>?

    /// Opens `path` (creating it when missing) and makes it ready, in an order that writes nothing to a file
    /// it is going to refuse:
    /// 1. a file that does not begin with SQLite's header is refused before SQLite sees it;
    /// 2. open, with a busy timeout and extended result codes;
    /// 3. `PRAGMA quick_check`: a corrupt file is refused;
    /// 4. the recorded migrations are compared with `migrations`: a newer or foreign schema is refused;
    /// 5. WAL journal mode and `synchronous=NORMAL` (switching a file to WAL rewrites its header, which is why
    ///    this comes after the checks);
    /// 6. the migrations not yet recorded run, each in its own transaction.
    static func open(
        path: String, migrations: [SQLiteMigration], busyTimeoutMs: Int32 = 5000
    ) throws(SkillbusError) -> SQLiteDatabase {
        try refuseForeignFile(path)
        let database = try SQLiteDatabase(path: path, busyTimeoutMs: busyTimeoutMs)
        do {
            try database.refusingUnreadable { () throws(SkillbusError) in
                try database.checkIntegrity()
                try database.checkSchema(migrations)
            }
            try database.useWriteAheadLog()
            try database.migrate(migrations)
        } catch {
            database.close()
            throw error
        }
        return database
    }

    private init(path: String, busyTimeoutMs: Int32) throws(SkillbusError) {
        self.path = path
        var connection: OpaquePointer?
        let flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX
        let code = sqlite3_open_v2(path, &connection, flags, nil)
        handle = connection
        guard code == SQLITE_OK else {
            let error = failure(code, "open the database", sql: "")
            close()
            throw error
        }
        sqlite3_extended_result_codes(connection, 1)
        sqlite3_busy_timeout(connection, busyTimeoutMs)
    }

    deinit { close() }

    /// Finalizes every cached statement and closes the connection. Idempotent.
    func close() {
        for statement in statements.values { statement.finalize() }
        statements = [:]
        if let handle {
            if logFrames != nil { sqlite3_wal_hook(handle, nil, nil) }
            sqlite3_close_v2(handle)
        }
        handle = nil
        logFrames?.deallocate()
        logFrames = nil
    }

    var isOpen: Bool { handle != nil }

    /// Rows the last statement inserted, changed or deleted.
    var changes: Int { isOpen ? Int(sqlite3_changes(handle)) : 0 }

    /// The rowid of the row the last successful INSERT added.
    var lastInsertedRow: Int64 { isOpen ? sqlite3_last_insert_rowid(handle) : 0 }

    // MARK: - Statements

    /// The prepared statement for `sql`, from the cache (prepared on first use).
    func statement(_ sql: String) throws(SkillbusError) -> SQLiteStatement {
        guard isOpen else { throw closedError(sql) }
        if let cached = statements[sql] { return cached }
        let statement = try SQLiteStatement(database: self, sql: sql)
        statements[sql] = statement
        return statement
    }

    /// Runs one statement with `arguments`, ignoring any rows.
    func run(_ sql: String, _ arguments: [SQLiteValue] = []) throws(SkillbusError) {
        try statement(sql).run(arguments)
    }

    /// Runs one statement with `arguments` and calls `each` for every row it returns.
    func rows(
        _ sql: String, _ arguments: [SQLiteValue] = [], _ each: (SQLiteRow) throws(SkillbusError) -> Void
    ) throws(SkillbusError) {
        try statement(sql).run(arguments, row: each)
    }

    /// The first column of the first row, as an integer (nil when there is no row).
    func integer(_ sql: String, _ arguments: [SQLiteValue] = []) throws(SkillbusError) -> Int? {
        var value: Int?
        try rows(sql, arguments) { row in if value == nil { value = row.int(0) } }
        return value
    }

    /// Runs a script of statements without caching them (migrations, pragmas).
    func execute(_ script: String) throws(SkillbusError) {
        guard isOpen else { throw closedError(script) }
        let code = sqlite3_exec(handle, script, nil, nil, nil)
        guard code == SQLITE_OK else { throw failure(code, "execute a statement", sql: script) }
    }

    // MARK: - Transactions

    var inTransaction: Bool { isOpen && sqlite3_get_autocommit(handle) == 0 }

    /// Runs `body` inside `BEGIN IMMEDIATE … COMMIT`; when `body` or the commit fails, rolls back and rethrows.
    func transaction<T>(_ body: () throws(SkillbusError) -> T) throws(SkillbusError) -> T {
        guard !inTransaction else {
            preconditionFailure("SQLiteDatabase.transaction: transactions do not nest (one writer, one thread)")
        }
        try run("BEGIN IMMEDIATE")
        do {
            let value = try body()
            try run("COMMIT")
            return value
        } catch {
            if inTransaction { try? run("ROLLBACK") }
            throw error
        }
    }

    // MARK: - Checkpoints

    /// Stops SQLite from copying the write-ahead log into the database file (and syncing both) inside the commit
    /// that fills it past 1,000 pages: the owner calls `checkpoint` when the log is long enough
    /// (`framesInLog`) and it has nothing more urgent to do. A commit is as durable either way (it is in the log).
    func checkpointWhenAsked() {
        guard let handle, logFrames == nil else { return }
        let frames = UnsafeMutablePointer<Int32>.allocate(capacity: 1)
        frames.initialize(to: 0)
        logFrames = frames
        // Registering a WAL hook replaces SQLite's own automatic checkpoint.
        sqlite3_wal_hook(
            handle,
            { context, _, _, count in
                context?.assumingMemoryBound(to: Int32.self).pointee = count
                return SQLITE_OK
            }, frames)
    }

    /// Pages in the write-ahead log after the last commit (0 until `checkpointWhenAsked`, and after `checkpoint`).
    var framesInLog: Int { Int(logFrames?.pointee ?? 0) }

    /// Copies the write-ahead log into the database file without waiting for anyone (a passive checkpoint), so
    /// that the next commit starts the log again from its beginning.
    func checkpoint() throws(SkillbusError) {
        let sql = "PRAGMA wal_checkpoint(PASSIVE)"
        guard isOpen else { throw closedError(sql) }
        let code = sqlite3_wal_checkpoint_v2(handle, nil, SQLITE_CHECKPOINT_PASSIVE, nil, nil)
        guard code == SQLITE_OK else { throw failure(code, "checkpoint the write-ahead log", sql: sql) }
        logFrames?.pointee = 0
    }

    // MARK: - Opening steps

    private static let header = Array("SQLite format 3\0".utf8)

    /// Refuses a non-empty file that is not a SQLite database, reading only its first bytes.
    private static func refuseForeignFile(_ path: String) throws(SkillbusError) {
        let fd = Glibc.open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return }  // missing (SQLite creates it) or unreadable (SQLite reports why)
        defer { Glibc.close(fd) }
        var head = [UInt8](repeating: 0, count: header.count)
        let count = read(fd, &head, head.count)
        // Empty: SQLite starts a new database in it; unreadable: SQLite reports why.
        if count <= 0 || (count == head.count && head == header) { return }
        throw refusal(
            path, reason: "not_a_database",
            "\(path) is not a SQLite database (it does not begin with SQLite's header). It was left as it is: "
                + "move it, or its directory, away, or give the agent another data directory")
    }

    private func checkIntegrity() throws(SkillbusError) {
        var problems: [String] = []
        try rows("PRAGMA quick_check") { row in
            // A row may hold several lines, under a "*** in database main ***" heading.
            problems += row.text(0).split(separator: "\n").map(String.init).filter { !$0.hasPrefix("***") }
        }
        guard problems != ["ok"] else { return }
        throw Self.refusal(
            path, reason: "corrupt",
            "\(path) failed SQLite's integrity check (\(problems.prefix(3).joined(separator: "; "))). It was left "
                + "as it is: restore it from a backup, or move the directory \(directory) away to start afresh",
            extra: ["problems": .array(problems.prefix(20).map { .string($0) })])
    }

    private func useWriteAheadLog() throws(SkillbusError) {
        var mode = ""
        try rows("PRAGMA journal_mode=WAL") { row in mode = row.text(0) }
        guard mode.lowercased() == "wal" else {
            throw SkillbusError(
                .storageUnavailable, "\(path): SQLite would not use WAL journal mode (it kept '\(mode)')",
                details: ["database": .string(path), "statement": "PRAGMA journal_mode=WAL"])
        }
        try execute("PRAGMA synchronous=NORMAL")
    }

    /// Turns SQLite's "not a database" and "corrupt" answers during the checks into refusals.
    private func refusingUnreadable(_ body: () throws(SkillbusError) -> Void) throws(SkillbusError) {
        do {
            try body()
        } catch {
            let primary = (error.details?["sqlite_code"]?.intValue ?? 0) & 0xff
            guard error.code == .storageUnavailable, primary == SQLITE_NOTADB || primary == SQLITE_CORRUPT else {
                throw error
            }
            throw Self.refusal(
                path, reason: primary == SQLITE_NOTADB ? "not_a_database" : "corrupt",
                "\(path) cannot be read as a SQLite database (\(error.details?["sqlite_error"]?.stringValue ?? "")). "
                    + "It was left as it is: restore it from a backup, or move the directory \(directory) away to "
                    + "start afresh")
        }
    }

    // MARK: - Errors

    /// The directory holding the database file.
    var directory: String { (path as NSString).deletingLastPathComponent }

    /// A `storage_unavailable` error for SQLite's result `code` while doing `operation` with `sql`.
    func failure(_ code: Int32, _ operation: String, sql: String) -> SkillbusError {
        let text = String(cString: sqlite3_errstr(code))
        let detail = handle.map { String(cString: sqlite3_errmsg($0)) } ?? text
        var message = "SQLite could not \(operation) in \(path): \(detail) (SQLite code \(code))"
        if let hint = Self.hint(code) { message += ": \(hint)" }
        return SkillbusError(
            .storageUnavailable, message,
            details: [
                "sqlite_code": .number(Double(code)), "sqlite_error": .string(text), "statement": .string(sql),
                "database": .string(path),
            ])
    }

    private func closedError(_ sql: String) -> SkillbusError {
        SkillbusError(
            .storageUnavailable, "the database \(path) is closed",
            details: ["database": .string(path), "statement": .string(sql)])
    }

    /// What a person can do about a failure with this result code, when there is something to say.
    private static func hint(_ code: Int32) -> String? {
        switch code & 0xff {
        case SQLITE_FULL: "the disk (or the database's size limit) is full; free some space"
        case SQLITE_READONLY: "the database cannot be written; check the permissions of the file and its directory"
        case SQLITE_IOERR: "the disk reported an I/O error; check the disk and the file system"
        case SQLITE_CANTOPEN: "the file cannot be opened; check that the directory exists and is writable"
        case SQLITE_PERM: "access was denied; check the permissions of the file and its directory"
        default: nil
        }
    }

    /// A `store_refused` error about the file at `path`.
    static func refusal(
        _ path: String, reason: String, _ message: String, extra: [String: JSONValue] = [:]
    ) -> SkillbusError {
        var details = extra
        details["database"] = .string(path)
        details["reason"] = .string(reason)
        return SkillbusError(.storeRefused, message, details: .object(details))
    }
}
