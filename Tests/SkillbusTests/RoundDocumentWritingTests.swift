import Testing

@testable import Skillbus

/// The round document's own writer must give the bytes the general path gives (`json.serialized()`), for
/// every shape of document: clients compare documents by bytes (a round sent again, the journal).
@Suite("Round documents written straight to bytes")
struct RoundDocumentWritingTests {
    typealias Generator = SplitMix

    static let words = ["w1", "echo", "", "quote\"d", "back\\slash", "line\nbreak", "日本", "tab\t", "\u{1}"]

    static func word(_ random: inout Generator) -> String { words.randomElement(using: &random)! }

    static func maybe<T>(_ random: inout Generator, _ make: (inout Generator) -> T) -> T? {
        Bool.random(using: &random) ? make(&random) : nil
    }

    static func value(_ random: inout Generator, depth: Int = 0) -> JSONValue {
        switch Int.random(in: 0..<(depth > 2 ? 4 : 6), using: &random) {
        case 0: return .null
        case 1: return .bool(Bool.random(using: &random))
        case 2: return .number([0, -1, 2.5, 1e20, 42].randomElement(using: &random)!)
        case 3: return .string(word(&random))
        case 4: return .array((0..<Int.random(in: 0...3, using: &random)).map { _ in value(&random, depth: depth + 1) })
        default:
            var object: [String: JSONValue] = [:]
            for _ in 0..<Int.random(in: 0...3, using: &random) { object[word(&random)] = value(&random, depth: depth + 1) }
            return .object(object)
        }
    }

    static func error(_ random: inout Generator) -> SkillbusError {
        SkillbusError(.timeout, word(&random), details: ["agent": .string(word(&random))])
    }

    static func invocation(_ random: inout Generator) -> RoundDocument.Invocation {
        var invocation = RoundDocument.Invocation(
            id: word(&random), skill: word(&random), agent: maybe(&random, word),
            status: [.ok, .error, .cancelled, .skipped, .waiting].randomElement(using: &random)!,
            durationMs: [0, 0.5, 12.345, 1000].randomElement(using: &random)!,
            deduplicated: Bool.random(using: &random), reusedFrom: maybe(&random, word),
            result: maybe(&random) { value(&$0) }, error: maybe(&random, error))
        if Bool.random(using: &random) { invocation.output = [.text(word(&random)), .json(value(&random))] }
        invocation.outputTruncated = Bool.random(using: &random)
        if Bool.random(using: &random) {
            invocation.attempts = [
                RoundDocument.Attempt(agent: maybe(&random, word), status: .error, durationMs: 1, error: error(&random))
            ]
        }
        invocation.cached = Bool.random(using: &random)
        // As the bus holds a worker's result: its canonical bytes.
        if let result = invocation.result, Bool.random(using: &random) {
            invocation.resultJSON = .canonical(result.serialized())
        }
        return invocation
    }

    static func document(_ random: inout Generator) -> RoundDocument {
        let invocations = (0..<Int.random(in: 0...4, using: &random)).map { _ in invocation(&random) }
        var document = RoundDocument(
            round: word(&random), shape: ["invoke", "fanout", "plan", nil].randomElement(using: &random)!,
            status: Bool.random(using: &random) ? .ok : .error, result: value(&random),
            error: maybe(&random, error), agent: maybe(&random, word), durationMs: 3.25, invocations: invocations,
            summary: RoundDocument.Summary(invocations, totalMs: 3.25))
        if Bool.random(using: &random) {
            document.vote = RoundDocument.Vote(
                of: 3, votes: maybe(&random) { _ in 2 },
                split: [RoundDocument.Vote.Group(result: value(&random), agents: ["a", "b"])])
        }
        return document
    }

    @Test("gives the bytes of json.serialized() for 2,000 random documents")
    func agreesWithTheGeneralPath() {
        var random = Generator(seed: 12_345)
        for _ in 0..<2000 {
            let document = Self.document(&random)
            #expect(document.serialized() == document.json.serialized(), "\(document)")
        }
    }

    @Test("a refusal and an invoke document without an agent keep their members")
    func edgeCases() {
        let refusal = RoundDocument.refusal(round: "r", shape: nil, SkillbusError(.invalidRound, "no"))
        #expect(refusal.serialized() == refusal.json.serialized())
        let invoke = RoundDocument(round: "r", shape: "invoke", status: .ok)
        #expect(String(decoding: invoke.serialized(), as: UTF8.self).hasPrefix(#"{"agent":null,"#))
    }

    @Test(
        "a worker's result is held as its canonical bytes: reordered and compacted when it must be, parsed when the fast reader gives up, null when it is not JSON",
        arguments: [
            (#"{"text":"hi","type":"text"}"#, #"{"text":"hi","type":"text"}"#, true),
            (#" { "type" : "json", "json" : {"b": 1.50, "a": [1, 2]} } "#, #"{"json":{"a":[1,2],"b":1.5},"type":"json"}"#, true),
            (#"{"text":"a\nb","type":"text"}"#, #"{"text":"a\nb","type":"text"}"#, false),
            (#"[1, 2]"#, #"[1,2]"#, false),
            (#"{"a":1,"a":2}"#, "null", false),
            ("not json", "null", false),
        ])
    func workerResults(payload: String, written: String, fast: Bool) {
        let held = DocumentJSON(payload: Array(payload.utf8))
        if case .canonical = held { #expect(fast) } else { #expect(!fast) }
        #expect(String(decoding: held.canonicalBytes, as: UTF8.self) == written)
        #expect(held.value == (try? JSONValue(parsing: Array(payload.utf8))) ?? .null)
    }

    @Test("a fan-out's entries and a plan's results, written from the invocations, are what the general path writes")
    func aggregates() {
        var random = Generator(seed: 99)
        for _ in 0..<200 {
            var invocations = (0..<4).map { _ in Self.invocation(&random) }
            for index in invocations.indices { invocations[index].id = "step-\(index)-" + Self.word(&random) }
            let entries: JSONValue = .array(
                invocations.map {
                    [
                        "agent": .string($0.id), "status": .string($0.status.documentName),
                        "result": $0.result ?? .null, "error": $0.error?.json ?? .null,
                    ]
                })
            #expect(RoundDocument.agentEntries(invocations).canonicalBytes == entries.serialized())
            var results: [String: JSONValue] = [:]
            for step in invocations where step.status == .ok { results[step.id] = step.result ?? .null }
            #expect(RoundDocument.stepResults(invocations).canonicalBytes == JSONValue.object(results).serialized())
        }
    }

    @Test("the status read from a document's tail is the status parsing it gives, stored or not, for 2,000 random documents")
    func statusFromTheTail() throws {
        var random = Generator(seed: 777)
        for _ in 0..<2000 {
            var document = Self.document(&random)
            // A result that has a "summary" of its own must not fool the reader.
            document.result = ["summary": ["status": "ok"], "x": Self.value(&random)]
            for bytes in [document.serialized(), RoundDocument.markedStored(document.serialized())] {
                let parsed = try JSONValue(parsing: bytes)
                #expect(RoundDocument.tailSaysOK(bytes) == (parsed["status"] == "ok"))
            }
        }
        #expect(RoundDocument.tailSaysOK(Array(#"{"status":"ok"}"#.utf8)) == nil)
        #expect(RoundDocument.tailSaysOK([]) == nil)
    }
}
