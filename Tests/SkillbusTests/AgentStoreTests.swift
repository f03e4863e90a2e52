import Foundation
import Testing

@testable import Skillbus

@Suite("Agent store")
struct AgentStoreTests {
    /// Options that never commit on their own: tests call `flush` when they need a commit.
    static var manual: AgentStore.Options {
        var options = AgentStore.Options()
        options.flushIntervalMs = Int.max
        return options
    }

    static func refusal(_ error: any Error, _ reason: String) -> Bool {
        let error = error as? SkillbusError
        return error?.code == .storeRefused && error?.details?["reason"]?.stringValue == reason
    }

    @Test("plain sends in a session (a skill's call and result, no user message) are messages, not turns")
    func plainSendsAreNoTurns() async throws {
        try await withTemporaryDirectory { directory in
            let store = try await AgentStore.open(directory: directory, agent: "alpha", options: Self.manual)
            for round in ["r1", "r2"] {
                try store.append(.skillCall, ["skill": "echo"], session: "s1", round: round)
                try store.append(.skillResult, ["text": "hi"], session: "s1", round: round)
            }
            try store.append(.user, "hello", session: "s1", round: "r3")
            #expect(store.session("s1")?.messages == 5)
            #expect(store.session("s1")?.turns == 1)
            await store.close()
        }
    }

    @Test("sessions keep their messages in order, count turns per distinct round, and take a title")
    func sessionsAndHistory() async throws {
        try await withTemporaryDirectory { directory in
            let store = try await AgentStore.open(directory: directory, agent: "alpha", options: Self.manual)
            try store.append(
                .skillCall, ["skill": "weather", "parameters": ["city": "Oslo"]], session: "s1", round: "r1")
            try store.append(.user, "What is the weather like in Oslo this afternoon?", session: "s1", round: "r1")
            try store.append(.skillResult, ["text": "rain"], session: "s1", round: "r1")
            try store.append(.agent, "It rains.", session: "s1", round: "r1")
            try store.append(.user, ["text": .string(String(repeating: "x", count: 200))], session: "s2", round: "r2")
            try store.append(.user, "and tomorrow?", session: "s1", round: "r3")
            try store.append(.agent, "late reply of the first round", session: "s1", round: "r1")
            try store.append(.agent, "a note outside any round", session: "s1", round: "")

            let s1 = try #require(store.session("s1"))
            #expect(s1.messages == 7)
            #expect(s1.turns == 2)  // r1 and r3; r1 coming back and "" count nothing
            #expect(s1.title == "What is the weather like in Oslo this afternoon?")
            #expect(store.session("s2")?.title == String(repeating: "x", count: 80))
            #expect(Set(store.sessions().map(\.id)) == ["s1", "s2"])
            #expect(store.sessionCount == 2)
            #expect(store.session("nobody") == nil)

            let history = try #require(try await store.history("s1"))
            #expect(history.map(\.index) == Array(0..<7))
            #expect(history.map(\.role) == [.skillCall, .user, .skillResult, .agent, .user, .agent, .agent])
            #expect(history[2].content == ["text": "rain"])
            #expect(history.map(\.round) == ["r1", "r1", "r1", "r1", "r3", "r1", ""])
            #expect(history[0].json["role"] == "skillCall")
            #expect(history[0].json["time"]?.stringValue?.hasSuffix("Z") == true)
            #expect(s1.json["turns"] == 2 && s1.json["session"] == "s1")
            #expect(try await store.history("nobody") == nil)

            try await store.flush()  // half committed, half queued: history joins both
            try store.append(.agent, "after the flush", session: "s1", round: "r3")
            #expect(try await store.history("s1")?.map(\.index) == Array(0..<8))
            await store.close()
        }
    }

    @Test("a skill call names the session until the first user message does")
    func titleFromSkill() async throws {
        try await withTemporaryDirectory { directory in
            let store = try await AgentStore.open(directory: directory, agent: "alpha", options: Self.manual)
            try store.append(.agent, "thinking", session: "s", round: "r")
            #expect(store.session("s")?.title == "")
            try store.append(.skillCall, ["skill": "search"], session: "s", round: "r")
            try store.append(.skillCall, ["skill": "fetch"], session: "s", round: "r")
            #expect(store.session("s")?.title == "search")
            try store.append(.user, "find the report", session: "s", round: "r")
            try store.append(.user, "another", session: "s", round: "r")
            #expect(store.session("s")?.title == "find the report")
            await store.close()
        }
    }

    @Test("memory lives in two scopes, lists by prefix in key order, and deletes")
    func memory() async throws {
        try await withTemporaryDirectory { directory in
            let store = try await AgentStore.open(directory: directory, agent: "alpha", options: Self.manual)
            try store.setMemory("user.name", "Ada", scope: .agent)
            try store.setMemory("user.city", "Oslo", scope: .agent)
            try store.setMemory("topic", ["weather", 3], scope: .agent)
            try store.setMemory("user.name", "Grace", scope: .session("s1"))
            #expect(store.memory("user.name", scope: .agent) == "Ada")
            #expect(store.memory("user.name", scope: .session("s1")) == "Grace")
            #expect(store.memory("user.name", scope: .session("s2")) == nil)
            let listed = store.memory(prefix: "user.", scope: .agent)
            #expect(listed.map(\.key) == ["user.city", "user.name"])
            #expect(listed.map(\.value) == ["Oslo", "Ada"])
            #expect(store.memory(prefix: "", scope: .agent).count == 3)

            try store.setMemory("user.name", ["first": "Ada"], scope: .agent)
            #expect(store.memory("user.name", scope: .agent) == ["first": "Ada"])
            #expect(try store.deleteMemory("user.city", scope: .agent))
            #expect(try !store.deleteMemory("user.city", scope: .agent))
            #expect(store.memory("user.city", scope: .agent) == nil)
            #expect(store.memory(prefix: "user.", scope: .session("s1")).map(\.key) == ["user.name"])
            await store.close()
        }
    }

    @Test("everything is there again after close and reopen")
    func reopen() async throws {
        try await withTemporaryDirectory { directory in
            let first = try await AgentStore.open(directory: directory, agent: "alpha")
            try first.append(.user, "hello", session: "s1", round: "r1")
            try first.append(.agent, ["text": "hi", "score": 0.5], session: "s1", round: "r1")
            try first.setMemory("k", ["nested": [1, 2, nil]], scope: .agent)
            try first.setMemory("k", true, scope: .session("s1"))
            try first.setMemory("gone", 1, scope: .agent)
            try first.deleteMemory("gone", scope: .agent)
            let summary = first.session("s1")
            let history = try await first.history("s1")
            await first.close()
            await first.close()  // idempotent

            let second = try await AgentStore.open(directory: directory, agent: "alpha")
            #expect(second.session("s1") == summary)
            #expect(try await second.history("s1") == history)
            #expect(second.memory("k", scope: .agent) == ["nested": [1, 2, nil]])
            #expect(second.memory("k", scope: .session("s1")) == true)
            #expect(second.memory("gone", scope: .agent) == nil)
            try second.append(.user, "again", session: "s1", round: "r2")
            #expect(second.session("s1")?.turns == 2)
            #expect(second.session("s1")?.messages == 3)
            await second.close()
        }
    }

    @Test("after a kill -9 what was flushed is there and what was not is gone")
    func crash() async throws {
        try await withTemporaryDirectory { directory in
            let live = (directory as NSString).appendingPathComponent("live")
            let copy = (directory as NSString).appendingPathComponent("copy")
            let store = try await AgentStore.open(directory: live, agent: "alpha", options: Self.manual)
            try store.append(.user, "flushed", session: "s1", round: "r1")
            try store.setMemory("kept", 1, scope: .agent)
            try await store.flush()
            try store.append(.user, "not flushed", session: "s1", round: "r2")
            try store.append(.user, "not flushed either", session: "s2", round: "r2")
            try store.setMemory("lost", 2, scope: .agent)
            // What a killed process leaves on disk: the database and its WAL as they are now, lock file aside.
            try FileManager.default.createDirectory(atPath: copy, withIntermediateDirectories: true)
            for suffix in ["", "-wal"] {
                let name = AgentStoreSchema.databaseName + suffix
                try FileManager.default.copyItem(
                    atPath: (live as NSString).appendingPathComponent(name),
                    toPath: (copy as NSString).appendingPathComponent(name))
            }

            let reopened = try await AgentStore.open(directory: copy, agent: "alpha")
            #expect(try await reopened.history("s1")?.map(\.content) == ["flushed"])
            #expect(reopened.session("s1")?.turns == 1)
            #expect(reopened.session("s2") == nil)
            #expect(reopened.memory("kept", scope: .agent) == 1)
            #expect(reopened.memory("lost", scope: .agent) == nil)
            await reopened.close()
            await store.close()
        }
    }

    @Test("every write between two commits goes into one transaction; the timer commits without a flush")
    func batching() async throws {
        try await withTemporaryDirectory { directory in
            let store = try await AgentStore.open(directory: directory, agent: "alpha", options: Self.manual)
            for index in 0..<500 {
                try store.append(.user, .string("message \(index)"), session: "s\(index % 7)", round: "r\(index)")
                try store.setMemory("key \(index % 50)", .number(Double(index)), scope: .agent)
            }
            #expect(store.commitCount == 0)
            try await store.flush()
            #expect(store.commitCount == 1)
            try await store.flush()  // nothing pending: no empty transaction
            #expect(store.commitCount == 1)
            await store.close()

            var options = AgentStore.Options()
            options.flushIntervalMs = 10
            let timed = try await AgentStore.open(directory: directory, agent: "alpha", options: options)
            try timed.append(.user, "on the timer", session: "t", round: "r")
            #expect(await eventually { timed.commitCount == 1 })
            let onDisk = try await timed.onStoreThread { database throws(SkillbusError) in
                try database.integer("SELECT count(*) FROM messages WHERE session = 't'")
            }
            #expect(onDisk == 1)
            await timed.close()
        }
    }

    @Test("a second open of the same directory is refused while the first is open, and works after it closed")
    func exclusive() async throws {
        try await withTemporaryDirectory { directory in
            let first = try await AgentStore.open(directory: directory, agent: "alpha")
            await #expect {
                try await AgentStore.open(directory: directory, agent: "beta")
            } throws: { error in
                guard Self.refusal(error, "locked"), let error = error as? SkillbusError else { return false }
                return error.message.contains(directory) && error.message.contains("pid \(getpid()) agent alpha")
            }
            await first.close()
            let second = try await AgentStore.open(directory: directory, agent: "beta")
            await second.close()
        }
    }

    @Test("a lock that outlives its holder's close a moment (a child not yet started holds it) is waited for")
    func lockReleasedLate() async throws {
        try await withTemporaryDirectory { directory in
            // An empty lock file under a flock: what a store's close leaves while a spawned child still holds a
            // copy of its descriptor. The copy goes 20 ms later, from a thread of its own (Dispatch's pool may be
            // busy with other tests past the opener's 200 ms).
            let path = (directory as NSString).appendingPathComponent(DirectoryLock.fileName)
            let copy = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0o644)
            #expect(copy >= 0 && flock(copy, LOCK_EX | LOCK_NB) == 0)
            Thread {
                usleep(20_000)
                close(copy)
            }.start()
            let store = try await AgentStore.open(directory: directory, agent: "alpha")
            await store.close()
        }
    }

    @Test("the synchronous init opens the store from a plain thread")
    func synchronousOpen() async throws {
        try await withTemporaryDirectory { directory in
            let outcome = await withCheckedContinuation { continuation in
                Thread {
                    continuation.resume(
                        returning: Result { () throws(SkillbusError) in try AgentStore(directory: directory, agent: "a")
                        })
                }.start()
            }
            let store = try outcome.get()
            try store.setMemory("k", 1, scope: .agent)
            #expect(store.databasePath.hasPrefix(store.directory))
            await store.close()
        }
    }

    @Test("after close, writes, history and flush are refused; reads still answer")
    func closed() async throws {
        try await withTemporaryDirectory { directory in
            let store = try await AgentStore.open(directory: directory, agent: "alpha")
            try store.setMemory("k", 1, scope: .agent)
            try store.append(.user, "hi", session: "s", round: "r")
            await store.close()
            #expect(store.memory("k", scope: .agent) == 1)
            #expect(throws: SkillbusError.self) { try store.setMemory("k", 2, scope: .agent) }
            await #expect(throws: SkillbusError.self) { try await store.history("s") }
            await #expect(throws: SkillbusError.self) { try await store.flush() }
        }
    }
}
