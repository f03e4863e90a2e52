import Foundation
import Skillbus
import SkillbusZMQ
import Synchronization
import Testing

/// The Python peer in Tests/interop, written from docs/PROTOCOL.md alone, against the Swift processes.
@Suite("A Python client and worker speak the protocol", .serialized, .timeLimit(.minutes(2)))
struct InteropTests {
    static let peerScript = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("interop/skillbus_peer.py").path

    /// Runs `python3 skillbus_peer.py ARGS…`; returns the process so the caller can wait on it.
    func python(_ arguments: [String], name: String) throws -> SkillbusProcess {
        try SkillbusProcess(
            ["-u", Self.peerScript] + arguments, name: name, executable: "/usr/bin/env", prefix: ["python3"])
    }

    @Test("Python and Swift clients and workers serve each other")
    func bothWays() async throws {
        let check = try SkillbusProcess(
            ["-c", "import zmq"], name: "pyzmq check", executable: "/usr/bin/env", prefix: ["python3"])
        try #require(try await check.waitForExit() == 0, "pyzmq is missing: python3 -m pip install pyzmq")

        let cluster = try await TestCluster()
        defer { cluster.terminate() }
        try await cluster.startWorker("swifty", ["--skills", "echo"])
        let worker = try python(["worker", "--coordinator", cluster.bus, "--name", "pyworker"], name: "python worker")
        defer { worker.signal(SIGKILL) }
        try await worker.waitForLine("python worker ready") { $0 == "python worker ready" }

        // Python client → Swift worker.
        let client = try python(
            ["client", "--coordinator", cluster.bus, "echo", "text=hello", "--timeout", "10"], name: "python client")
        #expect(try await client.waitForExit() == 0)
        await client.waitForOutputEnd()
        let reply = try JSONValue(parsing: client.output.first { $0.hasPrefix("{") } ?? "")
        #expect(reply["status"] == "ok" && reply["agent"] == "swifty")
        #expect(reply["result"]?["text"] == "hello")

        // Swift client → Python worker: a result, and a failure.
        let (code, reversed) = try await cluster.sendJSON(["py.reverse", "text=hello"])
        #expect(code == 0)
        #expect(reversed["agent"] == "pyworker" && reversed["result"]?["text"] == "olleh")
        let (failCode, failed) = try await cluster.sendJSON(["py.fail"])
        #expect(failCode == 1 && failed["error"]?["code"] == "skill_failed")
        let (invalidCode, invalid) = try await cluster.sendJSON(["py.reverse", "txt=x"])
        #expect(invalidCode == 2 && invalid["error"]?["code"] == "invalid_parameters")

        // Partial output from the Python worker (OUTPUT, PROTOCOL §4.1), before its result.
        let (countCode, counted) = try await cluster.sendJSON(["py.count", "n:=3"])
        #expect(countCode == 0 && counted["result"]?["text"] == "counted to 3")
        #expect(
            counted["invocations"]?.arrayValue?.first?["output"]
                == [["text": "1", "type": "text"], ["text": "2", "type": "text"], ["text": "3", "type": "text"]])

        // A worker that keeps no context answers questions about it `unsupported` (PROTOCOL §3.6).
        let swiftClient = try await SkillbusClient.connect(endpoint: cluster.bus, context: try ZMQContext())
        defer { swiftClient.close() }
        do {
            _ = try await swiftClient.query(.sessions, agent: "pyworker")
            Issue.record("the Python worker answered a QUERY ok")
        } catch {
            #expect(error.code == .unsupported && error.message.contains("pyworker"))
        }

        // The Python worker leaves cleanly on SIGTERM and the bus notices at once.
        worker.signal(SIGTERM)
        #expect(try await worker.waitForExit() == 0)
        try await cluster.coordinator.waitForLine("pyworker to leave") {
            $0.contains("agent 'pyworker' left: disconnected")
        }
    }

    @Test("the Python peer's JSON reader accepts and refuses what the Swift reader does (PROTOCOL §2)")
    func pythonReaderMatches() async throws {
        func nested(_ open: String, _ inner: String, _ close: String, _ count: Int) -> [UInt8] {
            Array((String(repeating: open, count: count) + inner + String(repeating: close, count: count)).utf8)
        }
        let documents: [[UInt8]] = [
            nested("[", "1", "]", 128), nested("[", "", "]", 129), nested(#"{"a":"#, "[0]", "}", 127),
            nested(#"{"a":"#, "[0]", "}", 128), Array(#""\ud83d\ude00""#.utf8), Array(#""\ud83d""#.utf8),
            Array(#""\ude00""#.utf8), Array(#""\ud83d\u0041""#.utf8), Array(#""\u0000""#.utf8), Array("1e-400".utf8),
            Array("1e400".utf8), Array(String(repeating: "9", count: 308).utf8),
            Array(String(repeating: "9", count: 400).utf8), Array("NaN".utf8), Array("-Infinity".utf8),
            Array("+1".utf8), Array("01".utf8), Array("1.".utf8), Array(".5".utf8), Array("[1,]".utf8),
            Array(#"{"a":1,"a":2}"#.utf8), Array("{\"\u{E9}\":1,\"e\u{301}\":2}".utf8), Array(#"{"a":1,"A":2}"#.utf8),
            [0xEF, 0xBB, 0xBF, 0x31], [0x0C, 0x31], [0xC2, 0xA0, 0x31], [0x22, 0x09, 0x22], [0x22, 0xC0, 0xAF, 0x22],
            [0x22, 0xED, 0xA0, 0x80, 0x22], [0x22, 0xFF, 0x22], Array(" \t\r\n[]\n".utf8), Array("1 2".utf8), [],
        ]
        let swift = documents.map { (try? JSONValue(parsing: $0)) != nil }
        let hex = documents.map { $0.map { String(format: "%02x", $0) }.joined() }
        let program = """
            import sys; sys.path.insert(0, sys.argv[1]); import skillbus_peer as p
            def ok(h):
                try: p.parse_json(bytes.fromhex(h)); return "1"
                except ValueError: return "0"
            print("".join(ok(h) for h in sys.argv[2:]))
            """
        let directory = URL(fileURLWithPath: Self.peerScript).deletingLastPathComponent().path
        let check = try SkillbusProcess(
            ["-c", program, directory] + hex, name: "python reader", executable: "/usr/bin/env", prefix: ["python3"])
        #expect(try await check.waitForExit() == 0)
        await check.waitForOutputEnd()
        let line = check.output.first { !$0.isEmpty && $0.allSatisfy { $0 == "0" || $0 == "1" } } ?? ""
        let python = line.map { $0 == "1" }
        #expect(python.count == documents.count, "\(check.output)")
        for (index, (ours, theirs)) in zip(swift, python).enumerated() {
            #expect(ours == theirs, "document \(index) (\(hex[index].prefix(40))): Swift \(ours), Python \(theirs)")
        }
    }

    @Test("a Python registry replica, written from the protocol document, holds what the bus holds")
    func pythonReplica() async throws {
        let cluster = try await TestCluster(coordinatorArguments: ["--heartbeat-ms", "200"])
        defer { cluster.terminate() }
        try await cluster.startWorker("alpha", ["--skills", "echo,math.eval"])
        // Started before beta and gamma exist: it must follow live updates, not only a snapshot.
        let replica = try python(
            [
                "replica", "--coordinator", cluster.bus, "--feed", cluster.feed, "--until-agents", "alpha,beta,gamma",
                "--timeout", "30",
            ], name: "python replica")
        defer { replica.signal(SIGKILL) }
        _ = try await replica.waitForLine("the python replica's first snapshot") { $0.contains("snapshot loaded") }
        try await cluster.startWorker("beta", ["--skills", "echo,text.stats"])
        try await cluster.startWorker("gamma", ["--skills", "file.read"])
        #expect(try await replica.waitForExit(timeout: .seconds(40)) == 0)
        await replica.waitForOutputEnd()
        let python = try JSONValue(parsing: replica.output.first { $0.hasPrefix("{") } ?? "{}")
        let swift = try await cluster.registryDocument()
        #expect(python["agents"] == swift["agents"])
        #expect(python["digest"] == swift["digest"])
        #expect(python["epoch"] == swift["epoch"] && python["seq"] == swift["seq"])
    }

    @Test("a Python client, written from the protocol document, runs plans and fan-outs as rounds")
    func pythonRounds() async throws {
        let cluster = try await TestCluster()
        defer { cluster.terminate() }
        let configs = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().appendingPathComponent("configs").path
        try await cluster.startWorker("alpha", ["--skills", "echo,math.eval,text.stats,text.grep,text.report"])
        try await cluster.startWorker("gamma", ["--skills", "file.read,echo", "--sandbox", configs + "/sandbox"])
        func round(_ arguments: [String]) async throws -> (Int32, JSONValue) {
            let client = try python(["round", "--coordinator", cluster.bus] + arguments, name: "python round")
            let code = try await client.waitForExit()
            await client.waitForOutputEnd()
            return (code, try JSONValue(parsing: client.output.first { $0.hasPrefix("{") } ?? "{}"))
        }

        let (planCode, plan) = try await round(["--plan", configs + "/plans/report.json", "--round-id", "py-plan"])
        #expect(planCode == 0 && plan["status"] == "ok")
        let subCall = plan["invocations"]?.arrayValue?.first { $0["skill"] == "file.read" && $0["id"] != "read" }
        #expect(subCall?["deduplicated"] == true && subCall?["reusedFrom"] == "read")
        // The same round id again: the stored document, whichever client asks.
        let (_, swiftCopy) = try await cluster.sendJSON([
            "--plan", configs + "/plans/report.json", "--round-id", "py-plan",
        ])
        var unmarked = swiftCopy.objectValue ?? [:]
        #expect(unmarked.removeValue(forKey: "stored") == true)
        #expect(JSONValue.object(unmarked) == plan)

        let (voteCode, vote) = try await round(["--fanout", "echo", "text=hi", "--aggregate", "majority"])
        #expect(voteCode == 0 && vote["aggregate"]?["votes"] == 2)
        let (mathCode, math) = try await round(["--invoke", "math.eval", "expression=6*7"])
        #expect(mathCode == 0 && math["result"]?["json"]?["value"] == 42)
    }
}
