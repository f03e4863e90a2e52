import Testing

@testable import Skillbus

/// The byte-level canonical form must agree with parsing and writing a `JSONValue` on every text, or
/// give up and leave it to that path.
@Suite("Canonical JSON from bytes")
struct CanonicalJSONTests {
    static let defaults: [(String, JSONValue)] = [("limit", 10), ("mode", "fast")]

    /// The general path: parse, add defaults, write.
    static func reference(_ bytes: [UInt8], defaults: [(String, JSONValue)]) -> [UInt8]? {
        guard var object = try? JSONValue(parsing: bytes).objectValue else { return nil }
        for (name, value) in defaults where object[name] == nil { object[name] = value }
        var out: [UInt8] = [0x41, 0]
        JSONValue.object(object).write(to: &out)
        return out
    }

    /// Whether the fast path took the text (then it must agree).
    @discardableResult
    static func check(_ text: [UInt8], defaults: [(String, JSONValue)] = defaults) -> Bool {
        // The check without writing says yes exactly when writing gives the text back.
        let canonical = CanonicalJSON.object(text, defaults: [], after: [])
        #expect(CanonicalJSON.isCanonical(text) == (canonical == text), "\(String(decoding: text, as: UTF8.self))")
        if let canonical { #expect(CanonicalJSON.isCanonical(canonical)) }
        guard let fast = CanonicalJSON.object(text, defaults: defaults, after: [0x41, 0]) else { return false }
        #expect(fast == reference(text, defaults: defaults), "\(String(decoding: text, as: UTF8.self))")
        return true
    }

    @Test(
        "agrees with the general path on common and awkward spellings",
        arguments: [
            #"{"text":"hello"}"#, #"{"b":1,"a":2}"#, #" { "a" : 20e-1 , "b":[1, 2.50 ,-3,{"z":0,"y":null}] } "#,
            #"{"limit":3}"#, #"{}"#, #"{"a":-0}"#, #"{"a":1e400}"#, #"{"a":1234567890123456789}"#,
            #"{"a":"\u00e9\n"}"#, #"{"é":1,"e":2}"#, #"{"a":1,"a":2}"#, #"{"a":1,"b":2,"a":3}"#, #"{"a":"\#u{1}"}"#,
            #"[1]"#, #"{"a":1}x"#, #"{"a":tru}"#, #"{"a":01}"#, #"{"a":1.}"#, #"{"a":[1,]}"#, #"{"a":"日本"}"#,
            #"{"ab":1,"a":2,"b":{"d":true,"c":false}}"#, #"{"mode":null}"#, "",
        ])
    func spellings(_ text: String) {
        Self.check(Array(text.utf8))
    }

    @Test("takes the common texts itself: sorted or not, with defaults, integers and plain strings")
    func fastPathTaken() {
        for text in [#"{"text":"hello"}"#, #"{"b":1,"a":[2,{"d":3,"c":4}]}"#, #"{ "a": 2.5e1, "s": "日本" }"#] {
            #expect(CanonicalJSON.object(Array(text.utf8), defaults: Self.defaults, after: []) != nil, "\(text)")
        }
        let sorted = CanonicalJSON.object(Array(#"{"z":1,"b":{"y":2,"x":1}}"#.utf8), defaults: [("m", "n")], after: [])
        #expect(sorted.map { String(decoding: $0, as: UTF8.self) } == #"{"b":{"x":1,"y":2},"m":"n","z":1}"#)
        #expect(CanonicalJSON.object(Array(#"{"a":1,"a":2}"#.utf8), defaults: [], after: []) == nil)
        for text in [#"{"a":[1,2.5,{"b":null}],"text":"日本"}"#, #"{}"#, #"{"a":1e+100}"#] {
            #expect(CanonicalJSON.isCanonical(Array(text.utf8)), "\(text)")
        }
        for text in [#"{"b":1,"a":2}"#, #"{"a": 1}"#, #"{"a":2.50}"#, #"{"a":1,"a":1}"#, #"{"a":1}x"#, #"[1]"#] {
            #expect(!CanonicalJSON.isCanonical(Array(text.utf8)), "\(text)")
        }
    }

    @Test("agrees with the general path on a thousand random texts and their mutations")
    func randomTexts() {
        var generator = SplitMix(seed: 42)
        var taken = 0
        for _ in 0..<1000 {
            var text: [UInt8] = []
            Self.writeRandomObject(&text, depth: 0, &generator)
            if Self.check(text) { taken += 1 }
            var mutated = text
            let position = Int(generator.next() % UInt64(max(mutated.count, 1)))
            if !mutated.isEmpty {
                let replacements = Array(#"{}[],:"\ 0-.eE1a"#.utf8)
                mutated[position] = replacements[Int(generator.next() % UInt64(replacements.count))]
            }
            Self.check(mutated)
        }
        #expect(taken > 300, "the fast path took only \(taken) of 1000 valid texts")
    }

    @Test("finds a top-level member in canonical bytes as the parsed object holds it")
    func memberOfCanonical() {
        var generator = SplitMix(seed: 7)
        var found = 0
        for _ in 0..<1000 {
            var text: [UInt8] = []
            Self.writeRandomObject(&text, depth: 0, &generator)
            guard let canonical = CanonicalJSON.object(text, defaults: [], after: []),
                let object = try? JSONValue(parsing: canonical).objectValue
            else { continue }
            for name in ["a", "b", "ab", "limit", "mode", "text", "missing"] {
                let range = CanonicalJSON.memberRange(name, in: canonical)
                let value = range.flatMap { try? JSONValue(parsing: Array(canonical[$0])) }
                #expect(value == object[name], "\(name) in \(String(decoding: canonical, as: UTF8.self))")
                if value != nil { found += 1 }
            }
        }
        #expect(found > 300, "only \(found) members found")
        let document = Array(#"{"calls":[{"x":"}],"}],"reply":"hi","states":{"n":[1,{}]},"z":-1.5}"#.utf8)
        #expect(DocumentJSON.canonical(document).member("reply") == "hi")
        #expect(DocumentJSON.canonical(document).member("z") == -1.5)
        #expect(DocumentJSON.canonical(document).member("states") == ["n": [1, [:]]])
        #expect(DocumentJSON.canonical(document).member("x") == nil)
    }

    static func space(_ out: inout [UInt8], _ generator: inout SplitMix) {
        if generator.next() % 4 == 0 { out.append(contentsOf: Array(" \n\t".utf8)[0..<Int(generator.next() % 3 + 1)]) }
    }

    static func writeRandomObject(_ out: inout [UInt8], depth: Int, _ generator: inout SplitMix) {
        let keys = ["a", "b", "ab", "limit", "mode", "text", "é", "k\\n"]
        out.append(UInt8(ascii: "{"))
        let count = Int(generator.next() % 4)
        for member in 0..<count {
            if member > 0 { out.append(UInt8(ascii: ",")) }
            space(&out, &generator)
            out.append(contentsOf: Array("\"\(keys[Int(generator.next() % UInt64(keys.count))])\"".utf8))
            space(&out, &generator)
            out.append(UInt8(ascii: ":"))
            space(&out, &generator)
            writeRandomValue(&out, depth: depth + 1, &generator)
            space(&out, &generator)
        }
        out.append(UInt8(ascii: "}"))
    }

    static func writeRandomValue(_ out: inout [UInt8], depth: Int, _ generator: inout SplitMix) {
        let numbers = ["0", "-0", "7", "-12", "1.0", "2.50", "1e3", "1E-2", "123456789012345", "1234567890123456", "0.1"]
        let strings = [#""""#, #""plain""#, #""日本""#, #""a\"b""#, #""\u0041""#, #""tab\t""#]
        switch generator.next() % (depth > 3 ? 5 : 7) {
        case 0: out.append(contentsOf: Array(numbers[Int(generator.next() % UInt64(numbers.count))].utf8))
        case 1: out.append(contentsOf: Array(strings[Int(generator.next() % UInt64(strings.count))].utf8))
        case 2: out.append(contentsOf: Array("true".utf8))
        case 3: out.append(contentsOf: Array("null".utf8))
        case 4: out.append(contentsOf: Array("false".utf8))
        case 5: writeRandomObject(&out, depth: depth, &generator)
        default:
            out.append(UInt8(ascii: "["))
            for element in 0..<Int(generator.next() % 3) {
                if element > 0 { out.append(UInt8(ascii: ",")) }
                space(&out, &generator)
                writeRandomValue(&out, depth: depth + 1, &generator)
            }
            out.append(UInt8(ascii: "]"))
        }
    }
}

/// A small seeded generator, so a failure can be run again (the tests' one).
struct SplitMix: RandomNumberGenerator {
    var state: UInt64
    init(seed: UInt64) { state = seed }
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}
