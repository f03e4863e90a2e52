import Foundation
import Skillbus
import SkillbusZMQ
import Testing

/// Skills that need confirmation (file.write): approved by --yes, by a person at a terminal, or refused;
/// from a plain send and from a turn.
@Suite("Confirmation", .serialized, .timeLimit(.minutes(2)))
struct ConfirmationTests {
    func sandbox() throws -> String {
        let directory = NSTemporaryDirectory() + "skillbus-confirm-\(UUID().uuidString.prefix(8))"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        return directory
    }

    @Test("send: --yes approves, no terminal refuses (exit 2, nothing written), a person at a terminal says y")
    func send() async throws {
        let cluster = try await TestCluster()
        defer { cluster.terminate() }
        let directory = try sandbox()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        try await cluster.startWorker("writer", ["--skills", "file.write", "--sandbox", directory])
        let context = try ZMQContext()
        let feed = try await FeedSubscriber.connect(
            endpoint: cluster.feed, topics: ["invocation.pendingConfirmation", "registry.heartbeat"], context: context)
        defer { feed.close() }
        var events = feed.events.makeAsyncIterator()
        _ = try await events.next()  // the subscription is in place

        let (code, _) = try await cluster.send(["file.write", "path=yes.txt", "text=approved", "--yes"])
        #expect(code == 0)
        #expect(FileManager.default.contents(atPath: directory + "/yes.txt") == Data("approved".utf8))
        var pending: JSONValue?
        while pending == nil, let event = try await events.next() {
            if event.topic == "invocation.pendingConfirmation" { pending = event.event }
        }
        #expect(pending?["skill"] == "file.write" && pending?["parameters"]?["path"] == "yes.txt")

        let (refused, output) = try await cluster.send(["file.write", "path=no.txt", "text=refused"])
        #expect(refused == 2 && output.contains { $0.contains("confirmation_required") })
        #expect(!FileManager.default.fileExists(atPath: directory + "/no.txt"))

        // A person at a terminal (a pseudo-terminal the helper opens) answers the prompt with y.
        let helper = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent("interop/answer_prompt.py").path
        let person = try SkillbusProcess(
            [
                helper, "[y/N]", "y", skillbusBinary, "send", "file.write", "path=asked.txt", "text=typed",
                "--coordinator", cluster.bus,
            ], name: "person", executable: "/usr/bin/env", prefix: ["python3"])
        let personCode = try await person.waitForExit()
        await person.waitForOutputEnd()
        #expect(personCode == 0, "\(person.output)")
        #expect(person.output.contains { $0.contains("run file.write path=asked.txt text=typed? [y/N]") })
        #expect(FileManager.default.contents(atPath: directory + "/asked.txt") == Data("typed".utf8))
    }

    @Test("a turn's call to a skill that needs confirmation asks the client that asked for the turn")
    func turn() async throws {
        let cluster = try await TestCluster()
        defer { cluster.terminate() }
        let directory = try sandbox()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let rules: JSONValue = [
            "rules": [
                [
                    "intent": "write (?<text>\\w+) to (?<path>[a-z.]+)", "skill": "file.write",
                    "params": ["path": "{path}", "text": "{text}"], "reply": "wrote {result.bytes} bytes",
                ],
                [
                    "intent": "save (?<text>\\w+) to (?<path>[a-z.]+)", "skill": "file.write",
                    "params": ["path": "{path}", "text": "{text}"], "reply": "saved {result.bytes} bytes",
                    "errorReply": "could not save {path}: {error}",
                ],
            ]
        ]
        let config = directory + "-planner.json"
        try Data(
            JSONValue.object(["version": 1, "name": "planner", "skills": ["echo"], "planner": rules]).serialized()
        ).write(to: URL(fileURLWithPath: config))
        defer { try? FileManager.default.removeItem(atPath: config) }
        try await cluster.startWorker("planner", ["--config", config])
        try await cluster.startWorker("writer", ["--skills", "file.write", "--sandbox", directory])
        let (code, output) = try await runSkillbus(["ask", "write hello to t.txt", "--yes", "--coordinator", cluster.bus])
        #expect(code == 0 && output.contains("wrote 5 bytes"))
        #expect(FileManager.default.contents(atPath: directory + "/t.txt") == Data("hello".utf8))
        // Refused (no terminal to ask): the turn fails with the call's error, and ask exits as send does.
        let (refusedCode, refused) = try await runSkillbus(["ask", "write nope to u.txt", "--coordinator", cluster.bus])
        #expect(refusedCode == 2, "\(refused)")
        #expect(refused.contains { $0.contains("error: confirmation_required") })
        #expect(!refused.contains { $0.contains("wrote") }, "the failure was passed off as a result: \(refused)")
        #expect(!FileManager.default.fileExists(atPath: directory + "/u.txt"))
        // A rule with an errorReply answers the failure with it: the turn itself succeeded.
        let (savedCode, saved) = try await runSkillbus(["ask", "save nope to v.txt", "--coordinator", cluster.bus])
        #expect(savedCode == 0 && saved.contains { $0.contains("could not save v.txt:") }, "\(saved)")
        #expect(!saved.contains { $0.contains("saved") && !$0.contains("could not save") }, "\(saved)")
        #expect(!FileManager.default.fileExists(atPath: directory + "/v.txt"))
    }
}
