import Foundation
import Testing

@testable import Skillbus

@Suite("SQLite layer")
struct SQLiteDatabaseTests {
    static let notes = SQLiteMigration("notes", sql: "CREATE TABLE notes (id INTEGER PRIMARY KEY, text TEXT NOT NULL)")
    static let tags = SQLiteMigration("tags", sql: "CREATE TABLE tags (note INTEGER NOT NULL, tag TEXT NOT NULL)")

    static func path(_ directory: String) -> String { (directory as NSString).appendingPathComponent("test.sqlite") }

    static func text(_ database: SQLiteDatabase, _ sql: String) throws -> String {
        var value = ""
        try database.rows(sql) { row in value = row.text(0) }
        return value
    }

    @Test("open creates the file in WAL mode with synchronous=NORMAL, runs the migrations once and records them")
    func openAndMigrate() async throws {
        try await withTemporaryDirectory { directory in
            let path = Self.path(directory)
            let first = try SQLiteDatabase.open(path: path, migrations: [Self.notes])
            #expect(try Self.text(first, "PRAGMA journal_mode") == "wal")
            #expect(try first.integer("PRAGMA synchronous") == 1)
            #expect(try first.schemaVersion() == 1)
            try first.run("INSERT INTO notes (text) VALUES (?)", [.text("kept")])
            first.close()

            let second = try SQLiteDatabase.open(path: path, migrations: [Self.notes, Self.tags])
            let recorded = try #require(try second.recordedMigrations())
            #expect(recorded.map(\.version) == [1, 2])
            #expect(recorded.map(\.name) == ["notes", "tags"])
            #expect(try Self.text(second, "SELECT text FROM notes") == "kept")
            #expect(try second.migrate([Self.notes, Self.tags]) == 0)
            second.close()
        }
    }

    @Test("a failing migration rolls back whole and reports SQLite's code and the statement")
    func failingMigration() async throws {
        try await withTemporaryDirectory { directory in
            let path = Self.path(directory)
            let broken = SQLiteMigration("broken", sql: "CREATE TABLE half (x); CREATE TABLEE oops (y)")
            #expect {
                try SQLiteDatabase.open(path: path, migrations: [Self.notes, broken])
            } throws: { error in
                guard let error = error as? SkillbusError, error.code == .storageUnavailable else { return false }
                return error.details?["sqlite_code"]?.intValue == 1
                    && error.details?["statement"]?.stringValue?.contains("CREATE TABLEE") == true
                    && error.message.contains(path)
            }
            let database = try SQLiteDatabase.open(path: path, migrations: [Self.notes])
            #expect(try database.schemaVersion() == 1)
            #expect(try database.integer("SELECT count(*) FROM sqlite_master WHERE name = 'half'") == 0)
            database.close()
        }
    }

    @Test("statements are prepared once per SQL text and reused")
    func statementCache() async throws {
        try await withTemporaryDirectory { directory in
            let database = try SQLiteDatabase.open(path: Self.path(directory), migrations: [Self.notes])
            defer { database.close() }
            let sql = "INSERT INTO notes (text) VALUES (?)"
            let first = try database.statement(sql)
            try database.transaction { () throws(SkillbusError) in
                for index in 0..<10 { try database.run(sql, [.text("note \(index)")]) }
            }
            #expect(try database.statement(sql) === first)
            #expect(try database.integer("SELECT count(*) FROM notes") == 10)
        }
    }

    @Test("values round-trip through typed bindings and columns")
    func typedValues() async throws {
        try await withTemporaryDirectory { directory in
            let database = try SQLiteDatabase.open(
                path: Self.path(directory),
                migrations: [SQLiteMigration("values", sql: "CREATE TABLE v (i, r, t, u, n)")])
            defer { database.close() }
            try database.run(
                "INSERT INTO v VALUES (?, ?, ?, ?, ?)",
                [.integer(1 << 40), .real(2.5), .text("héllo"), .utf8(Array("{\"a\":1}".utf8)), .null])
            try database.run("INSERT INTO v VALUES (?, ?, ?, ?, ?)", [.int(0), .real(0), .text(""), .utf8([]), .null])
            var rows: [String] = []
            try database.rows("SELECT i, r, t, u, n FROM v ORDER BY i DESC") { row in
                rows.append("\(row.int64(0)) \(row.double(1)) \(row.text(2)) \(row.bytes(3).count) \(row.isNull(4))")
            }
            #expect(rows == ["\(1 << 40) 2.5 héllo 7 true", "0 0.0  0 true"])
        }
    }

    @Test("a transaction whose body throws leaves nothing behind")
    func rollback() async throws {
        try await withTemporaryDirectory { directory in
            let database = try SQLiteDatabase.open(path: Self.path(directory), migrations: [Self.notes])
            defer { database.close() }
            #expect(throws: SkillbusError.self) {
                try database.transaction { () throws(SkillbusError) in
                    try database.run("INSERT INTO notes (text) VALUES ('gone')")
                    try database.run("INSERT INTO nowhere VALUES (1)")
                }
            }
            #expect(!database.inTransaction)
            #expect(try database.integer("SELECT count(*) FROM notes") == 0)
        }
    }

    @Test("a schema newer than this build is refused with what to do, and the file is left as it was")
    func newerSchema() async throws {
        try await withTemporaryDirectory { directory in
            let path = Self.path(directory)
            try SQLiteDatabase.open(path: path, migrations: [Self.notes, Self.tags]).close()
            let before = fileBytes(path)
            #expect {
                try SQLiteDatabase.open(path: path, migrations: [Self.notes])
            } throws: { error in
                let error = error as? SkillbusError
                return error?.code == .storeRefused && error?.details?["reason"] == "newer_schema"
                    && error?.message.contains("newer Skillbus (schema 2, this build knows 1): upgrade skillbus")
                        == true
            }
            #expect(fileBytes(path) == before)
        }
    }

    @Test("a database whose migrations have other names, or a foreign SQLite file, is refused untouched")
    func foreignSchema() async throws {
        try await withTemporaryDirectory { directory in
            let path = Self.path(directory)
            try SQLiteDatabase.open(path: path, migrations: [Self.tags]).close()
            let before = fileBytes(path)
            #expect {
                try SQLiteDatabase.open(path: path, migrations: [Self.notes])
            } throws: { error in
                (error as? SkillbusError)?.details?["reason"] == "foreign_schema"
            }
            #expect(fileBytes(path) == before)

            let other = (directory as NSString).appendingPathComponent("other.sqlite")
            let plain = try SQLiteDatabase.open(path: other, migrations: [])
            try plain.execute("DROP TABLE skillbus_migrations; CREATE TABLE theirs (x)")
            plain.close()
            #expect {
                try SQLiteDatabase.open(path: other, migrations: [Self.notes])
            } throws: { error in
                (error as? SkillbusError)?.message.contains("not a Skillbus store") == true
            }
        }
    }

    @Test(
        "a file that is not a SQLite database is refused and left byte for byte as it was",
        arguments: ["text", "a SQLite header over garbage", "one byte"])
    func notADatabase(kind: String) async throws {
        let content: [UInt8] =
            switch kind {
            case "text": Array("these are my notes, not a database\n".utf8)
            case "one byte": [0x53]
            default: Array("SQLite format 3\0".utf8) + [UInt8](repeating: 0xA5, count: 8192)
            }
        try await withTemporaryDirectory { directory in
            let path = Self.path(directory)
            try Data(content).write(to: URL(fileURLWithPath: path))
            #expect {
                try SQLiteDatabase.open(path: path, migrations: [Self.notes])
            } throws: { error in
                let error = error as? SkillbusError
                return error?.code == .storeRefused && error?.message.contains("left as it is") == true
            }
            #expect(fileBytes(path) == content)
        }
    }

    @Test(
        "a corrupt database is refused untouched, whether the integrity check lists problems or cannot read it",
        arguments: ["lost freelist", "scribbled pages"])
    func corrupt(damage: String) async throws {
        try await withTemporaryDirectory { directory in
            let path = Self.path(directory)
            let database = try SQLiteDatabase.open(path: path, migrations: [Self.notes])
            try database.transaction { () throws(SkillbusError) in
                for index in 0..<2000 {
                    try database.run("INSERT INTO notes (text) VALUES (?)", [.text("note \(index)")])
                }
            }
            try database.run("DELETE FROM notes WHERE id > 1000")  // frees pages onto the freelist
            database.close()
            var bytes = fileBytes(path)
            #expect(bytes.count > 8 * 4096)
            let expected: String
            if damage == "lost freelist" {
                // The header's first freelist trunk page becomes 0: quick_check finds pages nobody uses.
                for offset in 32..<36 { bytes[offset] = 0 }
                expected = "failed SQLite's integrity check (Main freelist: size is 0 but should be"
            } else {
                // Scribble over pages of the notes table (page 1 holds the header and the schema).
                for offset in (3 * 4096)..<(5 * 4096) { bytes[offset] = UInt8(truncatingIfNeeded: offset &* 31) }
                expected = "cannot be read as a SQLite database"
            }
            try Data(bytes).write(to: URL(fileURLWithPath: path))
            #expect {
                try SQLiteDatabase.open(path: path, migrations: [Self.notes])
            } throws: { error in
                let error = error as? SkillbusError
                return error?.code == .storeRefused && error?.details?["reason"] == "corrupt"
                    && error?.message.contains(expected) == true
            }
            #expect(fileBytes(path) == bytes)
        }
    }
}
