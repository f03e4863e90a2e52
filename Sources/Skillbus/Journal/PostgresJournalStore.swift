/// A coordinator group's journal in PostgreSQL: the same rows as `journal.sqlite`, each with the group's name, so
/// that several groups may share one database. One connection, owned by the journal's thread; every statement is
/// prepared once on it.
final class PostgresJournalStore: JournalStore {
    private(set) var connection: PostgresConnection
    let group: String

    /// The epoch this coordinator leads the group with: every transaction checks it first (`fence`).
    let epoch: Int

    /// Connects and makes the tables when they are missing (`PostgresJournalSchema.prepare`).
    init(settings: CoordinatorGroupSettings, epoch: Int) throws(SkillbusError) {
        connection = try Self.connect(settings)
        group = settings.group
        self.epoch = epoch
        self.settings = settings
    }

    private let settings: CoordinatorGroupSettings

    private static func connect(_ settings: CoordinatorGroupSettings) throws(SkillbusError) -> PostgresConnection {
        let connection = try PostgresConnection(
            url: settings.database, password: settings.password, applicationName: "skillbus coordinator",
            timeoutMs: settings.leaseMs,
            // A transaction left open by a coordinator that stopped (SIGSTOP, a hung machine) holds the row a
            // takeover must update: the server ends such a session after one lease.
            settings: [("idle_in_transaction_session_timeout", String(settings.leaseMs))])
        do {
            try PostgresJournalSchema.prepare(connection)
        } catch {
            connection.close()
            throw error
        }
        return connection
    }

    /// A server that went away comes back: the journal waits for it (RoundJournal, "When the database goes away").
    var waitsForDatabase: Bool { true }
    /// Whether the connection is up; a lost one is made again by `reconnect`.
    var isConnected: Bool { connection.isOpen }

    func reconnect() throws(SkillbusError) {
        connection.close()
        connection = try Self.connect(settings)
    }

    private var groupValue: PostgresConnection.Value { .text(group) }
    private var epochValue: PostgresConnection.Value { .integer(Int64(epoch)) }

    /// Every transaction first reads the group's epoch, holding its row with FOR SHARE until the commit: a
    /// takeover (which updates that row) waits for the transaction, and a transaction that finds another epoch
    /// writes nothing (fencing, PROTOCOL §3.11).
    func transaction<T>(_ body: () throws(SkillbusError) -> T) throws(SkillbusError) -> T {
        try connection.transaction { () throws(SkillbusError) -> T in
            let current = try connection.integer("fence", PostgresJournalSchema.fence, [groupValue])
            guard current == Int64(epoch) else {
                throw SkillbusError(
                    .notLeader,
                    "this coordinator led group '\(group)' with epoch \(epoch), and the group is at epoch "
                        + "\(current.map(String.init) ?? "none") now: another coordinator took the lead",
                    details: ["group": .string(group), "epoch": current.map { .number(Double($0)) } ?? .null])
            }
            return try body()
        }
    }

    /// One statement for a batch's new rounds: on a server shared with others, a statement per round cost the server
    /// more than the coordinator spent on the round.
    func insertRunning(_ rounds: [NewRound], nowMs: Int64) throws(SkillbusError) -> Set<[UInt8]> {
        var inserted: Set<[UInt8]> = []
        try connection.run(
            "insert", PostgresJournalSchema.insert,
            [
                groupValue, .integer(nowMs), epochValue, .utf8(Self.textArray(rounds.map(\.id))),
                .utf8(Self.textArray(rounds.map(\.body))),
                .text("{" + rounds.map { $0.idempotent ? "t" : "f" }.joined(separator: ",") + "}"),
            ]
        ) { row in inserted.insert(row.bytes(0)) }
        return inserted
    }

    /// One statement for a batch's documents. A round that finishes twice in one batch cannot happen; were it to, the
    /// statement would refuse the batch, so only the last document of an id is written.
    func finish(_ rounds: [FinishedRow], nowMs: Int64) throws(SkillbusError) {
        var rounds = rounds
        if Set(rounds.map(\.id)).count < rounds.count {
            var seen: Set<[UInt8]> = []
            rounds = rounds.reversed().filter { seen.insert($0.id).inserted }.reversed()
        }
        try connection.run(
            "finish", PostgresJournalSchema.finish,
            [
                groupValue, .integer(nowMs), epochValue, .utf8(Self.textArray(rounds.map(\.id))),
                .utf8(Self.textArray(rounds.map(\.document))), .utf8(Self.textArray(rounds.map(\.body))),
            ])
    }

    /// PostgreSQL's text form of a `text[]`: each element in double quotes, its quotes and backslashes escaped.
    static func textArray(_ elements: [[UInt8]]) -> [UInt8] {
        var out: [UInt8] = [UInt8(ascii: "{")]
        out.reserveCapacity(elements.reduce(2) { $0 + $1.count + 3 })
        for (index, element) in elements.enumerated() {
            if index > 0 { out.append(UInt8(ascii: ",")) }
            out.append(UInt8(ascii: "\""))
            for byte in element {
                if byte == UInt8(ascii: "\"") || byte == UInt8(ascii: "\\") { out.append(UInt8(ascii: "\\")) }
                out.append(byte)
            }
            out.append(UInt8(ascii: "\""))
        }
        out.append(UInt8(ascii: "}"))
        return out
    }

    func stored(_ id: [UInt8]) throws(SkillbusError) -> StoredRound? {
        var stored: StoredRound?
        try connection.run("select", PostgresJournalSchema.select, [groupValue, .utf8(id)]) { row in
            stored = StoredRound(
                body: row.bytes(0), state: row.text(1), idempotent: row.bool(2),
                document: row.isNull(3) ? nil : row.bytes(3))
        }
        return stored
    }

    func rerun(_ id: [UInt8], nowMs: Int64) throws(SkillbusError) {
        try connection.run("rerun", PostgresJournalSchema.rerun, [groupValue, .utf8(id), .integer(nowMs), epochValue])
    }

    func bytes(of id: [UInt8]) throws(SkillbusError) -> Int? {
        try connection.integer("bytes_of", PostgresJournalSchema.bytesOf, [groupValue, .utf8(id)]).map { Int($0) }
    }

    func delete(_ id: [UInt8]) throws(SkillbusError) {
        try connection.run("delete", PostgresJournalSchema.delete, [groupValue, .utf8(id)])
    }

    func upsertMember(_ row: SessionMembership) throws(SkillbusError) {
        try connection.run(
            "upsert_member", PostgresJournalSchema.upsertMember,
            [
                groupValue, .utf8(row.session), .text(row.agent), .text(row.role), .integer(row.firstMs),
                .integer(row.lastMs),
            ])
    }

    func deleteSession(_ session: [UInt8]) throws(SkillbusError) {
        try connection.run("delete_session", PostgresJournalSchema.deleteSession, [groupValue, .utf8(session)])
    }

    func interruptRunning(nowMs: Int64) throws(SkillbusError) -> Int {
        try connection.run(
            "interrupt_running", PostgresJournalSchema.interruptRunning, [groupValue, .integer(nowMs), epochValue])
    }

    func totalBytes() throws(SkillbusError) -> Int {
        Int(try connection.integer("total_bytes", PostgresJournalSchema.totalBytes, [groupValue]) ?? 0)
    }

    func roundIDs() throws(SkillbusError) -> [[UInt8]] {
        var ids: [[UInt8]] = []
        try connection.run("ids", PostgresJournalSchema.ids, [groupValue]) { row in ids.append(row.bytes(0)) }
        return ids
    }

    func sessions(idleBeforeMs: Int64) throws(SkillbusError) -> [SessionMembership] {
        try connection.run(
            "delete_idle_sessions", PostgresJournalSchema.deleteIdleSessions, [groupValue, .integer(idleBeforeMs)])
        var rows: [SessionMembership] = []
        try connection.run("members", PostgresJournalSchema.members, [groupValue]) { row in
            rows.append(
                SessionMembership(
                    session: row.bytes(0), agent: row.text(1), role: row.text(2), firstMs: row.int64(3),
                    lastMs: row.int64(4)))
        }
        return rows
    }

    func oldestEnded(limit: Int) throws(SkillbusError) -> [JournalRetention.Row] {
        var oldest: [JournalRetention.Row] = []
        try connection.run("oldest_ended", PostgresJournalSchema.oldestEnded, [groupValue, .integer(Int64(limit))]) {
            row in oldest.append(.init(id: row.text(0), bytes: row.int(1), finished: row.int64(2)))
        }
        return oldest
    }

    /// PostgreSQL checkpoints by itself.
    var framesInLog: Int { 0 }
    func checkpoint() throws(SkillbusError) {}

    func close() { connection.close() }
}

/// The PostgreSQL tables of coordinator groups, and their SQL (the same rows and rules as `JournalSchema`'s).
enum PostgresJournalSchema {
    /// 2: the leaders table (a build of version 1 knows no election, so it must not join a group that has one), and
    /// each round's `epoch`, the leader's that wrote it last. 3: the leader's dashboard (`http`) and the members
    /// table; a build of version 2 taking the lead would leave the last leader's `http` in the row, sending the
    /// group's dashboards to a coordinator that no longer leads.
    static let currentVersion: Int64 = 3
    /// The key of the advisory lock that makes creating the tables one coordinator's job at a time.
    static let schemaLockKey: Int64 = 0x736b_696c_6c62_7573  // "skillbus"

    static let create = """
        CREATE TABLE IF NOT EXISTS skillbus_schema (version bigint NOT NULL);
        CREATE TABLE IF NOT EXISTS skillbus_rounds (
            grp text NOT NULL,
            id text NOT NULL,
            seq bigserial,                  -- the order of acceptance
            body text NOT NULL,
            state text NOT NULL,            -- 'running', 'done' or 'interrupted'
            idempotent boolean NOT NULL,    -- every skill of the round is idempotent
            document text,                  -- the round document once 'done'
            accepted bigint NOT NULL,       -- milliseconds since 1970
            finished bigint NOT NULL,       -- when it ended, or was found interrupted; 0 while running
            bytes bigint NOT NULL,          -- body and document
            epoch bigint NOT NULL DEFAULT 0,    -- the epoch of the leader that wrote the row last
            PRIMARY KEY (grp, id)
        );
        CREATE INDEX IF NOT EXISTS skillbus_rounds_by_finished ON skillbus_rounds (grp, finished)
            WHERE state <> 'running';
        CREATE TABLE IF NOT EXISTS skillbus_session_members (
            grp text NOT NULL,
            session text NOT NULL,
            agent text NOT NULL,
            role text NOT NULL,
            first bigint NOT NULL,
            last bigint NOT NULL,
            PRIMARY KEY (grp, session, agent)
        );
        CREATE TABLE IF NOT EXISTS skillbus_leaders (
            grp text PRIMARY KEY,
            epoch bigint NOT NULL,          -- rises by one with every change of leader
            name text NOT NULL,             -- the leader's name in the group
            bus text NOT NULL,              -- its endpoints, as it advertises them
            feed text NOT NULL,
            since bigint NOT NULL,          -- when it took the lead, milliseconds since 1970 (its clock)
            lease_until timestamptz NOT NULL,   -- the server's clock
            lease_ms bigint NOT NULL,       -- the leader's lease: a standby waits at least this long
            released boolean NOT NULL DEFAULT false,   -- the leader stopped cleanly: a standby claims at once
            renewals bigint NOT NULL,       -- rises with every renewal, so a standby sees the lease move
            http text                       -- its dashboard's URL; NULL: it serves none
        );
        CREATE TABLE IF NOT EXISTS skillbus_members (
            grp text NOT NULL,
            name text NOT NULL,             -- every coordinator of the group, leader or standby
            http text,                      -- as it advertises them; http NULL: it serves no dashboard
            bus text NOT NULL,
            feed text NOT NULL,
            seen timestamptz NOT NULL,      -- the server's clock, at its latest pass (about once a lease)
            lease_ms bigint NOT NULL,
            PRIMARY KEY (grp, name)
        );
        """
    static let version = "SELECT max(version) FROM skillbus_schema"
    static let recordVersion = "INSERT INTO skillbus_schema (version) VALUES (\(currentVersion))"

    /// Makes the tables when they are missing, under a transaction-level advisory lock (two coordinators starting
    /// together do not both create them); refuses a schema newer than this build's.
    static func prepare(_ connection: PostgresConnection) throws(SkillbusError) {
        try connection.transaction { () throws(SkillbusError) in
            // "already exists, skipping" notices are no news.
            try connection.execute("SET LOCAL client_min_messages = warning")
            try connection.execute("SELECT pg_advisory_xact_lock(\(schemaLockKey))")
            try connection.execute(create)
            let found = try connection.integer("schema_version", version) ?? 0
            guard found <= currentVersion else {
                throw SkillbusError(
                    .storeRefused,
                    "the journal's tables in PostgreSQL at \(connection.target) are of schema version \(found); "
                        + "this build knows \(currentVersion): run the newer skillbus",
                    details: ["database": .string(connection.target)])
            }
            // Schema 1 (one coordinator per group) had no epochs: its rows say 0.
            if found == 1 { try connection.execute(migrateFrom1) }
            // Schema 2's leaders table has no `http` (CREATE TABLE IF NOT EXISTS left it as it was).
            if found == 1 || found == 2 { try connection.execute(migrateFrom2) }
            if found < currentVersion { try connection.execute(recordVersion) }
        }
    }

    static let fence = "SELECT epoch FROM skillbus_leaders WHERE grp = $1 FOR SHARE"
    static let migrateFrom1 = "ALTER TABLE skillbus_rounds ADD COLUMN IF NOT EXISTS epoch bigint NOT NULL DEFAULT 0"
    static let migrateFrom2 = "ALTER TABLE skillbus_leaders ADD COLUMN IF NOT EXISTS http text"

    static let insert =
        "INSERT INTO skillbus_rounds (grp, id, body, state, idempotent, document, accepted, finished, bytes, epoch) "
        + "SELECT $1, r.id, r.body, 'running', r.idempotent, NULL, $2, 0, octet_length(r.body), $3 "
        + "FROM unnest($4::text[], $5::text[], $6::boolean[]) AS r(id, body, idempotent) "
        + "ON CONFLICT (grp, id) DO NOTHING RETURNING id"
    static let select = "SELECT body, state, idempotent, document FROM skillbus_rounds WHERE grp = $1 AND id = $2"
    static let rerun =
        "UPDATE skillbus_rounds SET state = 'running', accepted = $3, finished = 0, epoch = $4 WHERE grp = $1 AND id = $2"
    /// An insert that meets the round's row (accepted before it ran) and updates it, or makes it for a round that
    /// started without one (only idempotent ones do): either way the server finds each round by its key. An UPDATE
    /// joined to the batch is planned by costs, and the plan a new group's prepared statement keeps from its first
    /// runs on an empty table scans the whole table per batch (30 ms at 100,000 rounds, against 0.6 ms); planned
    /// each time, it still scans tables of 20,000 small rows.
    static let finish =
        "INSERT INTO skillbus_rounds (grp, id, body, state, idempotent, document, accepted, finished, bytes, epoch) "
        + "SELECT $1, f.id, f.body, 'done', true, f.document, $2, $2, octet_length(f.document), $3 "
        + "FROM unnest($4::text[], $5::text[], $6::text[]) AS f(id, document, body) "
        + "ON CONFLICT (grp, id) DO UPDATE SET state = 'done', "
        + "document = excluded.document, finished = excluded.finished, bytes = excluded.bytes, epoch = excluded.epoch"
    static let bytesOf = "SELECT bytes FROM skillbus_rounds WHERE grp = $1 AND id = $2"
    static let delete = "DELETE FROM skillbus_rounds WHERE grp = $1 AND id = $2"
    static let interruptRunning =
        "UPDATE skillbus_rounds SET state = 'interrupted', finished = $2, epoch = $3 "
        + "WHERE grp = $1 AND state = 'running'"
    static let totalBytes = "SELECT coalesce(sum(bytes), 0) FROM skillbus_rounds WHERE grp = $1"
    static let ids = "SELECT id FROM skillbus_rounds WHERE grp = $1"
    static let oldestEnded =
        "SELECT id, bytes, finished FROM skillbus_rounds WHERE grp = $1 AND state <> 'running' "
        + "ORDER BY finished LIMIT $2"

    static let upsertMember =
        "INSERT INTO skillbus_session_members (grp, session, agent, role, first, last) VALUES ($1, $2, $3, $4, $5, $6) "
        + "ON CONFLICT (grp, session, agent) DO UPDATE SET role = excluded.role, last = excluded.last"
    static let deleteSession = "DELETE FROM skillbus_session_members WHERE grp = $1 AND session = $2"
    static let deleteIdleSessions =
        "DELETE FROM skillbus_session_members WHERE grp = $1 AND session IN "
        + "(SELECT session FROM skillbus_session_members WHERE grp = $1 GROUP BY session HAVING max(last) < $2)"
    static let members =
        "SELECT session, agent, role, first, last FROM skillbus_session_members WHERE grp = $1 ORDER BY last"
}
