import Testing

@testable import Skillbus

@Suite("TextGrep")
struct TextGrepTests {
    @Test("returns matching lines with 1-based line numbers")
    func basicMatches() throws {
        let text = "alpha\nbeta\ngamma\nbetamax\n"
        #expect(
            try TextGrep.matches(pattern: "^beta", in: text) == [
                GrepMatch(lineNumber: 2, line: "beta"),
                GrepMatch(lineNumber: 4, line: "betamax"),
            ]
        )
        #expect(try TextGrep.matches(pattern: "delta", in: text).isEmpty)
    }

    @Test("strips a trailing carriage return from each line")
    func crlfLines() throws {
        let text = "one\r\ntwo\r\nthree"
        #expect(try TextGrep.matches(pattern: "^two$", in: text) == [GrepMatch(lineNumber: 2, line: "two")])
        #expect(try TextGrep.matches(pattern: "\r", in: text).isEmpty)
    }

    @Test(
        "does not invent a line after a final newline or for empty text",
        arguments: [
            ("a\n", [Int]()),
            ("", []),
            ("a\n\nb", [2]),
            ("\n", [1]),
            ("a\n\n", [2]),
        ]
    )
    func emptyLines(text: String, expectedLines: [Int]) throws {
        #expect(try TextGrep.matches(pattern: "^$", in: text).map(\.lineNumber) == expectedLines)
    }

    @Test("stops after maxMatches")
    func maxMatches() throws {
        let text = Array(repeating: "x", count: 100).joined(separator: "\n")
        #expect(try TextGrep.matches(pattern: "x", in: text, maxMatches: 3).map(\.lineNumber) == [1, 2, 3])
        #expect(try TextGrep.matches(pattern: "x", in: text).count == 100)
        #expect(try TextGrep.matches(pattern: "x", in: text, maxMatches: 0).isEmpty)
    }

    @Test("supports regex features and Unicode text")
    func regexFeatures() throws {
        let text = "naïve café\nplain text\nOrder 66\n東京 tower"
        #expect(try TextGrep.matches(pattern: "é$", in: text).map(\.lineNumber) == [1])
        #expect(try TextGrep.matches(pattern: "\\d+", in: text).map(\.lineNumber) == [3])
        #expect(try TextGrep.matches(pattern: "(?i)ORDER|PLAIN", in: text).map(\.lineNumber) == [2, 3])
        #expect(try TextGrep.matches(pattern: "^東京\\s", in: text) == [GrepMatch(lineNumber: 4, line: "東京 tower")])
    }

    @Test(
        "rejects invalid patterns with an error naming the pattern",
        arguments: ["(", "[a-", "*a", "a{2,1}", ""]
    )
    func invalidPattern(pattern: String) {
        do {
            _ = try TextGrep.matches(pattern: pattern, in: "text")
            Issue.record("expected an error for pattern '\(pattern)'")
        } catch {
            #expect(error.pattern == pattern)
            #expect(error.message.contains("'\(pattern)'"))
            #expect(error.description == error.message)
        }
    }

    @Test("a pattern that backtracks for ever is stopped soon after the caller says so")
    func catastrophicPatternStops() throws {
        let start = ContinuousClock.now
        let stopAt = start + .milliseconds(50)
        do {
            _ = try TextGrep.matches(
                pattern: "(a+)+$", in: String(repeating: "a", count: 40) + "b", shouldStop: { .now >= stopAt })
            Issue.record("the search ended by itself")
        } catch {
            #expect(error.stopped && error.message.contains("stopped at line 1"))
        }
        // Within a few milliseconds on a quiet machine; the bound leaves room for a loaded one.
        let late = ContinuousClock.now - stopAt
        #expect(late < .seconds(1), "stopped \(late) after it was asked to")
    }
}
