import Foundation
import Skillbus
import SkillbusZMQ
import Testing

/// A turn's deadline stops the agent's wait for its planner at once, as Ctrl-C does: an openai planner whose
/// endpoint holds its answer does not keep the agent `thinking` until its HTTP call gives up.
@Suite("Turn deadline", .serialized, .timeLimit(.minutes(2)))
struct TurnDeadlineTests {
    @Test("a turn's deadline cancels the openai planner's HTTP call in flight: the agent fails the turn at once")
    func deadlineEndsThePlannersCall() async throws {
        // The endpoint starts its answer, then says nothing for 20 s; the planner would wait 30 s for it.
        let server = try await ChatServer(answers: [
            ["stallMs": 20_000, "content": ["too late"]],
            ["content": ["still here"]],
        ])
        defer { server.stop() }
        let cluster = try await OpenAIPlannerTests().cluster(baseURL: server.baseURL, timeoutSeconds: 30)
        defer { cluster.terminate() }
        let feed = try await FeedRecorder.start(cluster, topics: ["agent.state"])
        let client = try await SkillbusClient.connect(endpoint: cluster.bus, context: try ZMQContext())
        defer { client.close() }

        let asked = ContinuousClock.now
        do {
            _ = try await client.ask("are you there?", timeout: .seconds(1))
            Issue.record("the turn succeeded although its endpoint said nothing")
        } catch {
            #expect(error.code == .timeout, "\(error)")
        }
        #expect(try server.requests().count == 1)
        // The agent's own deadline, not the endpoint's silence, ended the turn: failed soon after 1 s.
        var cursor = 0
        let failed = try await feed.first(after: &cursor, within: .seconds(5)) { event in
            event["agent"] == "thinker" && event["state"] == "failed"
        }
        #expect(failed["reason"]?.stringValue?.contains("ran out of time") == true, "\(failed.body)")
        #expect(failed.at - asked < .seconds(3), "the agent stayed thinking \(failed.at - asked) after the ask")
        // And it serves on: the next turn is answered while the first request's answer is still held.
        let (_, document) = try await client.ask("and now?", timeout: .seconds(10))
        #expect(document["reply"] == "still here")
    }
}
