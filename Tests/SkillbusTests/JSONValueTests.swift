import Testing

@testable import Skillbus

@Suite("JSON values")
struct JSONValueTests {
    @Test(
        "parses and re-serialises with sorted keys",
        arguments: [
            (#"{"b":1,"a":[true,false,null],"c":"x"}"#, #"{"a":[true,false,null],"b":1,"c":"x"}"#),
            ("  [1, 2.5, -0.25, 1e3, 1E-2]  ", "[1,2.5,-0.25,1000,0.01]"),
            (#""tab\there \"quoted\" \u00e9 \ud83d\ude00""#, "\"tab\\there \\\"quoted\\\" é 😀\""),
            ("{}", "{}"),
            ("[]", "[]"),
        ])
    func roundTrip(input: String, expected: String) throws {
        #expect(try JSONValue(parsing: input).jsonString == expected)
    }

    @Test("numbers written digit by digit read as Swift spells them")
    func digitByDigitNumbers() {
        func written(_ value: Double) -> String {
            var out: [UInt8] = []
            JSONValue.writeNumber(value, to: &out)
            return String(decoding: out, as: UTF8.self)
        }
        func swiftSpelling(_ value: Double) -> String {
            value.isWholeNumber && abs(value) < 1e15 ? String(Int64(value)) : "\(value)"
        }
        // Durations in milliseconds are thousandths: every one up to a few seconds, then some far larger.
        var values = (0..<20_000).map { Double($0) / 1000 }
        values += [1_234_567.891, 999_999_999.999, 86_400_000.5, 123_456_789_012.345, 1e14 + 0.25]
        values += values.map { -$0 }
        // Not thousandths: the general spelling.
        values += [0.0005, 1.0 / 3, 2.5e-7, 1e20, 1.7976931348623157e308, 12.3456, -0.0]
        for value in values { #expect(written(value) == swiftSpelling(value), "\(value)") }
        #expect(written(.nan) == "null")
    }

    @Test("text from bytes: ASCII and other UTF-8 become a String, anything else nil")
    func utf8Text() {
        let valid = ["", "i42", "bench-x-17", "é", "naïve 😀 text", String(repeating: "x", count: 300) + "ü"]
        for text in valid { #expect(String(utf8: Array(text.utf8)) == text) }
        let invalid: [[UInt8]] = [[0xFF], [0x61, 0xC3], [0xC3, 0x28], [0xED, 0xA0, 0x80], Array("ok".utf8) + [0x80]]
        for bytes in invalid { #expect(String(utf8: bytes) == nil) }
        // A slice is read from its own start, not its array's.
        let bytes = Array("xx-id-9".utf8)
        #expect(String(utf8: bytes[3...]) == "id-9")
    }

    @Test("1, 1.0 and 1e0 are one number and serialise alike")
    func numberSpelling() throws {
        let values = try ["1", "1.0", "1e0", "10e-1"].map { try JSONValue(parsing: $0) }
        #expect(Set(values).count == 1)
        #expect(values[0].jsonString == "1")
        #expect(values[0].intValue == 1)
    }

    @Test("control characters are escaped on output")
    func escapes() {
        #expect(JSONValue.string("a\nb\u{1}").jsonString == #""a\nb\u0001""#)
    }

    @Test(
        "rejects bad documents with the byte offset",
        arguments: [
            ("", 0, "unexpected end of input"),
            ("{", 1, "expected a string key"),
            (#"{"a" 1}"#, 5, "expected ':'"),
            ("[1,]", 3, "unexpected character"),
            ("01", 1, "unexpected data after the end"),
            (#"{"a":1,"a":2}"#, 11, "duplicate key"),
            (#""\x""#, 3, "invalid escape"),
            ("tru", 0, "expected 'true'"),
            ("1e", 2, "exponent"),
            ("\"abc", 4, "unterminated string"),
        ])
    func errors(input: String, offset: Int, reason: String) {
        #expect {
            try JSONValue(parsing: input)
        } throws: { error in
            guard let error = error as? JSONParseError else { return false }
            return error.offset == offset && error.reason.contains(reason)
        }
    }

    @Test("refuses nesting deeper than the limit instead of overflowing the stack")
    func depthLimit() {
        let deep = String(repeating: "[", count: 10_000) + String(repeating: "]", count: 10_000)
        #expect(throws: JSONParseError.self) { try JSONValue(parsing: deep) }
    }

    /// The reader rules PROTOCOL §2 lists for implementers in other languages, one by one.
    @Test(
        "the strict reader: what it accepts",
        arguments: [
            String(repeating: "[", count: 128) + "1" + String(repeating: "]", count: 128),
            String(repeating: #"{"a":"#, count: 127) + "[0]" + String(repeating: "}", count: 127),
            "1e-400", "-0", "42", #""x""#, "null", #""\u0000""#, #""\/""#, #""\uD83D\uDE00""#, " \t\r\n1\n",
            #"{"a":1,"A":2}"#, String(repeating: "9", count: 308),
        ])
    func readerAccepts(input: String) {
        #expect(throws: Never.self) { try JSONValue(parsing: input) }
    }

    @Test(
        "the strict reader: what it refuses",
        arguments: [
            ([UInt8](String(repeating: "[", count: 129).utf8) + [UInt8](String(repeating: "]", count: 129).utf8)),
            Array(#""\ud83d""#.utf8), Array(#""\ude00""#.utf8), Array(#""\ud83d\u0041""#.utf8),
            Array("1e400".utf8), Array(("-" + String(repeating: "9", count: 400)).utf8),
            Array("NaN".utf8), Array("Infinity".utf8), Array("+1".utf8), Array(".5".utf8), Array("1.".utf8),
            Array("-".utf8), Array("[1,]".utf8), Array("/*c*/1".utf8), Array("'a'".utf8),
            Array(#"{"a":1,"a":2}"#.utf8), Array("{\"\u{E9}\":1,\"e\u{301}\":2}".utf8),
            [0xEF, 0xBB, 0xBF, 0x31], [0x0C, 0x31], [0xC2, 0xA0, 0x31], [0x22, 0x09, 0x22],
            [0x22, 0xC0, 0xAF, 0x22], [0x22, 0xED, 0xA0, 0x80, 0x22], Array("1 2".utf8), [],
        ] as [[UInt8]])
    func readerRefuses(input: [UInt8]) {
        #expect(throws: JSONParseError.self) { try JSONValue(parsing: input) }
    }

    @Test("refuses invalid UTF-8 inside strings")
    func invalidUTF8() {
        #expect(throws: JSONParseError.self) { try JSONValue(parsing: [0x22, 0xFF, 0xFE, 0x22]) }
    }

    @Test("pretty printing is indented and keeps the values")
    func pretty() throws {
        let value: JSONValue = ["b": [1, 2], "a": "x"]
        #expect(value.prettyString() == "{\n  \"a\": \"x\",\n  \"b\": [\n    1,\n    2\n  ]\n}")
        #expect(try JSONValue(parsing: value.prettyString()) == value)
    }
}
