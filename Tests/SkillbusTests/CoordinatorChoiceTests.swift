import Foundation
import Testing

@testable import Skillbus
import SkillbusZMQ

/// Several coordinators where one is named, and which one a client or worker talks to (issue 31), without sockets.
@Suite("Coordinator lists and following the leader")
struct CoordinatorChoiceTests {
    @Test(
        "endpoint lists: each entry checked, the bad one named",
        arguments: [
            ("tcp://127.0.0.1:5555", nil),
            ("tcp://a:1,tcp://b:2", nil),
            (" tcp://a:1 , ipc:///tmp/x ", nil),
            ("tcp://a:1,tcp://b", "entry 2 of 'tcp://a:1,tcp://b': 'tcp://b' has no port (tcp://HOST:PORT)"),
            ("tcp://a:1,", "entry 2 of 'tcp://a:1,' is empty (a,b: endpoints between commas)"),
            (",tcp://a:1", "entry 1 of ',tcp://a:1' is empty (a,b: endpoints between commas)"),
            ("tcp://a:1,tcp://a:1", "'tcp://a:1,tcp://a:1' names 'tcp://a:1' twice"),
            (
                "http://a:1,tcp://b:2",
                "entry 1 of 'http://a:1,tcp://b:2': 'http://a:1' is not a ZeroMQ endpoint (use tcp://HOST:PORT, ipc://PATH or inproc://NAME)"
            ),
        ] as [(String, String?)])
    func lists(text: String, problem: String?) {
        #expect(Endpoint.listProblem(text) == problem)
    }

    @Test("one endpoint never holds a comma, and a list keeps its order")
    func singleAndOrder() {
        #expect(
            Endpoint.problem("tcp://a:1,tcp://b:2")
                == "'tcp://a:1,tcp://b:2' holds a comma: one endpoint here, not a list")
        #expect(Endpoint.list(" tcp://b:2 ,tcp://a:1") == ["tcp://b:2", "tcp://a:1"])
        #expect(Endpoint.joined(["tcp://a:1", "tcp://b:2"]) == ("tcp://a:1,tcp://b:2", nil))
        #expect(Endpoint.joined([]).problem == "no endpoint given")
        #expect(Endpoint.joined(["tcp://a:1,tcp://b:2"]).problem?.contains("holds a comma") == true)
    }

    @Test("a worker config names its coordinators as a comma list or a JSON array")
    func workerConfig() throws {
        let directory = NSTemporaryDirectory() + "skillbus-choice-\(UUID().uuidString.prefix(8))"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        func load(_ coordinator: String) throws -> WorkerConfiguration {
            let path = directory + "/w.json"
            try Data(#"{"version": 1, "name": "w", "coordinator": \#(coordinator)}"#.utf8)
                .write(to: URL(fileURLWithPath: path))
            return try WorkerConfiguration.load(path: path)
        }
        #expect(try load(#""tcp://a:1,tcp://b:2""#).coordinator == "tcp://a:1,tcp://b:2")
        #expect(try load(#"["tcp://a:1", "tcp://b:2"]"#).coordinator == "tcp://a:1,tcp://b:2")
        #expect(try load(#""tcp://a:1""#).coordinator == "tcp://a:1")
        do {
            _ = try load(#"["tcp://a:1", "tcp://b"]"#)
            Issue.record("a bad entry was taken")
        } catch let error as SkillbusError {
            #expect(error.message.contains("coordinator") && error.message.contains("entry 2"), "\(error.message)")
        }
        do {
            _ = try load("[1]")
            Issue.record("a number was taken")
        } catch let error as SkillbusError {
            #expect(error.message.contains("coordinator[0]"), "\(error.message)")
        }
    }

    @Test("the library takes a group as a list: a bad entry is named before any socket opens")
    func libraryLists() async throws {
        var options = AgentWorker.Options(name: "w", coordinator: "tcp://a:1")
        options.coordinators = ["tcp://a:1", "tcp://b:2"]
        #expect(options.coordinator == "tcp://a:1,tcp://b:2" && options.coordinators == ["tcp://a:1", "tcp://b:2"])
        let context = try ZMQContext()
        do {
            _ = try await SkillbusClient.connect(endpoints: ["tcp://a:1", "tcp://b"], context: context)
            Issue.record("a bad entry was taken")
        } catch let error as SkillbusError {
            #expect(error.code == .invalidConfiguration)
            #expect(error.message.contains("entry 2 of") && error.message.contains("'tcp://b' has no port"), "\(error)")
        }
    }

    @Test("back-off: none for the first move, then 0.1 s doubling to 2 s")
    func backoff() {
        let delays = (0..<9).map { CoordinatorChoice.backoff(afterMoves: $0) }
        #expect(
            delays == [
                .zero, .milliseconds(100), .milliseconds(200), .milliseconds(400), .milliseconds(800),
                .milliseconds(1600), .seconds(2), .seconds(2), .seconds(2),
            ])
        #expect(CoordinatorChoice.backoff(afterMoves: 1000) == .seconds(2))
    }

    @Test("a refusal naming a leader moves to it, also outside the list; a late refusal moves nothing")
    func followsNamedLeader() {
        var choice = CoordinatorChoice(endpoints: ["tcp://a:1", "tcp://b:1"])
        let now = ContinuousClock.now
        let move = choice.refused(by: "tcp://a:1", leader: "tcp://b:1", now: now)
        #expect(move?.from == "tcp://a:1" && move?.to == "tcp://b:1" && move?.at == now)
        #expect(choice.endpoint == "tcp://b:1")
        // The standby left refuses another message late: nothing moves.
        #expect(choice.refused(by: "tcp://a:1", leader: "tcp://b:1", now: now) == nil)
        // b, in turn, names c, which the list does not hold: it is added, and followed after the first back-off.
        let second = choice.refused(by: "tcp://b:1", leader: "tcp://c:1", now: now)
        #expect(second?.to == "tcp://c:1" && second?.at == now + .milliseconds(100))
        #expect(choice.endpoints == ["tcp://a:1", "tcp://b:1", "tcp://c:1"])
        // An answer from c resets the back-off.
        choice.heard(from: "tcp://c:1", now: now)
        #expect(choice.movesWithoutAnswer == 0)
    }

    @Test("a refusal naming no leader (or itself) moves to the next endpoint, round and round with back-off")
    func nextWithoutLeader() {
        var choice = CoordinatorChoice(endpoints: ["tcp://a:1", "tcp://b:1", "tcp://c:1"])
        let now = ContinuousClock.now
        var visited: [String] = []
        var delays: [Duration] = []
        for _ in 0..<5 {
            let move = choice.refused(by: choice.endpoint, leader: nil, now: now)
            visited.append(move?.to ?? "-")
            delays.append((move?.at ?? now) - now)
        }
        #expect(visited == ["tcp://b:1", "tcp://c:1", "tcp://a:1", "tcp://b:1", "tcp://c:1"])
        #expect(delays == [.zero, .milliseconds(100), .milliseconds(200), .milliseconds(400), .milliseconds(800)])
        #expect(
            choice.refused(by: choice.endpoint, leader: choice.endpoint, now: now)?.reason
                == "it is a standby and knows no leader")
    }

    @Test("a group's silent coordinator is probed, then left; one endpoint is never left on silence")
    func silence() {
        let start = ContinuousClock.now
        var choice = CoordinatorChoice(endpoints: ["tcp://a:1", "tcp://b:1"])
        #expect(choice.tick(waiting: false, now: start) == .nothing)
        #expect(choice.tick(waiting: true, now: start) == .probe)
        #expect(choice.nextTick(waiting: true) == start + .seconds(1))
        #expect(choice.tick(waiting: true, now: start + .milliseconds(900)) == .nothing)
        guard case .move(let move) = choice.tick(waiting: true, now: start + .seconds(1)) else {
            Issue.record("no move after a second of silence")
            return
        }
        #expect(move.from == "tcp://a:1" && move.to == "tcp://b:1")
        // b answers its probe: it stays, and is probed again only after a second with nothing heard.
        let later = start + .seconds(1)
        #expect(choice.tick(waiting: true, now: later) == .probe)
        choice.heard(from: "tcp://b:1", now: later + .milliseconds(5))
        #expect(choice.tick(waiting: true, now: later + .milliseconds(500)) == .nothing)
        #expect(choice.tick(waiting: true, now: later + .milliseconds(1005)) == .probe)

        var single = CoordinatorChoice(endpoints: ["tcp://a:1"])
        #expect(single.tick(waiting: true, now: start) == .nothing)
        #expect(single.tick(waiting: true, now: start + .seconds(60)) == .nothing)
    }

    @Test("after a move, nothing goes before the back-off has passed")
    func waitsForBackoff() {
        let start = ContinuousClock.now
        var choice = CoordinatorChoice(endpoints: ["tcp://a:1", "tcp://b:1"])
        _ = choice.refused(by: "tcp://a:1", leader: nil, now: start)
        _ = choice.refused(by: "tcp://b:1", leader: nil, now: start)  // back to a, after 0.1 s
        #expect(choice.tick(waiting: true, now: start + .milliseconds(50)) == .nothing)
        #expect(choice.nextTick(waiting: true) == start + .milliseconds(100))
        #expect(choice.tick(waiting: true, now: start + .milliseconds(100)) == .probe)
    }
}
