import Foundation
import Skillbus
import Testing

/// A skill's sub-call of a skill its own agent offers is, inside a round, one of the round's invocations like
/// any other: the round's single-flight decides whether it runs, and the round's document lists it.
@Suite("Sub-calls in a round", .serialized, .timeLimit(.minutes(2)))
struct SubCallRoundTests {
    @Test("text.report's text.stats on its own agent repeats the plan's stats step: it runs once, listed deduplicated")
    func ownAgentSubCallIsDeduplicated() async throws {
        let sandbox = NSTemporaryDirectory() + "skillbus-subcall-\(UUID().uuidString.prefix(8))"
        try FileManager.default.createDirectory(atPath: sandbox, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: sandbox) }
        let story = "the quick fox and the lazy dog\nthe end\n"
        try Data(story.utf8).write(to: URL(fileURLWithPath: sandbox + "/story.txt"))
        // The stats step's text is the file's: text.report's sub-call text.stats has the same parameters.
        let plan: JSONValue = [
            "steps": [
                ["id": "stats", "skill": "text.stats", "params": ["text": .string(story)]],
                ["id": "report", "skill": "text.report", "params": ["path": "story.txt"]],
            ]
        ]
        let planFile = sandbox + "-plan.json"
        try Data(plan.serialized()).write(to: URL(fileURLWithPath: planFile))
        defer { try? FileManager.default.removeItem(atPath: planFile) }

        let cluster = try await TestCluster()
        defer { cluster.terminate() }
        // One agent offers all three skills: before, both of text.report's sub-calls ran inside it, unseen.
        try await cluster.startWorker("alpha", ["--skills", "text.report,text.stats,file.read", "--sandbox", sandbox])
        let feed = try await FeedRecorder.start(cluster, topics: ["invocation.dispatched", "request."])
        let round = "subcall-\(UUID().uuidString.prefix(8))"
        let (code, document) = try await cluster.sendJSON(["--plan", planFile, "--round-id", round])
        #expect(code == 0 && document["status"] == "ok", "\(document)")
        #expect(document["result"]?["report"]?["json"]?["stats"] == document["result"]?["stats"]?["json"])

        let invocations = document["invocations"]?.arrayValue ?? []
        #expect(invocations.map { $0["skill"]?.stringValue ?? "" } == ["text.stats", "text.report", "file.read", "text.stats"])
        let read = invocations.first { $0["skill"] == "file.read" }
        #expect(read?["id"] == "sub-1" && read?["deduplicated"] == false && read?["agent"] == "alpha")
        let stats = invocations.last
        #expect(stats?["id"] == "sub-2" && stats?["status"] == "ok", "\(String(describing: stats))")
        #expect(stats?["deduplicated"] == true && stats?["reusedFrom"] == "stats", "\(String(describing: stats))")
        #expect(document["summary"]?["deduplicated"] == 1)

        // On the feed: the sub-call was deduplicated, and text.stats went to an agent once, for the step.
        var cursor = 0
        _ = try await feed.first(after: &cursor, within: .seconds(10)) { event in
            event.topic == "request.deduplicated" && event["round"]?.stringValue == round && event["skill"] == "text.stats"
        }
        let dispatched = feed.events.filter { event in
            event.topic.hasSuffix(".dispatched") && event["round"]?.stringValue == round && event["skill"] == "text.stats"
        }
        #expect(dispatched.map(\.topic) == ["invocation.dispatched"])
    }
}
