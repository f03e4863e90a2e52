import Foundation

/// One step of a database's schema. Migrations are applied in the order given, each once, each in its own
/// transaction, and recorded (number and name) in the `skillbus_migrations` table; the schema version of a
/// database is the number of migrations recorded in it.
struct SQLiteMigration: Sendable {
    let name: String
    /// The statements, run as one script inside the migration's transaction.
    let sql: String

    init(_ name: String, sql: String) {
        self.name = name
        self.sql = sql
    }
}

extension SQLiteDatabase {
    static let migrationsTable = "skillbus_migrations"

    /// The migrations recorded in the database, in order; nil when it has no migrations table.
    func recordedMigrations() throws(SkillbusError) -> [(version: Int, name: String)]? {
        let tables = try integer(
            "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = ?", [.text(Self.migrationsTable)])
        guard tables == 1 else { return nil }
        var recorded: [(version: Int, name: String)] = []
        try rows("SELECT version, name FROM \(Self.migrationsTable) ORDER BY version") { row in
            recorded.append((row.int(0), row.text(1)))
        }
        return recorded
    }

    /// The schema version: how many migrations are recorded (0 for a new database).
    func schemaVersion() throws(SkillbusError) -> Int {
        try recordedMigrations()?.count ?? 0
    }

    /// Refuses a database whose recorded migrations are not a prefix of `known`: one written by a newer build,
    /// by a different build, or a SQLite file that is not a Skillbus store at all.
    func checkSchema(_ known: [SQLiteMigration]) throws(SkillbusError) {
        guard let recorded = try recordedMigrations() else {
            let objects = try integer("SELECT count(*) FROM sqlite_master WHERE name NOT LIKE 'sqlite_%'") ?? 0
            guard objects == 0 else {
                throw Self.refusal(
                    path, reason: "foreign_schema",
                    "\(path) is a SQLite database but not a Skillbus store (it has tables and no "
                        + "\(Self.migrationsTable) table). It was left as it is: give the agent a data directory "
                        + "of its own")
            }
            return
        }
        let newest = recorded.last?.version ?? 0
        if newest > known.count {
            throw Self.refusal(
                path, reason: "newer_schema",
                "\(path) was written by a newer Skillbus (schema \(newest), this build knows \(known.count)): "
                    + "upgrade skillbus, or move the directory \(directory) away to start afresh",
                extra: ["schema": .number(Double(newest)), "known": .number(Double(known.count))])
        }
        for (offset, migration) in recorded.enumerated() {
            guard migration.version == offset + 1, migration.name == known[offset].name else {
                throw Self.refusal(
                    path, reason: "foreign_schema",
                    "\(path) records migration \(migration.version) as '\(migration.name)', which this build "
                        + "does not know (it expects '\(known[offset].name)' as migration \(offset + 1)): run the "
                        + "Skillbus that wrote it, or move the directory \(directory) away to start afresh")
            }
        }
    }

    /// Applies the migrations of `known` that are not recorded yet, each in its own transaction. Returns how
    /// many ran. Call `checkSchema` first.
    @discardableResult
    func migrate(_ known: [SQLiteMigration]) throws(SkillbusError) -> Int {
        if try recordedMigrations() == nil {
            try transaction { () throws(SkillbusError) in
                try execute(
                    "CREATE TABLE \(Self.migrationsTable) (version INTEGER PRIMARY KEY NOT NULL, "
                        + "name TEXT NOT NULL, applied INTEGER NOT NULL)")
            }
        }
        let current = try schemaVersion()
        guard current < known.count else { return 0 }
        for (offset, migration) in known.enumerated().dropFirst(current) {
            try transaction { () throws(SkillbusError) in
                try execute(migration.sql)
                try run(
                    "INSERT INTO \(Self.migrationsTable) (version, name, applied) VALUES (?, ?, ?)",
                    [.int(offset + 1), .text(migration.name), .integer(Self.milliseconds(Date()))])
            }
        }
        return known.count - current
    }

    /// Milliseconds since 1970, the way every time is stored.
    static func milliseconds(_ date: Date) -> Int64 {
        Int64((date.timeIntervalSince1970 * 1000).rounded(.down))
    }

    /// The date `milliseconds` after 1970, placed in the middle of that millisecond so that rounding it down
    /// (`milliseconds`, `FeedEvent.timestamp`) gives `milliseconds` back despite floating-point error.
    static func date(milliseconds: Int64) -> Date {
        Date(timeIntervalSince1970: (Double(milliseconds) + 0.5) / 1000)
    }
}
