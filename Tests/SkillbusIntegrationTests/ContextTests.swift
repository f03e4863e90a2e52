import Foundation
import Skillbus
import SkillbusZMQ
import Synchronization
import Testing

/// Each agent's own context, with real processes and real SQLite files: memory and history survive
/// restarts, a session stays with its agent, and bad input is refused by name.
@Suite("Agents keep their own context", .serialized, .timeLimit(.minutes(3)))
struct ContextTests {
    static let memorySkills = "memory.set,memory.get,memory.list,memory.delete,echo"

    func temporaryDirectory(_ label: String) -> String {
        NSTemporaryDirectory() + "skillbus-context-\(label)-\(UUID().uuidString.prefix(8))"
    }

    /// A worker config file beside `dataDir`, named after it and the flush window (which only a config sets).
    func workerConfig(name: String, dataDir: String, flushIntervalMs: Int, extra: JSONValue = [:]) throws -> String {
        var object: [String: JSONValue] = [
            "version": 1, "name": .string(name), "dataDir": .string(dataDir),
            "flushIntervalMs": .number(Double(flushIntervalMs)),
            "skills": .array(Self.memorySkills.split(separator: ",").map { .string(String($0)) }),
        ]
        for (key, value) in extra.objectValue ?? [:] { object[key] = value }
        let path = dataDir + "-\(flushIntervalMs).json"
        try Data(JSONValue.object(object).serialized()).write(to: URL(fileURLWithPath: path))
        return path
    }

    /// Starts a worker and waits until the coordinator saw it join once more than before.
    func start(_ cluster: TestCluster, _ name: String, _ arguments: [String]) async throws -> SkillbusProcess {
        let joined = cluster.coordinator.output.count { $0.contains("agent '\(name)' joined") }
        let worker = try SkillbusProcess(
            ["worker", "--name", name, "--coordinator", cluster.bus, "--heartbeat-ms", "200"] + arguments, name: name)
        cluster.workers.withLock { $0[name + "-\(joined)"] = worker }
        do {
            try await waitUntil("\(name) to join") {
                cluster.coordinator.output.count { $0.contains("agent '\(name)' joined") } > joined
            }
        } catch {
            Issue.record("\(name) did not join; it said: \(worker.output.suffix(5).joined(separator: " | "))")
            throw error
        }
        return worker
    }

    func run(_ cluster: TestCluster, _ arguments: [String]) async throws -> (code: Int32, output: [String], json: JSONValue?) {
        let (code, output) = try await runSkillbus(arguments + ["--coordinator", cluster.bus])
        return (code, output, output.first { $0.hasPrefix("{") }.flatMap { try? JSONValue(parsing: $0) })
    }

    /// Whether the store in `directory` has committed `key` (agent scope) to disk: opens a copy of its files.
    func committed(_ key: String, in directory: String) async -> Bool {
        let copy = temporaryDirectory("copy")
        defer { try? FileManager.default.removeItem(atPath: copy) }
        try? FileManager.default.createDirectory(atPath: copy, withIntermediateDirectories: true)
        for file in ["context.sqlite", "context.sqlite-wal"] {
            try? FileManager.default.copyItem(atPath: directory + "/" + file, toPath: copy + "/" + file)
        }
        guard let store = try? await AgentStore.open(directory: copy, agent: "copy") else { return false }
        defer { Task { await store.close() } }
        return store.memory(key, scope: .agent) != nil
    }

    @Test("a value set in a session survives a graceful restart; sessions, history and memory show what happened")
    func survivesRestart() async throws {
        let cluster = try await TestCluster()
        defer { cluster.terminate() }
        let directory = temporaryDirectory("restart")
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let first = try await start(cluster, "keeper", ["--skills", Self.memorySkills, "--data-dir", directory])
        let (setCode, set) = try await cluster.sendJSON(["memory.set", "key=colour", "value:=\"blue\"", "--session", "s1"])
        #expect(setCode == 0 && set["result"]?["json"]?["scope"] == "session" && set["agent"] == "keeper")

        first.signal(SIGTERM)
        #expect(try await first.waitForExit() == 0)
        _ = try await start(cluster, "keeper", ["--skills", Self.memorySkills, "--data-dir", directory])

        let (_, got) = try await cluster.sendJSON(["memory.get", "key=colour", "--session", "s1"])
        #expect(got["result"]?["json"]?["value"] == "blue" && got["result"]?["json"]?["found"] == true)
        let (_, otherScope) = try await cluster.sendJSON(["memory.get", "key=colour", "scope=agent", "--session", "s1"])
        #expect(otherScope["result"]?["json"]?["found"] == false)

        let sessions = try await run(cluster, ["sessions", "--json"])
        let held = sessions.json?["sessions"]?.arrayValue ?? []
        #expect(sessions.code == 0 && held.count == 1 && held.first?["session"] == "s1")
        let keeper = held.first?["agents"]?.arrayValue ?? []
        // Three plain sends: six messages (each call and result), no turn (nobody asked the agent anything).
        #expect(keeper.count == 1 && keeper.first?["agent"] == "keeper")
        #expect(keeper.first?["messages"] == 6 && keeper.first?["turns"] == 0)
        let history = try await run(cluster, ["history", "s1", "--json"])
        let messages = history.json?["messages"]?.arrayValue ?? []
        #expect(history.code == 0 && history.json?["agents"] == ["keeper"])
        #expect(messages.allSatisfy { $0["agent"] == "keeper" })
        // memory.set before the restart, then two memory.get after it: a call and a result each.
        #expect(messages.map { $0["role"]?.stringValue ?? "" } == Array(repeating: ["skillCall", "skillResult"], count: 3).flatMap { $0 })
        #expect(messages.first?["content"]?["params"]?["value"] == "blue")
        let memory = try await run(cluster, ["memory", "--agent", "keeper", "--session", "s1", "--json"])
        #expect(memory.json?["memory"] == [["key": "colour", "value": "blue"]])
        let agents = try await cluster.agents()
        #expect(agents["agents"]?.arrayValue?.first?["sessions"] == 1 && agents["agents"]?.arrayValue?.first?["storage"] == "ok")
    }

    @Test("after kill -9 a restarted agent keeps every write its store had committed, and loses those it had not")
    func killNine() async throws {
        let cluster = try await TestCluster()
        defer { cluster.terminate() }
        let directory = temporaryDirectory("kill")
        defer {
            try? FileManager.default.removeItem(atPath: directory)
            for window in [50, 60_000] { try? FileManager.default.removeItem(atPath: directory + "-\(window).json") }
        }
        let quick = try workerConfig(name: "crasher", dataDir: directory, flushIntervalMs: 50)
        let first = try await start(cluster, "crasher", ["--config", quick])
        #expect(try await cluster.sendJSON(["memory.set", "key=old", "value:=1"]).code == 0)
        try await waitUntil("the write to reach the disk") { await committed("old", in: directory) }
        first.signal(SIGKILL)
        _ = try await first.waitForExit()

        // A window far longer than the test: the next write is in memory only when the process dies.
        let slow = try workerConfig(name: "crasher", dataDir: directory, flushIntervalMs: 60_000)
        let second = try await start(cluster, "crasher", ["--config", slow])
        #expect(try await cluster.sendJSON(["memory.get", "key=old"]).document["result"]?["json"]?["found"] == true)
        #expect(try await cluster.sendJSON(["memory.set", "key=new", "value:=2"]).code == 0)
        second.signal(SIGKILL)
        _ = try await second.waitForExit()

        _ = try await start(cluster, "crasher", ["--config", slow])
        let (_, old) = try await cluster.sendJSON(["memory.get", "key=old"])
        let (_, new) = try await cluster.sendJSON(["memory.get", "key=new"])
        #expect(old["result"]?["json"]?["value"] == 1 && new["result"]?["json"]?["found"] == false)
    }

    @Test("two agents never share a data directory: the second is refused and says who holds it")
    func oneAgentPerDirectory() async throws {
        let cluster = try await TestCluster()
        defer { cluster.terminate() }
        let directory = temporaryDirectory("shared")
        defer { try? FileManager.default.removeItem(atPath: directory) }
        _ = try await start(cluster, "owner", ["--skills", "echo", "--data-dir", directory])
        let intruder = try SkillbusProcess(
            ["worker", "--name", "intruder", "--coordinator", cluster.bus, "--data-dir", directory], name: "intruder")
        #expect(try await intruder.waitForExit() == 1)
        await intruder.waitForOutputEnd()
        let said = intruder.output.joined(separator: "\n")
        #expect(said.contains("store_refused") && said.contains(directory) && said.contains("owner"))
        // The owner keeps serving.
        #expect(try await cluster.sendJSON(["echo", "text=still here"]).code == 0)
    }

    @Test("a data directory whose database is no SQLite file is refused with what to do, and left as it was")
    func corruptStore() async throws {
        let directory = temporaryDirectory("corrupt")
        defer { try? FileManager.default.removeItem(atPath: directory) }
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        let garbage = Data("this is not a database, but it is somebody's file\n".utf8)
        try garbage.write(to: URL(fileURLWithPath: directory + "/context.sqlite"))
        let worker = try SkillbusProcess(
            ["worker", "--name", "careful", "--coordinator", "tcp://127.0.0.1:1", "--data-dir", directory],
            name: "careful")
        #expect(try await worker.waitForExit() == 1)
        await worker.waitForOutputEnd()
        let said = worker.output.joined(separator: "\n")
        #expect(said.contains("store_refused") && said.contains("move"), "\(said)")
        #expect(FileManager.default.contents(atPath: directory + "/context.sqlite") == garbage)
    }

    @Test("a session stays on the agent that holds it, and a second agent's memory is its own")
    func sessionAffinity() async throws {
        let cluster = try await TestCluster()
        defer { cluster.terminate() }
        let directories = ["left", "right"].map { ($0, temporaryDirectory($0)) }
        defer { for (_, directory) in directories { try? FileManager.default.removeItem(atPath: directory) } }
        for (name, directory) in directories {
            _ = try await start(cluster, name, ["--skills", Self.memorySkills, "--data-dir", directory])
        }
        let (_, set) = try await cluster.sendJSON(["memory.set", "key=k", "value=v", "--session", "sticky"])
        let holder = try #require(set["agent"]?.stringValue)
        for _ in 0..<6 {
            let (_, got) = try await cluster.sendJSON(["memory.get", "key=k", "--session", "sticky"])
            #expect(got["agent"]?.stringValue == holder && got["result"]?["json"]?["found"] == true)
        }
        let other = holder == "left" ? "right" : "left"
        let otherMemory = try await run(cluster, ["memory", "--agent", other, "--session", "sticky", "--json"])
        #expect(otherMemory.json?["memory"] == [])
        // The session has one agent, which holds all of it; the other agent holds no session at all.
        let sessions = try await run(cluster, ["sessions", "--json"])
        let listed = sessions.json?["sessions"]?.arrayValue ?? []
        #expect(listed.count == 1 && listed.first?["session"] == "sticky")
        let agents = listed.first?["agents"]?.arrayValue ?? []
        #expect(agents.count == 1 && agents.first?["agent"]?.stringValue == holder && agents.first?["messages"] == 14)
        let ofOther = try await run(cluster, ["sessions", "--agent", other, "--json"])
        #expect(ofOther.json?["agents"] == [["agent": .string(other), "sessions": []]])
    }

    @Test("bad input about context is refused by name, and the agent keeps serving")
    func badInput() async throws {
        let cluster = try await TestCluster()
        defer { cluster.terminate() }
        let directory = temporaryDirectory("bad")
        defer {
            try? FileManager.default.removeItem(atPath: directory)
            try? FileManager.default.removeItem(atPath: directory + "-300.json")
        }
        let config = try workerConfig(
            name: "strict", dataDir: directory, flushIntervalMs: 300, extra: ["maxMemoryValueBytes": 64])
        _ = try await start(cluster, "strict", ["--config", config])
        let longKey = String(repeating: "k", count: 1025)
        let cases: [([String], Int32, String)] = [
            (["memory.set", "key=\(longKey)", "value:=1"], 2, "1024"),
            (["memory.set", "key=big", "value=\(String(repeating: "x", count: 100))"], 2, "64"),
            (["memory.get", "key=x", "scope=session"], 2, "needs a session"),
            (["memory.get", "key=x", "scope=everywhere"], 2, "'agent' or 'session'"),
            (["echo", "text=x", "--session", String(repeating: "s", count: 129)], 2, "128"),
        ]
        for (arguments, code, words) in cases {
            let (got, output) = try await cluster.send(arguments)
            #expect(got == code, "\(arguments.first ?? "")")
            #expect(output.joined(separator: "\n").contains(words), "\(output)")
        }
        let unknownSession = try await run(cluster, ["history", "nobody-has-this"])
        #expect(unknownSession.code == 1 && unknownSession.output.contains { $0.contains("unknown_session") })
        let unknownAgent = try await run(cluster, ["memory", "--agent", "ghost"])
        #expect(unknownAgent.code == 1 && unknownAgent.output.contains { $0.contains("'ghost'") })
        #expect(try await cluster.sendJSON(["memory.set", "key=fine", "value:=true"]).code == 0)
        #expect(try await cluster.sendJSON(["memory.get", "key=fine"]).document["result"]?["json"]?["value"] == true)
    }

    /// Whether this process may mount a tmpfs (root with the capability): the full-disk test needs one.
    static let canMount: Bool = {
        let point = NSTemporaryDirectory() + "skillbus-mount-probe-\(getpid())"
        try? FileManager.default.createDirectory(atPath: point, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: point) }
        guard mount(["-t", "tmpfs", "-o", "size=64k", "tmpfs", point]) else { return false }
        return mount(["-l", point], command: "/bin/umount")
    }()

    @discardableResult
    static func mount(_ arguments: [String], command: String = "/bin/mount") -> Bool {
        ChildProcess.run(command, arguments) == .exited(0)
    }

    @Test(
        "a full disk: writes are refused storage_unavailable, AGENTS and the feed say so, reads go on, and all recovers",
        .enabled(if: ContextTests.canMount, "needs root and a tmpfs mount"))
    func fullDisk() async throws {
        let point = temporaryDirectory("disk")
        try FileManager.default.createDirectory(atPath: point, withIntermediateDirectories: true)
        try #require(Self.mount(["-t", "tmpfs", "-o", "size=1m", "tmpfs", point]))
        defer {
            Self.mount(["-l", point], command: "/bin/umount")
            try? FileManager.default.removeItem(atPath: point)
        }
        let cluster = try await TestCluster()
        defer { cluster.terminate() }
        let config = try workerConfig(name: "cramped", dataDir: point + "/agent", flushIntervalMs: 50)
        _ = try await start(cluster, "cramped", ["--config", config])
        let context = try ZMQContext()
        let feed = try await FeedSubscriber.connect(
            endpoint: cluster.feed, topics: ["agent.storage", "registry.heartbeat"], context: context)
        defer { feed.close() }
        var events = feed.events.makeAsyncIterator()
        _ = try await events.next()  // the first registry heartbeat: the subscription is in place
        func nextStorageEvent() async throws -> JSONValue? {
            while let next = try await events.next() { if next.topic == "agent.storage" { return next.event } }
            return nil
        }
        let client = try await SkillbusClient.connect(endpoint: cluster.bus, context: context)
        defer { client.close() }
        func set(_ key: String) async throws -> InvocationOutcome {
            try await client.invoke(
                "memory.set", parameters: ["key": .string(key), "value": .string(String(repeating: "v", count: 20_000))])
        }
        #expect(try await set("before").status == .ok)

        // Fill what is left of the disk, then write until the store says it cannot commit.
        let filler = point + "/filler"
        #expect(FileManager.default.createFile(atPath: filler, contents: nil))
        let handle = try FileHandle(forWritingTo: URL(fileURLWithPath: filler))
        let chunk = Data(repeating: 0, count: 4096)
        for _ in 0..<256 { guard (try? handle.write(contentsOf: chunk)) != nil else { break } }
        try? handle.close()
        var refusal: SkillbusError?
        for attempt in 0..<200 where refusal == nil {
            let outcome = try await set("full-\(attempt)")
            if outcome.status == .error { refusal = outcome.error }
        }
        #expect(refusal?.code == .storageUnavailable)
        try await waitUntil("AGENTS to show the problem") {
            try await cluster.agents()["agents"]?.arrayValue?.first?["storage"]?["code"] == "storage_unavailable"
        }
        let announced = try await nextStorageEvent()
        #expect(announced?["agent"] == "cramped" && announced?["problem"]?["code"] == "storage_unavailable")
        // Reads go on.
        let read = try await client.invoke("memory.get", parameters: ["key": "before"])
        #expect(read.status == .ok)

        // Space again: the queued writes commit by themselves and writes are taken again.
        try FileManager.default.removeItem(atPath: filler)
        try await waitUntil("AGENTS to show the store writing again") {
            try await cluster.agents()["agents"]?.arrayValue?.first?["storage"] == "ok"
        }
        let healed = try await nextStorageEvent()
        #expect(healed?["agent"] == "cramped" && healed?["problem"] == .null)
        #expect(try await set("after").status == .ok)
    }

}
