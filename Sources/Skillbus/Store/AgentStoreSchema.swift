import Foundation

/// The agent store's tables and the SQL that reads and writes them. Times are integer milliseconds since 1970;
/// JSON is stored as TEXT, written by `JSONValue.serialized()` and read back with the project's parser.
enum AgentStoreSchema {
    static let databaseName = "context.sqlite"

    static let migrations: [SQLiteMigration] = [
        SQLiteMigration(
            "sessions, messages and memory",
            sql: """
                CREATE TABLE sessions (
                    id TEXT PRIMARY KEY NOT NULL,
                    created INTEGER NOT NULL,
                    updated INTEGER NOT NULL,
                    turns INTEGER NOT NULL,
                    messages INTEGER NOT NULL,
                    title TEXT NOT NULL,
                    title_role TEXT NOT NULL,       -- where the title came from: 'user', 'skillCall' or ''
                    recent_rounds TEXT NOT NULL     -- JSON array: the latest distinct rounds, oldest first
                ) WITHOUT ROWID;
                CREATE TABLE messages (
                    session TEXT NOT NULL,
                    idx INTEGER NOT NULL,
                    role TEXT NOT NULL,
                    content TEXT NOT NULL,
                    time INTEGER NOT NULL,
                    round TEXT NOT NULL,
                    PRIMARY KEY (session, idx)
                ) WITHOUT ROWID;
                CREATE TABLE memory (
                    scope TEXT NOT NULL,            -- '' for the agent, 's:<session id>' for a session
                    key TEXT NOT NULL,
                    value TEXT NOT NULL,
                    PRIMARY KEY (scope, key)
                ) WITHOUT ROWID;
                """)
    ]

    // MARK: - Loading

    /// Reads every session summary and all memory: what the store keeps in memory. Data it cannot read is
    /// refused with `store_refused`.
    static func load(_ database: SQLiteDatabase) throws(SkillbusError) -> StoreContents {
        var contents = StoreContents()
        let path = database.path
        try database.rows(
            "SELECT id, created, updated, turns, messages, title, title_role, recent_rounds FROM sessions"
        ) { row throws(SkillbusError) in
            let id = row.text(0)
            guard let rounds = try? JSONValue(parsing: row.bytes(7)).arrayValue?.compactMap(\.stringValue) else {
                throw refused(path, "session \(id)'s recent rounds are not a JSON array")
            }
            let summary = SessionSummary(
                id: id, created: SQLiteDatabase.date(milliseconds: row.int64(1)),
                updated: SQLiteDatabase.date(milliseconds: row.int64(2)), turns: row.int(3), messages: row.int(4),
                title: row.text(5))
            contents.sessions[id] = SessionRecord(
                summary: summary, titleRole: SessionMessage.Role(rawValue: row.text(6)), recentRounds: rounds)
        }
        try database.rows("SELECT scope, key, value FROM memory") { row throws(SkillbusError) in
            let key = row.text(1)
            guard let value = try? JSONValue(parsing: row.bytes(2)) else {
                throw refused(path, "the memory value of '\(key)' is not JSON")
            }
            contents.memory[row.text(0), default: [:]][key] = value
        }
        return contents
    }

    /// The committed messages of `session`, in order.
    static func messages(_ session: String, in database: SQLiteDatabase) throws(SkillbusError) -> [SessionMessage] {
        var messages: [SessionMessage] = []
        let path = database.path
        try database.rows(
            "SELECT idx, role, content, time, round FROM messages WHERE session = ? ORDER BY idx", [.text(session)]
        ) { row throws(SkillbusError) in
            guard let role = SessionMessage.Role(rawValue: row.text(1)),
                let content = try? JSONValue(parsing: row.bytes(2))
            else {
                throw unreadable(path, "message \(row.int(0)) of session \(session) cannot be read")
            }
            messages.append(
                SessionMessage(
                    index: row.int(0), role: role, content: content,
                    time: SQLiteDatabase.date(milliseconds: row.int64(3)), round: row.text(4)))
        }
        return messages
    }

    // MARK: - Writing

    /// Writes one batch; the caller wraps it in a transaction. Every statement is idempotent, so a batch whose
    /// commit failed can be written again.
    static func write(_ batch: StoreBatch, to database: SQLiteDatabase) throws(SkillbusError) {
        for change in batch.changes {
            switch change {
            case .message(let session, let message, let content):
                try database.run(
                    "INSERT OR REPLACE INTO messages (session, idx, role, content, time, round) "
                        + "VALUES (?, ?, ?, ?, ?, ?)",
                    [
                        .text(session), .int(message.index), .text(message.role.rawValue), .utf8(content),
                        .integer(SQLiteDatabase.milliseconds(message.time)), .text(message.round),
                    ])
            case .setMemory(let scope, let key, let value):
                try database.run(
                    "INSERT OR REPLACE INTO memory (scope, key, value) VALUES (?, ?, ?)",
                    [.text(scope), .text(key), .utf8(value)])
            case .deleteMemory(let scope, let key):
                try database.run("DELETE FROM memory WHERE scope = ? AND key = ?", [.text(scope), .text(key)])
            }
        }
        for record in batch.sessions {
            let summary = record.summary
            try database.run(
                "INSERT OR REPLACE INTO sessions "
                    + "(id, created, updated, turns, messages, title, title_role, recent_rounds) "
                    + "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                [
                    .text(summary.id), .integer(SQLiteDatabase.milliseconds(summary.created)),
                    .integer(SQLiteDatabase.milliseconds(summary.updated)), .int(summary.turns),
                    .int(summary.messages), .text(summary.title), .text(record.titleRole?.rawValue ?? ""),
                    .utf8(JSONValue.array(record.recentRounds.map { .string($0) }).serialized()),
                ])
        }
    }

    private static func refused(_ path: String, _ what: String) -> SkillbusError {
        SkillbusError(
            .storeRefused,
            "\(path) holds data this build cannot read (\(what)). It was left as it is: restore it from a backup, "
                + "or move its directory away to start afresh",
            details: ["database": .string(path), "reason": "unreadable"])
    }

    private static func unreadable(_ path: String, _ what: String) -> SkillbusError {
        SkillbusError(
            .storageUnavailable, "\(path) holds data this build cannot read: \(what)",
            details: ["database": .string(path)])
    }
}
