/// The coordinator journal's table and the SQL that reads and writes it. One row per round id: its canonical
/// body, where it stands, and once finished its document. Times are integer milliseconds since 1970.
enum JournalSchema {
    static let databaseName = "journal.sqlite"

    static let migrations: [SQLiteMigration] = [
        SQLiteMigration(
            "rounds",
            sql: """
                CREATE TABLE rounds (
                    id TEXT PRIMARY KEY NOT NULL,
                    body TEXT NOT NULL,
                    state TEXT NOT NULL,            -- 'running', 'done' or 'interrupted'
                    idempotent INTEGER NOT NULL,    -- 1: every skill of the round is idempotent
                    document TEXT,                  -- the round document once 'done'
                    accepted INTEGER NOT NULL,
                    finished INTEGER NOT NULL,      -- when it ended, or was found interrupted; 0 while running
                    bytes INTEGER NOT NULL          -- body and document: what it costs on disk, roughly
                ) WITHOUT ROWID;
                CREATE INDEX rounds_by_finished ON rounds (finished) WHERE state != 'running';
                """)
    ]

    /// Inserts a new round; one already journaled is left as it is (no change), and then read with `select`.
    static let insert =
        "INSERT INTO rounds (id, body, state, idempotent, document, accepted, finished, bytes) "
        + "VALUES (?, ?, 'running', ?, NULL, ?, 0, ?) ON CONFLICT (id) DO NOTHING"
    static let select = "SELECT body, state, idempotent, document FROM rounds WHERE id = ?"
    static let rerun = "UPDATE rounds SET state = 'running', accepted = ?, finished = 0 WHERE id = ?"
    static let finish = "UPDATE rounds SET state = 'done', document = ?, finished = ?, bytes = ? WHERE id = ?"
    static let bytesOf = "SELECT bytes FROM rounds WHERE id = ?"
    static let delete = "DELETE FROM rounds WHERE id = ?"
    /// At open: what was running when the last coordinator stopped did not finish.
    static let interruptRunning = "UPDATE rounds SET state = 'interrupted', finished = ? WHERE state = 'running'"
    static let totalBytes = "SELECT coalesce(sum(bytes), 0) FROM rounds"
    static let oldestEnded = "SELECT id, bytes, finished FROM rounds WHERE state != 'running' ORDER BY finished LIMIT ?"
}
