import Foundation
import Testing

@testable import Skillbus

@Suite("Feed events as published")
struct FeedEventTests {
    static let turn = TurnRef(session: "s1", turn: "t1")
    static let failure = SkillbusError(.skillFailed, "it broke")

    /// One event of every kind, with the optional members present and absent.
    static let events: [FeedEvent] = [
        .agentJoined(agent: "a", skills: ["echo", "math.add"], capacity: 4),
        .agentLeft(agent: "a", reason: "heartbeat"),
        .agentState(agent: "a", state: .executingSkill("echo")),
        .agentState(agent: "a", state: .delegating("b")),
        .turnState(agent: "a", state: .failed("no"), turn: turn),
        .confirmationPending(round: "r", confirmation: "c", skill: "rm", parameters: ["path": "/x"]),
        .confirmationDone(confirmation: "c", approved: true),
        .turnStream(agent: "a", turn: "t1", text: "hel\"lo"),
        .turnCall(
            agent: "a", turn: turn,
            call: TurnCall(skill: "echo", parameters: ["text": "hi"], agent: "b", durationMs: 0.5, outcome: .success(.text("hi")))),
        .turnDelegated(agent: "a", turn: turn, round: "r", to: "b", role: "critic", message: "m", child: "t2"),
        .turnDelegated(agent: "a", turn: turn, round: "r", to: "b", role: nil, message: "m", child: "t2"),
        .turnHandoff(agent: "a", turn: turn, to: "b", note: "yours", next: "t3"),
        .registrationRefused(agent: "a", error: failure),
        .agentStorage(agent: "a", problem: failure),
        .agentStorage(agent: "a", problem: nil),
        .requestQueued(round: "r", request: "q", skill: "echo", waiting: 3, waitingFor: "capacity"),
        .requestDispatched(round: "r", request: "q", skill: "echo", agent: "a", invocation: "i1"),
        .requestDeduplicated(round: "r", request: "q", skill: "echo", finished: true),
        .requestDone(round: "r", request: "q", skill: "echo", agent: "a", status: .ok, durationMicros: 1500, payload: []),
        .requestDone(
            round: "r", request: "q", skill: "echo", agent: "a", status: .error, durationMicros: 7,
            payload: Array(#"{"code":"skill_failed","message":"no"}"#.utf8)),
        .roundAccepted(round: "r", shape: "invoke", invocations: ["main"]),
        .invocationDispatched(round: "r", invocation: "main", skill: "echo", agent: "a", dispatch: "i2"),
        .invocationDeduplicated(round: "r", invocation: "b", reusing: "a"),
        .requestCached(round: "r", request: "q", skill: "echo", agent: "a"),
        .invocationCached(round: "r", invocation: "main", skill: "echo", agent: "a"),
        .invocationDone(
            round: "r", invocation: "main", skill: "echo", agent: "a", status: .ok, durationMicros: 250, deduplicated: false),
        .invocationCancelled(round: "r", invocation: "main", agent: "a", reason: "client"),
        .requestCancelled(round: "r", request: "q", skill: "echo", agent: "a", reason: "deadline"),
        .requestRetrying(
            round: "r", request: "q", skill: "echo", agent: "a", attempt: 2, error: failure, backoffMicros: 100_000),
        .invocationRetrying(
            round: "r", invocation: "main", skill: "echo", agent: "a", attempt: 1, error: failure, backoffMicros: 5),
        .cancelIgnored(round: "r", request: "q", skill: "echo", agent: "a", invocation: "i3", waitedMs: 2000),
        .invocationOutput(
            round: "r", skill: "echo", agent: "a", dispatch: "i2",
            OutputBatch(first: 2, parts: [.text("1"), .json(["n": 0])])),
        .roundDone(round: "r", status: .ok, summary: RoundDocument.Summary()),
        .registryUpdate(
            RegistryUpdate(
                epoch: "e", sequence: 9, agent: "a", entry: nil, provided: [], withdrawn: ["echo"], reason: "left")),
        .registryHeartbeat(epoch: "e", sequence: 9, intervalMs: 1000),
        .securityRefused(socket: "bus", address: "127.0.0.1", key: "k", reason: "unknown key", refused: 3),
        .limitRefused(socket: "bus", limit: "maxFrames", reason: "too many", refused: 1),
        .coordinatorLeader(
            group: "g1", epoch: 4,
            leader: GroupLeader(
                name: "a", bus: "tcp://10.0.0.1:5555", feed: "tcp://10.0.0.1:5556", epoch: 4,
                since: "2026-12-05T21:00:00.000Z")),
        .journalBehind(group: "g1", rounds: 12),
        .journalBehind(group: "g1", rounds: 0),
        // The events every request and round publishes are written member by member: text that needs escaping,
        // several invocations, an error that is not JSON, a summary with every count.
        .roundAccepted(round: "r\"1\n", shape: "fanout", invocations: ["a", "b/é", "c\u{1}"]),
        .invocationDispatched(round: "r", invocation: "a\\b", skill: "ech\to", agent: "agent ✓", dispatch: "i9"),
        .invocationDone(
            round: "r", invocation: "b", skill: "echo", agent: "", status: .error, durationMicros: 1_234_567,
            deduplicated: true),
        .requestDispatched(round: "", request: "q\"", skill: "s", agent: "a", invocation: "i1"),
        .requestDone(
            round: "r", request: "q", skill: "echo", agent: "a", status: .error, durationMicros: 0,
            payload: Array("not json".utf8)),
        .roundDone(round: "r", status: .error, summary: summary),
    ]

    static var summary: RoundDocument.Summary {
        var summary = RoundDocument.Summary()
        summary.invocations = 3
        summary.executions = 2
        summary.deduplicated = 1
        summary.failed = 1
        summary.totalMs = 12.345
        return summary
    }

    @Test("every kind's members come in key order, and publishing writes the object JSON writes, with type and time")
    func publishedAsJSONWritesIt() throws {
        let time = Date(timeIntervalSince1970: 1_764_936_000.123)
        for event in Self.events {
            let keys = event.members.map(\.key)
            #expect(keys == keys.sorted() && Set(keys).count == keys.count, "\(event.topic): \(keys)")
            var object = event.fields
            object["type"] = .string(event.topic)
            object["time"] = .string(FeedEvent.timestamp(time))
            let frames = event.encoded(time: time)
            #expect(frames.count == 2)
            #expect(frames[0] == Array(event.topic.utf8))
            #expect(
                String(decoding: frames[1], as: UTF8.self) == String(decoding: JSONValue.object(object).serialized(), as: UTF8.self))
            #expect(event.encoded(timestamp: FeedEvent.timestamp(time)) == frames)
        }
    }

    @Test("the feed's clock stamps now, formatted as timestamp formats it")
    func clock() {
        var clock = FeedClock()
        let before = FeedEvent.timestamp(Date())
        let stamped = clock.now()
        let after = FeedEvent.timestamp(Date())
        #expect(before <= stamped && stamped <= after, "\(before) \(stamped) \(after)")
    }
}
