import Foundation
import Testing

@testable import Skillbus

/// The SQLite journal's table has no index: rows are found through the store's own map of ids to rows
/// (`JournalRowIndex`) — ids whose keys collide, a transaction that rolls back — and swept in the order they were
/// accepted. (A journal written before: JournalUpkeepTests.)
@Suite("SQLite journal store")
struct SQLiteJournalStoreTests {
    static func id(_ text: String) -> [UInt8] { Array(text.utf8) }

    @Test("ids with the same key each keep their row; removing one leaves the others")
    func collisions() {
        var index = JournalRowIndex(key: { _ in 7 })
        for (offset, name) in ["a", "b", "c"].enumerated() { index.insert(Self.id(name), row: Int64(offset + 1)) }
        // The caller's check is what tells the rows apart: here, row n holds the n-th name.
        let holds = ["a": Int64(1), "b": 2, "c": 3]
        func row(_ name: String) -> Int64? { index.row(of: Self.id(name)) { $0 == holds[name] } }
        #expect(row("a") == 1 && row("b") == 2 && row("c") == 3)
        index.remove(Self.id("a"), row: 1)
        #expect(row("a") == nil && row("b") == 2 && row("c") == 3)
        index.remove(Self.id("c"), row: 3)
        #expect(row("a") == nil && row("b") == 2 && row("c") == nil)
        // Removing a row the index does not name changes nothing.
        index.remove(Self.id("b"), row: 9)
        #expect(row("b") == 2)
    }

    @Test("a store whose ids all collide answers each id from its own row, and a reopen finds them all")
    func storeWithCollidingIDs() async throws {
        try await withTemporaryDirectory { directory in
            do {
                let store = try SQLiteJournalStore(directory: directory, index: JournalRowIndex(key: { _ in 0 }))
                defer { store.close() }
                let rounds = ["a", "b", "c"].map {
                    NewRound(id: Self.id($0), body: Array("{\"\($0)\":1}".utf8), idempotent: false)
                }
                let inserted = try store.transaction { () throws(SkillbusError) in
                    try store.insertRunning(rounds, nowMs: 1)
                }
                #expect(inserted == Set(rounds.map(\.id)))
                #expect(try store.insertRunning([rounds[1]], nowMs: 2).isEmpty)
                #expect(try store.stored(Self.id("b"))?.body == Array("{\"b\":1}".utf8))
                try store.transaction { () throws(SkillbusError) in
                    try store.finish(
                        [
                            FinishedRow(id: Self.id("b"), body: [], document: Array("done-b".utf8)),
                            FinishedRow(id: Self.id("d"), body: Array("{}".utf8), document: Array("done-d".utf8)),
                        ], nowMs: 3)
                }
                try store.delete(Self.id("a"))
                #expect(try store.stored(Self.id("a")) == nil)
                #expect(try store.bytes(of: Self.id("d")) == 6)
            }
            let reopened = try SQLiteJournalStore(directory: directory)
            defer { reopened.close() }
            #expect(try reopened.stored(Self.id("a")) == nil)
            #expect(try reopened.stored(Self.id("b"))?.document == Array("done-b".utf8))
            #expect(try reopened.stored(Self.id("c"))?.state == "running")
            #expect(try reopened.stored(Self.id("d"))?.state == "done")
            #expect(Set(try reopened.roundIDs()) == Set(["b", "c", "d"].map(Self.id)))
        }
    }

    @Test("a transaction that rolls back leaves the map as the table: a row it deleted is still found")
    func rollback() async throws {
        try await withTemporaryDirectory { directory in
            let store = try SQLiteJournalStore(directory: directory)
            defer { store.close() }
            let round = NewRound(id: Self.id("kept"), body: Array("{}".utf8), idempotent: false)
            _ = try store.transaction { () throws(SkillbusError) in try store.insertRunning([round], nowMs: 1) }
            #expect(throws: SkillbusError.self) {
                try store.transaction { () throws(SkillbusError) in
                    try store.delete(round.id)
                    _ = try store.insertRunning([NewRound(id: Self.id("gone"), body: [], idempotent: false)], nowMs: 2)
                    throw SkillbusError(.internalError, "abandoned")
                }
            }
            #expect(try store.stored(round.id)?.state == "running")
            // Still held: a second accept of it is not a new row.
            #expect(try store.insertRunning([round], nowMs: 3).isEmpty)
            #expect(try store.stored(Self.id("gone")) == nil)
            let gone = NewRound(id: Self.id("gone"), body: [], idempotent: false)
            #expect(try store.insertRunning([gone], nowMs: 4).count == 1)
        }
    }

    @Test("the sweep's candidates are ended rounds in the order they were accepted, whenever they ended")
    func sweptInAcceptanceOrder() async throws {
        try await withTemporaryDirectory { directory in
            let store = try SQLiteJournalStore(directory: directory)
            defer { store.close() }
            let rounds = ["long", "quick", "running"].map { NewRound(id: Self.id($0), body: [], idempotent: false) }
            try store.transaction { () throws(SkillbusError) in
                _ = try store.insertRunning(rounds, nowMs: 1)
                try store.finish([FinishedRow(id: Self.id("quick"), body: [], document: Array("{}".utf8))], nowMs: 2)
                try store.finish([FinishedRow(id: Self.id("long"), body: [], document: Array("{}".utf8))], nowMs: 9)
            }
            let oldest = try store.oldestEnded(limit: 10)
            #expect(oldest.map(\.id) == ["long", "quick"])
            #expect(oldest.map(\.finished) == [9, 2])
            #expect(try store.oldestEnded(limit: 1).map(\.id) == ["long"])
        }
    }
}
