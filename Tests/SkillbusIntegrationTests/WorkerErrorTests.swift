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
            offers: "py.fail, py.reverse"),
    ]

    @Test("unknown skill, bad JSON, not an object, schema problems, busy, cancelled", arguments: subjects)
    func refusals(subject: Subject) async throws {
        let context = try ZMQContext()
        let bus = try RawPeer(bindingRouter: "tcp://127.0.0.1:*", context: context)
        defer { bus.close() }
        let worker = try subject.start(bus.socket.endpoint)
        defer { worker.signal(SIGKILL) }

        // READY → WELCOME. A long bus heartbeat, so that the worker never takes our silence for a lost bus.
        var ready: Multipart = []
        while ready.count < 4 || text(ready[2]) != "READY" { ready = try await bus.next(timeout: .seconds(20)) }
        let peer = ready[0]
        func send(_ frames: [String]) { bus.socket.send([peer] + frames.map { Array($0.utf8) }) }
        send([
            "SKB1W", "WELCOME",
            #"{"accepted":[],"epoch":"0000000000000000","feed":"","heartbeatMs":60000,"refused":[]}"#,
        ])

        var states: [String] = []
        /// Sends one INVOKE and returns the error object of its RESULT (which must be `error`).
        func invoke(_ id: String, _ skill: String, _ parameters: String) async throws -> JSONValue {
            send(["SKB1W", "INVOKE", id, "round-1", "", skill, "60000", parameters])
            return try await result(id)
        }
        func result(_ id: String) async throws -> JSONValue {
            while true {
                let message = try await bus.next(timeout: .seconds(20))
                guard message.count >= 3, text(message[1]) == "SKB1W" else { continue }
                if text(message[2]) == "STATE" { states.append(text(message[3])) }
                guard text(message[2]) == "RESULT", message.count == 6, text(message[3]) == id else { continue }
                #expect(text(message[4]) == "error", "\(id)")
                return try JSONValue(parsing: message[5])
            }
        }
        let (name, skill) = (subject.name, subject.textSkill)

        // Step 3 comes before step 4: an unknown skill is unknown whatever its parameters are.
        #expect(
            try await invoke("i1", "nope", "not json")
                == [
                    "code": "unknown_skill",
                    "message": .string("agent '\(name)' does not offer 'nope' (offers: \(subject.offers))"),
                ])
        let badJSON = try await invoke("i2", skill, #"{"text": "#)
        #expect(badJSON["code"] == "invalid_parameters" && badJSON["details"] == nil)
        let prefix = "parameters of '\(skill)' are not valid JSON: "
        #expect(badJSON["message"]?.stringValue?.hasPrefix(prefix) == true, "\(badJSON)")
        #expect((badJSON["message"]?.stringValue?.count ?? 0) > prefix.count)
        #expect(
            try await invoke("i3", skill, "[1]")
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
                try await invoke(id, skill, parameters)
                    == [
                        "code": "invalid_parameters",
                        "message": .string("invalid parameters for '\(skill)': " + problems.joined(separator: "; ")),
                        "details": .array(problems.map { .string($0) }),
                    ])
        }

        // Capacity 1: a second INVOKE while the first runs is refused; CANCEL ends the first.
        send(["SKB1W", "INVOKE", "i8", "round-1", "", subject.slowSkill, "60000", subject.slowParameters])
        #expect(
            try await invoke("i9", skill, #"{"text":"x"}"#)
                == ["code": "busy", "message": .string("agent '\(name)' is at capacity (1)")])
        // Nothing ran so far: no STATE at all (§4.10: steps 1-6 send none) — unless the slow one started.
        #expect(states.allSatisfy { $0.contains("executingSkill") && $0.contains(subject.slowSkill) }, "\(states)")
        send(["SKB1W", "CANCEL", "i8"])
        #expect(
            try await result("i8")
                == ["code": "cancelled", "message": .string("'\(subject.slowSkill)' was cancelled")])
    }
}
