import Testing

@testable import Skillbus

@Suite("MathExpression")
struct MathExpressionTests {
    @Test(
        "evaluates valid expressions",
        arguments: [
            // Precedence
            ("1 + 2 * 3", 7.0),
            ("(1 + 2) * 3", 9),
            ("2 * 3 ^ 2", 18),
            ("2 ^ 3 * 2", 16),
            ("1 + 2 - 3 * 4 / 6", 1),
            // Associativity
            ("10 - 4 - 3", 3),
            ("100 / 10 / 5", 2),
            ("8 / 2 * 4", 16),
            ("2 ^ 3 ^ 2", 512),
            // Unary operators
            ("-3", -3),
            ("+3", 3),
            ("--3", 3),
            ("1 - -2", 3),
            ("1 - +2", -1),
            ("2 * -3", -6),
            ("-2 ^ 2", -4),
            ("(-2) ^ 2", 4),
            ("2 ^ -1", 0.5),
            ("-2 ^ -2", -0.25),
            ("-(1 + 2)", -3),
            // Numbers
            ("3", 3),
            ("3.5", 3.5),
            (".5", 0.5),
            ("5.", 5),
            ("1e3", 1000),
            ("1.5E-2", 0.015),
            ("2e+2", 200),
            ("0 / 5", 0),
            // Whitespace and grouping
            (" \t1 +\n2 ", 3),
            ("((((7))))", 7),
        ]
    )
    func evaluates(source: String, expected: Double) throws {
        #expect(try MathExpression.evaluate(source) == expected)
    }

    @Test(
        "reports errors at the offending position",
        arguments: [
            ("", 1, "empty expression"),
            ("   ", 4, "empty expression"),
            ("1 + $", 5, "unexpected character '$'"),
            ("abc", 1, "unexpected character 'a'"),
            ("(1 + 2 ", 8, "expected ')' but found end of input"),
            ("(1 2)", 4, "expected ')' but found '2'"),
            ("1 +", 4, "expected a number or '(' but found end of input"),
            ("1 * / 2", 5, "expected a number or '(' but found '/'"),
            ("()", 2, "expected a number or '(' but found ')'"),
            ("1 2", 3, "expected an operator or end of input but found '2'"),
            ("2(3)", 2, "expected an operator or end of input but found '('"),
            ("(1))", 4, "unmatched ')'"),
            (".", 1, "expected digits in number"),
            ("1 + .e3", 5, "expected digits in number"),
            ("1e", 3, "expected digits in exponent but found end of input"),
            ("1e+x", 4, "unexpected character 'x'"),
            ("1e 3", 3, "expected digits in exponent but found ' '"),
            ("1 / 0", 3, "division by zero"),
            ("1/(2-2)", 2, "division by zero"),
            ("1e999", 1, "number '1e999' is too large"),
            ("10 ^ 400", 4, "result of '^' is not a finite number"),
            ("(-8) ^ 0.5", 6, "result of '^' is not a finite number"),
            ("0 ^ -1", 3, "result of '^' is not a finite number"),
            ("1e308 * 10", 7, "result of '*' is not a finite number"),
            ("1e308 + 1e308", 7, "result of '+' is not a finite number"),
            // Positions count grapheme clusters, not bytes or scalars.
            ("é + 1", 1, "unexpected character 'é'"),
            ("1 + 👍🏽 + 2", 5, "unexpected character '👍🏽'"),
        ]
    )
    func reportsErrors(source: String, position: Int, message: String) {
        #expect(throws: MathExpressionError(position: position, message: message)) {
            try MathExpression.evaluate(source)
        }
    }

    @Test("describes errors with their position")
    func errorDescription() {
        do {
            _ = try MathExpression.evaluate("1 + $")
            Issue.record("expected an error")
        } catch {
            #expect(error.description == "at position 5: unexpected character '$'")
        }
        let error = MathExpressionError(position: 8, message: "expected ')' but found end of input")
        #expect(error.description == "at position 8: expected ')' but found end of input")
    }

    @Test("accepts nesting up to the limit")
    func nestingAtLimit() throws {
        let depth = MathExpression.maxNestingDepth
        let parens = String(repeating: "(", count: depth) + "1" + String(repeating: ")", count: depth)
        #expect(try MathExpression.evaluate(parens) == 1)
        let minuses = String(repeating: "-", count: depth) + "1"
        #expect(try MathExpression.evaluate(minuses) == 1)
        let mixed = String(repeating: "-(", count: depth / 2) + "2" + String(repeating: ")", count: depth / 2)
        #expect(try MathExpression.evaluate(mixed) == 2)
    }

    @Test(
        "rejects nesting beyond the limit instead of overflowing the stack",
        arguments: ["(", "-", "+"]
    )
    func nestingBeyondLimit(opener: String) {
        let depth = MathExpression.maxNestingDepth
        let source = String(repeating: opener, count: 10_000) + "1"
        let message = "expression is nested too deeply (limit is \(depth))"
        #expect(throws: MathExpressionError(position: depth + 1, message: message)) {
            try MathExpression.evaluate(source)
        }
    }

    @Test("limits long exponent chains, which recurse too")
    func exponentChain() {
        let depth = MathExpression.maxNestingDepth
        let source = Array(repeating: "1", count: depth + 2).joined(separator: "^")
        // The (depth + 1)-th '^' is the first one past the limit; each "1^" takes two characters.
        let message = "expression is nested too deeply (limit is \(depth))"
        #expect(throws: MathExpressionError(position: 2 * (depth + 1), message: message)) {
            try MathExpression.evaluate(source)
        }
    }
}
