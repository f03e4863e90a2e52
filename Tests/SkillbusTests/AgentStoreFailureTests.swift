import Foundation
import Testing

@testable import Skillbus

@Suite("Agent store: failures, limits and size")
struct AgentStoreFailureTests {
    static func database(_ directory: String) -> String {
        (directory as NSString).appendingPathComponent(AgentStoreSchema.databaseName)
    }

    static func sqliteCode(_ error: SkillbusError?) -> Int? {
        error?.details?["sqlite_code"]?.intValue.map { $0 & 0xff }
    }

    @Test(
        "while commits fail, writes are refused and reads work; a later retry recovers by itself",
        arguments: ["disk full", "read-only"])
    func storageProblem(condition: String) async throws {
        let expectedCode = condition == "disk full" ? 13 : 8  // SQLITE_FULL, SQLITE_READONLY
        try await withTemporaryDirectory { directory in
            var options = AgentStore.Options()
            options.flushIntervalMs = 20
            let store = try await AgentStore.open(directory: directory, agent: "alpha", options: options)
            try store.append(.user, "before", session: "s", round: "r1")
            try store.setMemory("before", 1, scope: .agent)
            try await store.flush()
            #expect(store.storageProblem == nil)

            // Root ignores chmod, so the condition comes from SQLite itself, on the store's connection.
            let (impose, lift) =
                condition == "disk full"
                ? ("PRAGMA max_page_count = 1", "PRAGMA max_page_count = 1073741823")
                : ("PRAGMA query_only = 1", "PRAGMA query_only = 0")
            try await store.onStoreThread { database throws(SkillbusError) in try database.execute(impose) }
            let big = JSONValue.string(String(repeating: "z", count: 200_000))
            try store.setMemory("big", big, scope: .agent)  // accepted: nothing has failed yet
            await #expect {
                try await store.flush()
            } throws: { error in
                (error as? SkillbusError)?.code == .storageUnavailable
                    && Self.sqliteCode(error as? SkillbusError) == expectedCode
            }
            let problem = try #require(store.storageProblem)
            #expect(problem.code == .storageUnavailable && Self.sqliteCode(problem) == expectedCode)

            for write in [
                { try store.setMemory("after", 2, scope: .agent) },
                { try store.append(.user, "after", session: "s", round: "r2") },
                { _ = try store.deleteMemory("before", scope: .agent) },
            ] as [() throws -> Void] {
                #expect {
                    try write()
                } throws: { error in
                    let error = error as? SkillbusError
                    return error?.code == .storageUnavailable && error?.message.contains("refused") == true
                        && Self.sqliteCode(error) == expectedCode
                }
            }
            #expect(store.memory("big", scope: .agent) == big)
            #expect(store.memory("before", scope: .agent) == 1)
            #expect(store.memory("after", scope: .agent) == nil)
            #expect(try await store.history("s")?.map(\.content) == ["before"])

            try await store.onStoreThread { database throws(SkillbusError) in try database.execute(lift) }
            #expect(await eventually { store.storageProblem == nil })  // the timer's retry, no flush
            try store.setMemory("after", 2, scope: .agent)
            await store.close()

            let reopened = try await AgentStore.open(directory: directory, agent: "alpha")
            #expect(reopened.memory("big", scope: .agent) == big)
            #expect(reopened.memory("after", scope: .agent) == 2)
            await reopened.close()
        }
    }

    @Test("keys, values and session ids beyond the limits are refused, naming the limit, and change nothing")
    func limits() async throws {
        try await withTemporaryDirectory { directory in
            var options = AgentStore.Options()
            options.maxKeyBytes = 8
            options.maxValueBytes = 32
            options.maxSessionIDBytes = 4
            let store = try await AgentStore.open(directory: directory, agent: "alpha", options: options)
            let refused: [(String, () throws -> Void)] = [
                ("the memory key is empty", { try store.setMemory("", 1, scope: .agent) }),
                ("9 bytes long; the limit is 8 bytes", { try store.setMemory("123456789", 1, scope: .agent) }),
                ("10 bytes long; the limit is 8 bytes", { try store.setMemory("ééééé", 1, scope: .agent) }),
                ("9 bytes long; the limit is 8 bytes", { _ = try store.deleteMemory("123456789", scope: .agent) }),
                (
                    "33 bytes as JSON; the limit is 32",
                    { try store.setMemory("k", .string(String(repeating: "v", count: 31)), scope: .agent) }
                ),
                ("the session id is empty", { try store.append(.user, "hi", session: "", round: "r") }),
                ("5 bytes long; the limit is 4", { try store.append(.user, "hi", session: "abcde", round: "r") }),
                ("5 bytes long; the limit is 4", { try store.setMemory("k", 1, scope: .session("abcde")) }),
                (
                    "user message is 42 bytes as JSON",
                    { try store.append(.user, .string(String(repeating: "m", count: 40)), session: "s", round: "r") }
                ),
            ]
            for (message, write) in refused {
                #expect {
                    try write()
                } throws: { error in
                    let error = error as? SkillbusError
                    return error?.code == .invalidParameters && error?.message.contains(message) == true
                }
            }
            #expect(store.memory(prefix: "", scope: .agent).isEmpty)
            #expect(store.sessionCount == 0)

            try store.setMemory("12345678", .string(String(repeating: "v", count: 30)), scope: .agent)  // 32 bytes
            try store.append(.user, "hi", session: "abcd", round: "r")
            #expect(store.memory("12345678", scope: .agent) != nil)
            #expect(store.session("abcd")?.messages == 1)
            await store.close()
        }
    }

    @Test(
        "a newer, unreadable or corrupt store is refused, its file left byte for byte, and the lock let go",
        arguments: ["newer", "garbage", "corrupt"])
    func refusedStores(kind: String) async throws {
        try await withTemporaryDirectory { directory in
            let path = Self.database(directory)
            let store = try await AgentStore.open(directory: directory, agent: "alpha")
            for index in 0..<3000 { try store.append(.user, .string("message \(index)"), session: "s", round: "r") }
            await store.close()
            switch kind {
            case "newer":
                let database = try SQLiteDatabase.open(path: path, migrations: AgentStoreSchema.migrations)
                try database.run(
                    "INSERT INTO skillbus_migrations (version, name, applied) VALUES (2, 'from the future', 0)")
                database.close()
            case "garbage":
                try Data("not a database at all\n".utf8).write(to: URL(fileURLWithPath: path))
            default:
                var bytes = fileBytes(path)
                for offset in (4 * 4096)..<(6 * 4096) { bytes[offset] = UInt8(truncatingIfNeeded: offset &* 7) }
                try Data(bytes).write(to: URL(fileURLWithPath: path))
            }
            let before = fileBytes(path)

            await #expect {
                try await AgentStore.open(directory: directory, agent: "alpha")
            } throws: { error in
                guard let error = error as? SkillbusError, error.code == .storeRefused else { return false }
                switch kind {
                case "newer": return error.message.contains("newer Skillbus (schema 2, this build knows 1)")
                case "garbage": return error.details?["reason"] == "not_a_database"
                default: return error.details?["reason"] == "corrupt"
                }
            }
            #expect(fileBytes(path) == before)

            // Moving the file away starts afresh, which also shows the refused open released the lock.
            try FileManager.default.moveItem(atPath: path, toPath: path + ".refused")
            let fresh = try await AgentStore.open(directory: directory, agent: "alpha")
            #expect(fresh.sessionCount == 0)
            await fresh.close()
            #expect(fileBytes(path + ".refused") == before)
        }
    }

    @Test("a store with 100,000 messages over 1,000 sessions opens and returns a 1,000-message history")
    func large() async throws {
        try await withTemporaryDirectory { directory in
            var options = AgentStore.Options()
            options.flushIntervalMs = Int.max
            let store = try await AgentStore.open(directory: directory, agent: "alpha", options: options)
            for session in 0..<1000 {
                let count = session == 0 ? 1000 : (session <= 99 ? 100 : 99)
                for index in 0..<count {
                    try store.append(
                        index % 2 == 0 ? .user : .agent, .string("message \(index)"), session: "session-\(session)",
                        round: "round-\(index / 4)")
                }
                // 100,000 appends take seconds of a debug build: other tests' tasks get the thread in between.
                await Task.yield()
            }
            try await store.flush()
            #expect(store.commitCount == 1)
            await store.close()

            let reopened = try await AgentStore.open(directory: directory, agent: "alpha")
            #expect(reopened.sessionCount == 1000)
            #expect(reopened.sessions().reduce(0) { $0 + $1.messages } == 100_000)
            let summary = try #require(reopened.session("session-0"))
            #expect(summary.messages == 1000 && summary.turns == 250 && summary.title == "message 0")
            let history = try #require(try await reopened.history("session-0"))
            #expect(history.map(\.index) == Array(0..<1000))
            #expect(history.map(\.content) == (0..<1000).map { .string("message \($0)") })
            #expect(history.last?.round == "round-249" && history.last?.role == .agent)
            await reopened.close()
        }
    }

    @Test("sessions are listed newest update first, ties by id")
    func order() {
        var contents = StoreContents()
        for (session, time) in [("b", 1), ("a", 2), ("c", 3), ("b", 4), ("d", 3)] as [(String, Int64)] {
            _ = contents.append(.user, "x", serialized: [], session: session, round: "", time: time)
        }
        #expect(contents.sortedSessions.map(\.id) == ["b", "c", "d", "a"])
        #expect(contents.sessions["b"]?.summary.created == SQLiteDatabase.date(milliseconds: 1))
        #expect(contents.batch()?.sessions.map(\.summary.id) == ["a", "b", "c", "d"])
    }
}
