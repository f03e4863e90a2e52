import Foundation
import Skillbus
import SkillbusZMQ
import Synchronization
import Testing

/// Streamed output with real processes: a skill's parts reach the client in batches before its result,
/// identical requests that joined share them, the feed shows them, a flood is cut at the agent's limit,
/// and `skillbus send` prints them.
@Suite("Streamed output", .serialized, .timeLimit(.minutes(3)))
struct OutputTests {
    /// A coordinator and a worker offering text.lines and echo, with a small output limit.
    func cluster() async throws -> TestCluster {
        let cluster = try await TestCluster()
        let config = NSTemporaryDirectory() + "skillbus-output-\(UUID().uuidString.prefix(8)).json"
        try Data(
            JSONValue.object([
                "version": 1, "name": "streamer", "skills": ["text.lines", "echo"], "maxOutputBytes": 2000,
            ]).serialized()
        ).write(to: URL(fileURLWithPath: config))
        defer { try? FileManager.default.removeItem(atPath: config) }
        try await cluster.startWorker("streamer", ["--config", config])
        return cluster
    }

    /// What a caller heard, in order: each batch with when it came, then the outcome.
    final class Heard: Sendable {
        let batches = Mutex<[(OutputBatch, ContinuousClock.Instant)]>([])
        func note(_ batch: OutputBatch) { batches.withLock { $0.append((batch, .now)) } }
        var parts: [OutputPart] { batches.withLock { $0.flatMap(\.0.parts) } }
    }

    static let fiveLines: JSONValue = ["text": "a\nb\nc\nd\ne", "delayMs": 150]
    /// Slow enough that a second client joins while it runs, also on a loaded machine (1.6 s after its first line).
    static let fiveSlowLines: JSONValue = ["text": "a\nb\nc\nd\ne", "delayMs": 400]

    @Test("parts emitted over time arrive in several batches, every one before the result")
    func batchesBeforeTheResult() async throws {
        let cluster = try await cluster()
        defer { cluster.terminate() }
        let client = try await SkillbusClient.connect(endpoint: cluster.bus, context: try ZMQContext())
        defer { client.close() }
        let heard = Heard()
        let outcome = try await client.invoke("text.lines", parameters: Self.fiveLines, onOutput: heard.note)
        let answered = ContinuousClock.now
        #expect(outcome.status == .ok && outcome.result == .json(["lines": 5]))
        #expect(heard.parts == ["a", "b", "c", "d", "e"].map { .text($0) })
        let batches = heard.batches.withLock { $0 }
        #expect(batches.count >= 2)
        // The first line came while the skill still had four more to send, 150 ms apart.
        let first = try #require(batches.first)
        #expect(answered - first.1 >= .milliseconds(300))
    }

    @Test("an identical request that joins the running execution gets its output too; the feed shows it once")
    func deduplicatedWaiters() async throws {
        let cluster = try await cluster()
        defer { cluster.terminate() }
        let context = try ZMQContext()
        let feed = try await FeedSubscriber.connect(
            endpoint: cluster.feed, topics: ["invocation.output", "registry.heartbeat"], context: context)
        defer { feed.close() }
        var events = feed.events.makeAsyncIterator()
        _ = try await events.next()  // the subscription is in place
        let first = try await SkillbusClient.connect(endpoint: cluster.bus, context: context)
        let second = try await SkillbusClient.connect(endpoint: cluster.bus, context: context)
        defer {
            first.close()
            second.close()
        }
        let (one, two) = (Heard(), Heard())
        let running = Task {
            try await first.invoke("text.lines", parameters: Self.fiveSlowLines, roundID: "shared", onOutput: one.note)
        }
        try await waitUntil("the first line") { !one.parts.isEmpty }
        let joined = try await second.invoke(
            "text.lines", parameters: Self.fiveSlowLines, roundID: "shared", onOutput: two.note)
        let original = try await running.value
        #expect(original.status == .ok && joined.status == .ok && joined.result == original.result)
        #expect(one.parts.count == 5)
        // The joiner heard the rest, from where it joined: `first` says how many it missed.
        let twoBatches = two.batches.withLock { $0.map(\.0) }
        let missed = try #require(twoBatches.first).first
        #expect(missed >= 1 && two.parts == Array(one.parts.dropFirst(missed)))
        // The feed has each batch once, with the INVOKE's id.
        var published: [OutputPart] = []
        while published.count < 5, let event = try await events.next() {
            guard event.topic == "invocation.output" else { continue }
            #expect(event.event["round"] == "shared" && event.event["agent"] == "streamer")
            #expect(event.event["dispatch"]?.stringValue?.hasPrefix("i") == true)
            for part in event.event["parts"]?.arrayValue ?? [] { published.append(try OutputPart(json: part)) }
        }
        #expect(published == one.parts)
    }

    @Test("a flood is cut at the agent's maxOutputBytes with output_too_large, and the agent goes on serving")
    func flood() async throws {
        let cluster = try await cluster()
        defer { cluster.terminate() }
        let client = try await SkillbusClient.connect(endpoint: cluster.bus, context: try ZMQContext())
        defer { client.close() }
        let heard = Heard()
        let text = (0..<500).map { "line \($0)" }.joined(separator: "\n")
        let outcome = try await client.invoke("text.lines", parameters: ["text": .string(text)], onOutput: heard.note)
        #expect(outcome.status == .error && outcome.error?.code == .outputTooLarge)
        #expect(outcome.error?.message.contains("more than 2000 bytes of output") == true)
        #expect(heard.parts.count > 10 && heard.parts.count < 100)
        let echo = try await client.invoke("echo", parameters: ["text": "still here"])
        #expect(echo.status == .ok && echo.result == .text("still here"))
    }

    @Test("skillbus send prints the lines as they come; --json has them in the document; --stream one event a line")
    func sendCommand() async throws {
        let cluster = try await cluster()
        defer { cluster.terminate() }
        let arguments = ["text.lines", "text=one\ntwo\nthree", "delayMs:=30"]
        let (code, output) = try await cluster.send(arguments)
        #expect(code == 0)
        let printed = output.filter { ["one", "two", "three"].contains($0) }
        #expect(printed == ["one", "two", "three"])
        #expect(output.contains { $0.hasPrefix("✓ round") })

        let (jsonCode, document) = try await cluster.sendJSON(arguments)
        #expect(jsonCode == 0)
        let invocation = document["invocations"]?.arrayValue?.first
        #expect(invocation?["output"] == [["text": "one", "type": "text"], ["text": "two", "type": "text"], ["text": "three", "type": "text"]])

        let (streamCode, lines) = try await cluster.send(arguments + ["--stream"])
        #expect(streamCode == 0)
        let events = lines.filter { $0.hasPrefix("{") }.compactMap { try? JSONValue(parsing: $0) }
        #expect(events.count >= 2 && events.last?["event"] == "round")
        #expect(events.last?["document"]?["status"] == "ok")
        let outputs = events.dropLast()
        #expect(outputs.allSatisfy { $0["event"] == "output" && $0["invocation"] == "text.lines" })
        #expect(outputs.flatMap { $0["parts"]?.arrayValue ?? [] }.compactMap { $0["text"]?.stringValue } == ["one", "two", "three"])
    }
}
