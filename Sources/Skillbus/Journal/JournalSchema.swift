/// The coordinator journal's tables and the SQL that reads and writes them. `rounds`: one row per round id, its
/// canonical body, where it stands, and once finished its document, in the order the rounds were accepted. `session_members`: the session roster, one
/// row per agent that served a session. Times are integer milliseconds since 1970.
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
                """),
        SQLiteMigration(
            "session_members",
            sql: """
                CREATE TABLE session_members (
                    session TEXT NOT NULL,
                    agent TEXT NOT NULL,
                    role TEXT NOT NULL,             -- '' when the agent declared none
                    first INTEGER NOT NULL,         -- when the agent served the session first, and last
                    last INTEGER NOT NULL,
                    PRIMARY KEY (session, agent)
                ) WITHOUT ROWID;
                """),
        // Round ids are random, and a table keyed by them puts each new round on a page of its own somewhere in
        // the file: every commit then wrote (and every checkpoint copied) a page per round. Kept in the order
        // they are accepted, new rounds share the last pages, and only the small entries of the id's index land
        // at random.
        SQLiteMigration(
            "rounds_in_accept_order",
            sql: """
                CREATE TABLE rounds_in_order (
                    seq INTEGER PRIMARY KEY,        -- the order of acceptance: new rows go at the table's end
                    id TEXT NOT NULL UNIQUE,
                    body TEXT NOT NULL,
                    state TEXT NOT NULL,            -- 'running', 'done' or 'interrupted'
                    idempotent INTEGER NOT NULL,    -- 1: every skill of the round is idempotent
                    document TEXT,                  -- the round document once 'done'
                    accepted INTEGER NOT NULL,
                    finished INTEGER NOT NULL,      -- when it ended, or was found interrupted; 0 while running
                    bytes INTEGER NOT NULL          -- body and document: what it costs on disk, roughly
                );
                INSERT INTO rounds_in_order (id, body, state, idempotent, document, accepted, finished, bytes)
                    SELECT id, body, state, idempotent, document, accepted, finished, bytes FROM rounds
                    ORDER BY accepted;
                DROP TABLE rounds;
                ALTER TABLE rounds_in_order RENAME TO rounds;
                CREATE INDEX rounds_by_finished ON rounds (finished) WHERE state != 'running';
                """),
        // Even small, the id index's entries landed at random: one page per round in every commit and checkpoint,
        // most of the journal's writing. The store keeps where each id's row is in memory instead
        // (`JournalRowIndex`, read at open), so the table has no index on the id; and the retention sweep takes
        // ended rows in acceptance order (`oldestEnded`), so none on the end time either: every index is one more
        // B-tree insert per round.
        SQLiteMigration(
            "rounds_without_indexes",
            sql: """
                CREATE TABLE rounds_by_seq (
                    seq INTEGER PRIMARY KEY,        -- the order of acceptance: new rows go at the table's end
                    id TEXT NOT NULL,               -- unique: the store inserts only ids it does not hold
                    body TEXT NOT NULL,
                    state TEXT NOT NULL,            -- 'running', 'done' or 'interrupted'
                    idempotent INTEGER NOT NULL,    -- 1: every skill of the round is idempotent
                    document TEXT,                  -- the round document once 'done'
                    accepted INTEGER NOT NULL,
                    finished INTEGER NOT NULL,      -- when it ended, or was found interrupted; 0 while running
                    bytes INTEGER NOT NULL          -- body and document: what it costs on disk, roughly
                );
                INSERT INTO rounds_by_seq SELECT seq, id, body, state, idempotent, document, accepted, finished, bytes
                    FROM rounds ORDER BY seq;
                DROP TABLE rounds;
                ALTER TABLE rounds_by_seq RENAME TO rounds;
                """),
    ]

    /// Statements that find a round by id take the `seq` `JournalRowIndex` names and the id, which tells apart the
    /// rows of ids whose hashes collide.
    static let insert =
        "INSERT INTO rounds (id, body, state, idempotent, document, accepted, finished, bytes) "
        + "VALUES (?, ?, 'running', ?, NULL, ?, 0, ?)"
    static let isRow = "SELECT 1 FROM rounds WHERE seq = ? AND id = ?"
    static let select = "SELECT body, state, idempotent, document FROM rounds WHERE seq = ? AND id = ?"
    static let rerun = "UPDATE rounds SET state = 'running', accepted = ?, finished = 0 WHERE seq = ? AND id = ?"
    static let finish =
        "UPDATE rounds SET state = 'done', document = ?, finished = ?, bytes = ? WHERE seq = ? AND id = ?"
    /// A round that started without a row (only idempotent ones do) gets it whole.
    static let insertFinished =
        "INSERT INTO rounds (id, body, state, idempotent, document, accepted, finished, bytes) "
        + "VALUES (?1, ?2, 'done', 1, ?3, ?4, ?4, ?5)"
    static let bytesOf = "SELECT bytes FROM rounds WHERE seq = ? AND id = ?"
    static let delete = "DELETE FROM rounds WHERE seq = ? AND id = ?"
    /// At open: what was running when the last coordinator stopped did not finish.
    static let interruptRunning = "UPDATE rounds SET state = 'interrupted', finished = ? WHERE state = 'running'"
    static let totalBytes = "SELECT coalesce(sum(bytes), 0) FROM rounds"
    static let ids = "SELECT id FROM rounds"
    static let rows = "SELECT seq, id FROM rounds"
    /// Ended rounds in the order they were accepted: the table's own order, so no index is kept for the sweep. A
    /// round that ran long holds back the rows accepted after it until it expires itself.
    static let oldestEnded = "SELECT id, bytes, finished FROM rounds WHERE state != 'running' ORDER BY seq LIMIT ?"

    static let upsertMember =
        "INSERT INTO session_members (session, agent, role, first, last) VALUES (?, ?, ?, ?, ?) "
        + "ON CONFLICT (session, agent) DO UPDATE SET role = excluded.role, last = excluded.last"
    static let deleteSession = "DELETE FROM session_members WHERE session = ?"
    /// At open: sessions nobody served within the retention window go.
    static let deleteIdleSessions =
        "DELETE FROM session_members WHERE session IN "
        + "(SELECT session FROM session_members GROUP BY session HAVING max(last) < ?)"
    static let members = "SELECT session, agent, role, first, last FROM session_members ORDER BY last"
}
