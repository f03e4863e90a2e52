import Foundation
@testable import Skillbus
import SkillbusTestSupport
import Testing

/// libpq through `PostgresConnection`, against a throwaway cluster of the test's own (ThrowawayPostgres).
@Suite("PostgreSQL: the throwaway cluster and the connection", .serialized, .timeLimit(.minutes(2)))
struct PostgresTests {
    @Test(
        "a throwaway cluster starts, takes prepared statements with the password, and refuses a wrong one",
        .enabled(if: ThrowawayPostgres.unavailable == nil, Comment(rawValue: ThrowawayPostgres.unavailable ?? "")))
    func connectAndRefuse() throws {
        let postgres = try ThrowawayPostgres()
        defer { postgres.remove() }
        let connection = try PostgresConnection(
            url: postgres.url, password: ThrowawayPostgres.password, applicationName: "skillbus-test")
        defer { connection.close() }
        try connection.execute("CREATE TABLE t (id text PRIMARY KEY, n bigint)")
        let inserted = try connection.transaction { () throws(SkillbusError) -> Int in
            try connection.run("ins", "INSERT INTO t VALUES ($1, $2)", [.text("a"), .integer(7)])
                + connection.run("ins", "INSERT INTO t VALUES ($1, $2)", [.utf8(Array("b\u{e9}".utf8)), .null])
        }
        #expect(inserted == 2)
        var rows: [String] = []
        try connection.run("sel", "SELECT id, n FROM t ORDER BY id") { row in
            rows.append(row.text(0) + "=" + (row.isNull(1) ? "null" : String(row.int64(1))))
        }
        #expect(rows == ["a=7", "b\u{e9}=null"])
        // A statement that fails names the statement and keeps PostgreSQL's SQLSTATE; the connection stays usable.
        #expect(throws: SkillbusError.self) {
            try connection.run("ins", "INSERT INTO t VALUES ($1, $2)", [.text("a"), .integer(1)])
        }
        #expect(try connection.integer("count", "SELECT count(*) FROM t") == 2)

        let wrong = "not-the-password"
        do {
            _ = try PostgresConnection(url: postgres.url, password: wrong, applicationName: "skillbus-test")
            Issue.record("a wrong password was accepted")
        } catch {
            #expect(error.code == .storageUnavailable)
            #expect(error.message.contains("127.0.0.1:\(postgres.port)"), "\(error.message)")
            #expect(!error.message.contains(wrong))
        }
    }

    @Test("a connection URI is shown without its password")
    func passwordHidden() {
        #expect(PostgresConnection.withoutPassword("postgresql://u:secret@h:5432/db") == "postgresql://u:***@h:5432/db")
        #expect(PostgresConnection.withoutPassword("postgresql://h:5432/db") == "postgresql://h:5432/db")
    }
}
