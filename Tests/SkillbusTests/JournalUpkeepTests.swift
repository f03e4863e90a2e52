import Foundation
import Testing

@testable import Skillbus

/// What the journal's thread does between commits (checkpoints, the retention sweep in steps), the SQLite layer's
/// checkpoint by hand, and the journal's table moving to the order of acceptance: all without sockets.
@Suite("Journal upkeep")
struct JournalUpkeepTests {
    static let second: UInt64 = 1_000_000_000

    @Test("a sweep starts at open and then every period; a full step is followed by another at once")
    func sweepSchedule() {
        var upkeep = JournalUpkeep(sweepEveryNanos: Self.second, rowsPerStep: 64, now: 5 * Self.second)
        #expect(upkeep.sweepStepDue(now: 5 * Self.second))
        // A step that found little to delete ends the sweep: the next starts a period after this one began.
        upkeep.stepped(deleted: 3, now: 5 * Self.second)
        #expect(!upkeep.sweepStepDue(now: 5 * Self.second + 1))
        #expect(upkeep.sleepUntil == 6 * Self.second)
        #expect(upkeep.sweepStepDue(now: 6 * Self.second))
        // A full step: more may wait, so the thread takes another step at its next pass and does not sleep.
        upkeep.stepped(deleted: 64, now: 6 * Self.second)
        #expect(upkeep.sweepStepDue(now: 6 * Self.second + 1))
        #expect(upkeep.sleepUntil == nil)
        upkeep.stepped(deleted: 64, now: 6 * Self.second + 500)
        #expect(upkeep.sweepStepDue(now: 6 * Self.second + 600))
        // The sweep ends with a short step; the next is due a period after the sweep began, not after it ended.
        upkeep.stepped(deleted: 10, now: 6 * Self.second + 900)
        #expect(upkeep.sleepUntil == 7 * Self.second)
        #expect(!upkeep.sweepStepDue(now: 7 * Self.second - 1))
    }

    @Test("a checkpoint is due once the write-ahead log holds as many pages as the threshold")
    func checkpointThreshold() {
        let upkeep = JournalUpkeep(sweepEveryNanos: Self.second, checkpointFrames: 100, now: 0)
        #expect(!upkeep.checkpointDue(framesInLog: 0))
        #expect(!upkeep.checkpointDue(framesInLog: 99))
        #expect(upkeep.checkpointDue(framesInLog: 100))
    }

    @Test("with checkpoints by hand, commits only grow the log, and a checkpoint lets it start again")
    func checkpointByHand() async throws {
        try await withTemporaryDirectory { directory in
            let path = (directory as NSString).appendingPathComponent("test.sqlite")
            let notes = SQLiteMigration("notes", sql: "CREATE TABLE notes (id INTEGER PRIMARY KEY, text TEXT NOT NULL)")
            let database = try SQLiteDatabase.open(path: path, migrations: [notes])
            defer { database.close() }
            database.checkpointWhenAsked()
            let text = String(repeating: "x", count: 3000)
            // Past the 1,000 pages at which SQLite would have checkpointed inside a commit.
            for _ in 0..<1200 {
                try database.transaction { () throws(SkillbusError) in
                    try database.run("INSERT INTO notes (text) VALUES (?)", [.text(text)])
                }
            }
            #expect(database.framesInLog > 1000)
            try database.checkpoint()
            #expect(database.framesInLog == 0)
            try database.transaction { () throws(SkillbusError) in
                try database.run("INSERT INTO notes (text) VALUES (?)", [.text("after")])
            }
            // The log starts again from its beginning: a few pages, not 1,200 more.
            #expect((1..<10).contains(database.framesInLog))
            #expect(try database.integer("SELECT count(*) FROM notes") == 1201)
        }
    }

    @Test(
        "a journal written before rounds were kept in acceptance order, or before the id index went, keeps every row",
        arguments: [2, 3])
    func migrationKeepsRounds(migrationsBefore: Int) async throws {
        try await withTemporaryDirectory { directory in
            let path = (directory as NSString).appendingPathComponent(JournalSchema.databaseName)
            // The journal as an earlier build wrote it: its first migrations.
            let before = try SQLiteDatabase.open(
                path: path, migrations: Array(JournalSchema.migrations.prefix(migrationsBefore)))
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
