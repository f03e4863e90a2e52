import Foundation
import Testing

@testable import Skillbus

/// The journal's table moving to the order of acceptance, without sockets.
@Suite("Journal upkeep")
struct JournalUpkeepTests {
    @Test("a journal written before rounds were kept in acceptance order keeps every row through the migration")
    func migrationKeepsRounds() async throws {
        try await withTemporaryDirectory { directory in
            let path = (directory as NSString).appendingPathComponent(JournalSchema.databaseName)
            // The journal as the build before this one wrote it: the first two migrations.
            let before = try SQLiteDatabase.open(path: path, migrations: Array(JournalSchema.migrations.prefix(2)))
            // Within the retention window, so that the sweep at open keeps it.
            let now = RoundJournal.nowMs()
            try before.transaction { () throws(SkillbusError) in
                let insert =
                    "INSERT INTO rounds (id, body, state, idempotent, document, accepted, finished, bytes) "
                    + "VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
                try before.run(
                    insert,
                    [.text("done-1"), .text("{\"a\":1}"), .text("done"), .int(0), .text("{\"status\":\"ok\"}"),
                     .integer(now - 2), .integer(now - 1), .int(22)])
                try before.run(
                    insert,
                    [.text("running-1"), .text("{}"), .text("running"), .int(0), .null, .integer(now - 3), .int(0), .int(2)])
            }
            before.close()

            let opened = try JournalTests.Opened(directory)
            defer { opened.journal.close() }
            #expect(opened.journal.interruptedAtOpen.load(ordering: .relaxed) == 1)
            #expect(opened.journal.storedBytes.load(ordering: .relaxed) == 24)
            #expect(
                try await opened.accept("done-1", body: "{\"a\":1}")
                    == .stored(roundID: Array("done-1".utf8), document: Array("{\"status\":\"ok\"}".utf8)))
            let other = try await opened.accept("done-1", body: "{\"a\":2}")
            #expect(other == .conflict(roundID: Array("done-1".utf8)))
            #expect(try await opened.accept("running-1") == .interrupted(roundID: Array("running-1".utf8)))
            #expect(try await opened.accept("new-1") == .accepted(roundID: Array("new-1".utf8)))
        }
    }
}
