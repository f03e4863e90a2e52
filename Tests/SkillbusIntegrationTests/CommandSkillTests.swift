import Foundation
import Skillbus
import SkillbusZMQ
import Synchronization
import Testing

/// Command skills with real processes: a worker runs programs (shell scripts written here, `cat`, `yes`,
/// the shipped examples) as skills, streams their lines, and stops their whole process group.
@Suite("Command skills", .serialized, .timeLimit(.minutes(3)))
struct CommandSkillTests {
    static let repository = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent().path

    /// The scripts, by file name: each gets its own command skill below.
    static let scripts: [String: String] = [
        "args.sh": #"printf '%s\n' "$#"; for a in "$@"; do printf '[%s]\n' "$a"; done"#,
        "fail.sh": "echo 'warming up' >&2\necho 'disk on fire' >&2\nexit 3",
        "hang.sh": "sleep 30 &\necho $!\nwait",
        "leave.sh": "sleep 30 &\necho $!",
        "env.sh": "env",
        "notjson.sh": "echo 'this is not json'",
        "where.sh": "pwd",
    ]

    func command(
        _ identifier: String, _ command: [String], parameters: JSONValue = [], extra: [String: JSONValue] = [:]
    ) -> JSONValue {
        var object: [String: JSONValue] = [
            "identifier": .string(identifier), "parameters": parameters, "command": .array(command.map { .string($0) }),
        ]
        for (key, value) in extra { object[key] = value }
        return .object(object)
    }

    /// A coordinator and a worker "runner" whose sandbox holds the scripts; SKB_ALLOWED and SKB_SECRET are
    /// in the worker's environment, only the first allowed through.
    func cluster(_ directory: String) async throws -> TestCluster {
        let sandbox = directory + "/sandbox"
        try FileManager.default.createDirectory(atPath: sandbox + "/work", withIntermediateDirectories: true)
        for (name, body) in Self.scripts {
            let path = directory + "/" + name
            try Data(("#!/bin/sh\n" + body + "\n").utf8).write(to: URL(fileURLWithPath: path))
            try FileManager.default.setAttributes([.posixPermissions: 0o755], ofItemAtPath: path)
        }
        let text: JSONValue = [["name": "text", "type": "string"]]
        let commands: [JSONValue] = [
            command("t.args", [directory + "/args.sh", "{text}", "--flag={flag}", "{{literal}}"],
                parameters: [["name": "text", "type": "string"], ["name": "flag", "type": "string", "required": false]]),
            command("t.echojson", ["cat"], parameters: [["name": "a", "type": "integer"], ["name": "b", "type": "string", "required": false, "default": "dflt"]],
                extra: ["stdin": "json", "result": "json"]),
            command("t.fail", [directory + "/fail.sh"]),
            command("t.hang", [directory + "/hang.sh"], extra: ["timeoutMs": 800]),
            command("t.slow", [directory + "/hang.sh"], extra: ["timeoutMs": 60_000]),
            command("t.leave", [directory + "/leave.sh"]),
            command("t.env", [directory + "/env.sh"], extra: ["environment": ["SKB_ALLOWED", "HOME_NOT_SET_HERE"]]),
            command("t.notjson", [directory + "/notjson.sh"], extra: ["result": "json"]),
            command("t.where", [directory + "/where.sh"], extra: ["workingDirectory": "work"]),
            command("t.flood", ["yes", "{text}"], parameters: text),
            command("sys.countdown", [Self.repository + "/configs/skills/countdown.sh", "{from}", "{ms}"],
                parameters: [["name": "from", "type": "integer"], ["name": "ms", "type": "integer"]]),
            command("py.wordfreq", [Self.repository + "/configs/skills/wordfreq.py"],
                parameters: [["name": "text", "type": "string"], ["name": "top", "type": "integer", "required": false, "default": 5]],
                extra: ["stdin": "json", "result": "json", "stream": false]),
        ]
        let config = directory + "/runner.json"
        try Data(
            JSONValue.object([
                "version": 1, "name": "runner", "skills": ["echo"], "sandbox": .string(sandbox),
                "maxOutputBytes": 4000, "commands": .array(commands),
            ]).serialized()
        ).write(to: URL(fileURLWithPath: config))
        let cluster = try await TestCluster()
        let worker = try SkillbusProcess(
            ["worker", "--name", "runner", "--coordinator", cluster.bus, "--heartbeat-ms", "200", "--config", config],
            name: "runner", environment: ["SKB_ALLOWED": "yes", "SKB_SECRET": "no"])
        cluster.workers.withLock { $0["runner"] = worker }
        try await cluster.coordinator.waitForLine("runner to join") { $0.contains("agent 'runner' joined") }
        return cluster
    }

    func withCluster(_ body: (TestCluster, SkillbusClient, String) async throws -> Void) async throws {
        let directory = NSTemporaryDirectory() + "skillbus-commands-\(UUID().uuidString.prefix(8))"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let cluster = try await cluster(directory)
        defer { cluster.terminate() }
        let client = try await SkillbusClient.connect(endpoint: cluster.bus, context: try ZMQContext())
        defer { client.close() }
        try await body(cluster, client, directory)
    }

    /// The text parts a call streamed.
    final class Lines: Sendable {
        let seen = Mutex<[String]>([])
        func note(_ batch: OutputBatch) {
            seen.withLock { $0 += batch.parts.compactMap { if case .text(let text) = $0 { text } else { nil } } }
        }
        var all: [String] { seen.withLock { $0 } }
    }

    /// Whether a process is still there (a zombie waiting for its parent to reap it counts as gone).
    static func alive(_ pid: Int32) -> Bool {
        guard kill(pid, 0) == 0 else { return false }
        let stat = (try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8)) ?? ""
        return !(stat.split(separator: ")").last?.trimmingCharacters(in: .whitespaces).hasPrefix("Z") ?? false)
    }

    @Test("text and JSON results; each stdout line streams; a value with spaces and metacharacters is one argument")
    func success() async throws {
        try await withCluster { _, client, _ in
            let tricky = "two words; $(rm -rf /) `x` \"q\" 'y' | *"
            let lines = Lines()
            let args = try await client.invoke("t.args", parameters: ["text": .string(tricky)], onOutput: lines.note)
            // --flag={flag} is gone with its absent parameter; {{literal}} is one brace pair.
            #expect(args.status == .ok && args.result == .text("2\n[\(tricky)]\n[{literal}]\n"))
            #expect(lines.all == ["2", "[\(tricky)]", "[{literal}]"])

            let echoed = try await client.invoke("t.echojson", parameters: ["a": 7])
            #expect(echoed.result == .json(["a": 7, "b": "dflt"]))

            let countdown = Lines()
            let counted = try await client.invoke(
                "sys.countdown", parameters: ["from": 3, "ms": 50], onOutput: countdown.note)
            #expect(counted.result == .text("3\n2\n1\nliftoff\n") && countdown.all == ["3", "2", "1", "liftoff"])

            let frequencies = try await client.invoke("py.wordfreq", parameters: ["text": "b a b", "top": 1])
            #expect(frequencies.result == .json(["words": 3, "distinct": 2, "top": [["word": "b", "count": 2]]]))

            let location = try await client.invoke("t.where")
            #expect(location.result?.humanReadable.hasSuffix("/sandbox/work\n") == true)
        }
    }

    @Test("a non-zero exit is command_failed with the exit code and the last lines of stderr; bad JSON too")
    func failures() async throws {
        try await withCluster { _, client, _ in
            let failed = try await client.invoke("t.fail")
            #expect(failed.status == .error && failed.error?.code == .commandFailed)
            #expect(failed.error?.message == "'t.fail' exited with code 3: disk on fire")
            #expect(failed.error?.details?["exitCode"] == 3)
            #expect(failed.error?.details?["stderr"] == ["warming up", "disk on fire"])

            let notJSON = try await client.invoke("t.notjson")
            #expect(notJSON.error?.code == .commandFailed)
            #expect(notJSON.error?.message.contains("its standard output is not JSON") == true)
        }
    }

    @Test("only PATH and the allowed variables reach the program")
    func environment() async throws {
        try await withCluster { _, client, _ in
            let outcome = try await client.invoke("t.env")
            let variables = Set((outcome.result?.humanReadable ?? "").split(separator: "\n").map(String.init))
            #expect(variables.contains("SKB_ALLOWED=yes"))
            #expect(variables.contains { $0.hasPrefix("PATH=") })
            #expect(!variables.contains { $0.hasPrefix("SKB_SECRET") || $0.hasPrefix("HOME=") || $0.hasPrefix("XDG_") })
            // `sh` may add a few of its own (PWD, say); nothing else of the worker's comes through.
            #expect(variables.count <= 4)
        }
    }

    @Test("timeout and cancel stop the whole process group: the program's own child is gone too")
    func processGroups() async throws {
        try await withCluster { _, client, _ in
            // The skill's own timeout (800 ms).
            let hung = Lines()
            let timedOut = try await client.invoke("t.hang", timeout: .seconds(20), onOutput: hung.note)
            #expect(timedOut.error?.code == .timeout)
            #expect(timedOut.error?.message == "'t.hang' ran longer than its timeout of 800 ms; its processes were stopped")
            let child = try #require(hung.all.first.flatMap { Int32($0) })
            try await waitUntil("the timed-out program's child to be gone", timeout: .seconds(5)) { !Self.alive(child) }

            // The caller's deadline: the bus answers timeout and sends CANCEL; the worker stops the group.
            let slow = Lines()
            let cancelled = try await client.invoke("t.slow", timeout: .milliseconds(1500), onOutput: slow.note)
            #expect(cancelled.error?.code == .timeout)
            let other = try #require(slow.all.first.flatMap { Int32($0) })
            try await waitUntil("the cancelled program's child to be gone", timeout: .seconds(5)) { !Self.alive(other) }

            // A program that ends by itself leaves nothing running behind it either.
            let left = Lines()
            let ended = try await client.invoke("t.leave", onOutput: left.note)
            #expect(ended.status == .ok)
            let orphan = try #require(left.all.first.flatMap { Int32($0) })
            try await waitUntil("the finished program's child to be gone", timeout: .seconds(5)) { !Self.alive(orphan) }
        }
    }

    @Test("output is capped: a program that floods stops with output_too_large, and the worker goes on")
    func flood() async throws {
        try await withCluster { _, client, _ in
            let flood = Lines()
            let outcome = try await client.invoke("t.flood", parameters: ["text": "y"], onOutput: flood.note)
            #expect(outcome.status == .error && outcome.error?.code == .outputTooLarge)
            #expect(!flood.all.isEmpty && flood.all.allSatisfy { $0 == "y" })
            let echo = try await client.invoke("echo", parameters: ["text": "after the flood"])
            #expect(echo.result == .text("after the flood"))
        }
    }
}
