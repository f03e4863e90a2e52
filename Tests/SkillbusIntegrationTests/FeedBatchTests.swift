import Foundation
import Skillbus
import Testing

@testable import SkillbusZMQ

/// Feed batches (PROTOCOL §7) with real processes: a batch subscriber gets the very events, byte for byte and
/// in the same order, that a subscriber of single events gets; a batch of a prefix gets only its topics; and
/// a subscriber of everything never gets a batch.
@Suite("Feed batches", .serialized, .timeLimit(.minutes(2)))
struct FeedBatchTests {
    /// A SUB with one subscription that keeps every message as it came.
    private func subscriber(_ feed: String, _ subscription: [UInt8], _ context: ZMQContext) throws
        -> (socket: SocketLoop, inbox: MessageInbox)
    {
        let inbox = MessageInbox()
        let socket = try SocketLoop(
            context: context, type: .sub, name: "feed-batch-test",
            configure: { socket in
                try socket.subscribe(bytes: subscription)
                try socket.connect(feed)
            },
            onMessage: { inbox.deliver($0) })
        return (socket, inbox)
    }

    /// Messages until `enough` holds for the event bodies read so far (a batch gives one body per line).
    private func read(
        _ inbox: MessageInbox, until enough: ([[UInt8]]) -> Bool
    ) async throws -> (topics: [[UInt8]], bodies: [[UInt8]]) {
        var topics: [[UInt8]] = []
        var bodies: [[UInt8]] = []
        let deadline = ContinuousClock.now + .seconds(20)
        while !enough(bodies) {
            guard let message = await inbox.next(timeout: deadline - .now), message.count == 2 else {
                throw TimedOut(what: "feed events")
            }
            topics.append(message[0])
            if message[0].first == UInt8(ascii: "+") {
                bodies += message[1].split(separator: UInt8(ascii: "\n")).map(Array.init)
            } else {
                bodies.append(message[1])
            }
        }
        return (topics, bodies)
    }

    private static func event(_ body: [UInt8]) -> JSONValue { (try? JSONValue(parsing: body)) ?? .null }

    @Test("a batch subscriber gets every event of a single-event subscriber, same bytes, same order")
    func batchesMatchSingleEvents() async throws {
        let cluster = try await TestCluster()
        defer { cluster.terminate() }
        try await cluster.startWorker("alpha", ["--skills", "echo"])
        let context = try ZMQContext()
        let plain = try subscriber(cluster.feed, [], context)
        let batched = try subscriber(cluster.feed, [UInt8(ascii: "+"), 0], context)
        let rounds = try subscriber(cluster.feed, Array("+round.".utf8) + [0], context)
        defer { for socket in [plain.socket, batched.socket, rounds.socket] { socket.stop() } }
        let client = try await SkillbusClient.connect(endpoint: cluster.bus, context: context)
        defer { client.close() }
        func isHeartbeat(_ bodies: [[UInt8]]) -> Bool {
            bodies.contains { Self.event($0)["type"] == "registry.heartbeat" }
        }
        // Every subscription in place: a heartbeat for the two that take it, a warm-up round for the third.
        _ = try await read(plain.inbox, until: isHeartbeat)
        _ = try await read(batched.inbox, until: isHeartbeat)
        try await waitUntil("the round batch subscription to take effect") {
            _ = try await client.round(.invoke(skill: "echo", parameters: ["text": "warm-up"]))
            return await rounds.inbox.next(timeout: .milliseconds(500)) != nil
        }

        // Rounds at once, so that passes of the bus hold several events.
        let ids = (0..<12).map { "feed-batch-\($0)" }
        try await withThrowingTaskGroup(of: Void.self) { group in
            for id in ids {
                group.addTask {
                    let document = try await client.round(
                        .invoke(skill: "echo", parameters: ["text": .string(id)]), roundID: id)
                    #expect(document.status == .ok)
                }
            }
            try await group.waitForAll()
        }
        func ours(_ bodies: [[UInt8]]) -> [[UInt8]] {
            bodies.filter { ids.contains(Self.event($0)["round"]?.stringValue ?? "") }
        }
        func allDone(_ bodies: [[UInt8]]) -> Bool {
            ours(bodies).count { Self.event($0)["type"] == "round.done" } == ids.count
        }
        let single = try await read(plain.inbox, until: allDone)
        let batch = try await read(batched.inbox, until: allDone)
        let roundBatch = try await read(rounds.inbox, until: allDone)

        #expect(!single.topics.contains { $0.first == UInt8(ascii: "+") }, "a subscriber of everything got a batch")
        #expect(batch.topics.allSatisfy { $0 == [UInt8(ascii: "+"), 0] })
        #expect(roundBatch.topics.allSatisfy { $0 == Array("+round.".utf8) + [0] })
        // Every event of each round (accepted, dispatched, done, round done, ...), identical and in order.
        let types = ours(single.bodies).compactMap { Self.event($0)["type"]?.stringValue }
        #expect(
            Set(types).isSuperset(of: ["round.accepted", "invocation.dispatched", "invocation.done", "round.done"]))
        print("feed batches: the events of a round: \(Set(types).sorted())")
        #expect(ours(batch.bodies) == ours(single.bodies))
        let roundEvents = ours(single.bodies).filter {
            Self.event($0)["type"]?.stringValue?.hasPrefix("round.") == true
        }
        #expect(ours(roundBatch.bodies) == roundEvents)
        print(
            "feed batches: \(ours(single.bodies).count) events of 12 rounds in \(batch.topics.count) batch message(s)")
    }
}
