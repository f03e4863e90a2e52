import Foundation
import Skillbus
import SkillbusZMQ
import Testing

/// The errors a worker answers an INVOKE with before any skill runs (PROTOCOL §4.10, its error table),
/// word for word, from the Swift worker and from the Python peer written from the document. The test is
/// the bus: a ROUTER that welcomes the worker and sends it exactly the INVOKEs it wants.
@Suite("Worker errors, word for word: the Swift worker and the Python peer", .serialized, .timeLimit(.minutes(2)))
struct WorkerErrorTests {
    /// One worker under test: how to start it and what it offers.
    struct Subject: Sendable, CustomTestStringConvertible {
        let label: String
        /// Its command line, given the bus endpoint.
        let start: @Sendable (String) throws -> SkillbusProcess
        let name: String
        /// A skill taking one required string `text`.
        let textSkill: String
        /// A skill that runs until cancelled, and its parameters.
        let slowSkill: String
        let slowParameters: String
        let offers: String
        var testDescription: String { label }
    }

    static let subjects: [Subject] = [
        Subject(
            label: "Swift worker",
            start: { bus in
                try SkillbusProcess(
                    ["worker", "--name", "swifty", "--coordinator", bus, "--skills", "echo,sleep", "--capacity", "1"],
                    name: "swifty")
            }, name: "swifty", textSkill: "echo", slowSkill: "sleep", slowParameters: #"{"ms":60000}"#,
            offers: "echo, sleep"),
        Subject(
            label: "Python peer",
            start: { bus in
                try SkillbusProcess(
                    [
                        "-u", InteropTests.peerScript, "worker", "--coordinator", bus, "--name", "pyworker",
                        "--capacity", "1", "--reverse-delay", "60",
                    ], name: "pyworker", executable: "/usr/bin/env", prefix: ["python3"])
            }, name: "pyworker", textSkill: "py.reverse", slowSkill: "py.reverse", slowParameters: #"{"text":"abc"}"#,
            offers: "py.count, py.fail, py.reverse"),
    ]

    /// The test's side of one worker: the ROUTER it registered with and what came from it.
    final class Bench {
        let bus: RawPeer
        let worker: SkillbusProcess
        private(set) var peer: [UInt8] = []
        /// STATE bodies in the order they came.
        private(set) var states: [String] = []

        init(_ subject: Subject, context: ZMQContext) async throws {
            bus = try RawPeer(bindingRouter: "tcp://127.0.0.1:*", context: context)
            worker = try subject.start(bus.socket.endpoint)
            var ready: Multipart = []
            while ready.count < 4 || text(ready[2]) != "READY" { ready = try await bus.next(timeout: .seconds(20)) }
            peer = ready[0]
            welcome()
        }

        func close() {
            worker.signal(SIGKILL)
            bus.close()
        }

        func send(_ fields: [String]) { bus.socket.send([peer] + fromBus(fields)) }

        /// A long bus heartbeat, so that the worker never takes the test's silence for a lost bus.
        func welcome() {
            send([
                "SKB2W", "WELCOME",
                #"{"accepted":[],"epoch":"0000000000000000","feed":"","heartbeatMs":60000,"refused":[]}"#,
            ])
        }

        func invoke(_ id: String, _ skill: String, _ parameters: String) {
            send(["SKB2W", "INVOKE", id, "round-1", "", skill, "60000", parameters])
        }

        /// The next worker message with this command within 20 s (STATE bodies are recorded on the way;
        /// heartbeats keep coming, so the deadline is for the whole wait).
        func next(_ command: String, where condition: (Multipart) -> Bool = { _ in true }) async throws -> Multipart {
            let deadline = ContinuousClock.now + .seconds(20)
            while ContinuousClock.now < deadline {
                let message = try await bus.next(timeout: deadline - ContinuousClock.now)
                guard message.count >= 3, text(message[1]) == "SKB2W" else { continue }
                if text(message[2]) == "STATE", message.count == 4 { states.append(text(message[3])) }
                if text(message[2]) == command, condition(message) { return message }
            }
            throw TimedOut(what: "\(command) from \(worker.name); states so far: \(states)")
        }

        /// The error object of the RESULT for `id`, which must be an `error`.
        func error(of id: String) async throws -> JSONValue {
            let result = try await next("RESULT") { $0.count == 6 && text($0[3]) == id }
            #expect(text(result[4]) == "error", "\(id)")
            return try JSONValue(parsing: result[5])
        }

        /// Sends one INVOKE and returns the error object of its RESULT.
        func refusal(_ id: String, _ skill: String, _ parameters: String) async throws -> JSONValue {
            invoke(id, skill, parameters)
            return try await error(of: id)
        }
    }

    @Test("unknown skill, bad JSON, not an object, schema problems, busy, cancelled", arguments: subjects)
    func refusals(subject: Subject) async throws {
        let bench = try await Bench(subject, context: try ZMQContext())
        defer { bench.close() }
        let (name, skill) = (subject.name, subject.textSkill)

        // Step 3 comes before step 4: an unknown skill is unknown whatever its parameters are.
        #expect(
            try await bench.refusal("i1", "nope", "not json")
                == [
                    "code": "unknown_skill",
                    "message": .string("agent '\(name)' does not offer 'nope' (offers: \(subject.offers))"),
                ])
        let badJSON = try await bench.refusal("i2", skill, #"{"text": "#)
        #expect(badJSON["code"] == "invalid_parameters" && badJSON["details"] == nil)
        let prefix = "parameters of '\(skill)' are not valid JSON: "
        #expect(badJSON["message"]?.stringValue?.hasPrefix(prefix) == true, "\(badJSON)")
        #expect((badJSON["message"]?.stringValue?.count ?? 0) > prefix.count)
        #expect(
            try await bench.refusal("i3", skill, "[1]")
                == [
                    "code": "invalid_parameters",
                    "message": .string("parameters of '\(skill)' must be a JSON object, got array"),
                ])
        for (id, parameters, problems) in [
            (
                "i4", #"{"txt":"x","text":5}"#,
                ["parameter 'text' must be string, got integer", "unknown parameter 'txt' (expected: text)"]
            ),
            (
                "i5", #"{"text":null,"n":1.5,"b":true}"#,
                [
                    "parameter 'text' must be string, got null", "unknown parameter 'b' (expected: text)",
                    "unknown parameter 'n' (expected: text)",
                ]
            ),
            ("i6", "{}", ["missing required parameter 'text' (string)"]),
            ("i7", #"{"text":2.5}"#, ["parameter 'text' must be string, got number"]),
        ] {
            #expect(
                try await bench.refusal(id, skill, parameters)
                    == [
                        "code": "invalid_parameters",
                        "message": .string("invalid parameters for '\(skill)': " + problems.joined(separator: "; ")),
                        "details": .array(problems.map { .string($0) }),
                    ])
        }
        // Steps 1-6 run nothing and send no STATE (the one after WELCOME says idle, §4.10 rule 1).
        #expect(bench.states.allSatisfy { $0 == #"{"state":"idle"}"# }, "\(bench.states)")

        // Capacity 1: a second INVOKE while the first runs is refused; CANCEL ends the first.
        bench.invoke("i8", subject.slowSkill, subject.slowParameters)
        #expect(
            try await bench.refusal("i9", skill, #"{"text":"x"}"#)
                == ["code": "busy", "message": .string("agent '\(name)' is at capacity (1)")])
        bench.send(["SKB2W", "CANCEL", "i8"])
        #expect(
            try await bench.error(of: "i8")
                == ["code": "cancelled", "message": .string("'\(subject.slowSkill)' was cancelled")])
    }

    @Test(
        "STATE: the current state again after every WELCOME; one failed per failure, then the state",
        arguments: subjects)
    func stateRule(subject: Subject) async throws {
        let bench = try await Bench(subject, context: try ZMQContext())
        defer { bench.close() }
        let executing = #"{"skill":"\#(subject.slowSkill)","state":"executingSkill"}"#
        bench.invoke("i1", subject.slowSkill, subject.slowParameters)
        _ = try await bench.next("STATE") { text($0[3]) == executing }
        // As if the bus had restarted and taken the READY again: its view is idle, the skill still runs.
        bench.welcome()
        let again = try await bench.next("STATE")
        #expect(text(again[3]) == executing)
        bench.send(["SKB2W", "CANCEL", "i1"])
        _ = try await bench.error(of: "i1")
        _ = try await bench.next("STATE") { text($0[3]) == #"{"state":"idle"}"# }
        let afterWelcome = Array(bench.states.drop { $0 != executing }.dropFirst())
        #expect(afterWelcome == [executing, #"{"reason":"cancelled","state":"failed"}"#, #"{"state":"idle"}"#])
    }
}
