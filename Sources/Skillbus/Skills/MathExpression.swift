import Foundation

/// A parse or evaluation failure, located at a 1-based character offset in the source.
public struct MathExpressionError: Error, Sendable, Equatable, CustomStringConvertible {
    /// 1-based offset (in characters) of the offending character; `count + 1` means end of input.
    public let position: Int
    public let message: String

    public init(position: Int, message: String) {
        self.position = position
        self.message = message
    }

    public var description: String {
        "at position \(position): \(message)"
    }
}

/// Evaluates arithmetic expressions with a hand-written recursive-descent parser.
///
/// Grammar (lowest to highest precedence):
///
///     expression := term (('+' | '-') term)*
///     term       := unary (('*' | '/') unary)*
///     unary      := ('+' | '-') unary | power
///     power      := primary ('^' unary)?
///     primary    := number | '(' expression ')'
///
/// Because `power` takes a `unary` on its right but sits below `unary` on its left, `^` is
/// right-associative, `-2^2` is `-(2^2)`, and `2^-1` is still accepted.
public enum MathExpression {
    /// Deepest allowed nesting of parentheses, unary operators and exponent chains.
    public static let maxNestingDepth = 200

    public static func evaluate(_ source: String) throws(MathExpressionError) -> Double {
        var parser = Parser(characters: Array(source))
        return try parser.parseAll()
    }
}

private struct Parser {
    let characters: [Character]
    var index = 0
    var depth = 0

    init(characters: [Character]) {
        self.characters = characters
    }

    mutating func parseAll() throws(MathExpressionError) -> Double {
        skipWhitespace()
        if index == characters.count {
            throw error(at: index, "empty expression")
        }
        let value = try parseExpression()
        if index < characters.count {
            if characters[index] == ")" {
                throw error(at: index, "unmatched ')'")
            }
            throw unexpected(expecting: "an operator or end of input")
        }
        return value
    }

    // MARK: - Grammar rules

    mutating func parseExpression() throws(MathExpressionError) -> Double {
        var value = try parseTerm()
        while let op = peek(), op == "+" || op == "-" {
            let opIndex = index
            advance()
            let rhs = try parseTerm()
            value = try checked(op == "+" ? value + rhs : value - rhs, op: op, at: opIndex)
        }
        return value
    }

    mutating func parseTerm() throws(MathExpressionError) -> Double {
        var value = try parseUnary()
        while let op = peek(), op == "*" || op == "/" {
            let opIndex = index
            advance()
            let rhs = try parseUnary()
            if op == "/" && rhs == 0 {
                throw error(at: opIndex, "division by zero")
            }
            value = try checked(op == "*" ? value * rhs : value / rhs, op: op, at: opIndex)
        }
        return value
    }

    mutating func parseUnary() throws(MathExpressionError) -> Double {
        guard let op = peek(), op == "-" || op == "+" else {
            return try parsePower()
        }
        // Each unary operator recurses, so it counts towards the nesting limit.
        try enterNesting(at: index)
        defer { depth -= 1 }
        advance()
        let operand = try parseUnary()
        return op == "-" ? -operand : operand
    }

    mutating func parsePower() throws(MathExpressionError) -> Double {
        let base = try parsePrimary()
        guard peek() == "^" else {
            return base
        }
        let opIndex = index
        try enterNesting(at: opIndex)
        defer { depth -= 1 }
        advance()
        let exponent = try parseUnary()
        return try checked(pow(base, exponent), op: "^", at: opIndex)
    }

    mutating func parsePrimary() throws(MathExpressionError) -> Double {
        guard let character = peek() else {
            throw unexpected(expecting: "a number or '('")
        }
        if character == "(" {
            let openIndex = index
            try enterNesting(at: openIndex)
            defer { depth -= 1 }
            advance()
            let value = try parseExpression()
            guard peek() == ")" else {
                throw unexpected(expecting: "')'")
            }
            advance()
            return value
        }
        if character.isASCIIDigit || character == "." {
            return try parseNumber()
        }
        throw unexpected(expecting: "a number or '('")
    }

    /// Scans `digits [. digits] [e [+-] digits]`, allowing `.5` and `5.` but not a lone `.`.
    mutating func parseNumber() throws(MathExpressionError) -> Double {
        let start = index
        var mantissaDigits = 0
        while index < characters.count, characters[index].isASCIIDigit {
            index += 1
            mantissaDigits += 1
        }
        if index < characters.count, characters[index] == "." {
            index += 1
            while index < characters.count, characters[index].isASCIIDigit {
                index += 1
                mantissaDigits += 1
            }
        }
        if mantissaDigits == 0 {
            throw error(at: start, "expected digits in number")
        }
        if index < characters.count, characters[index] == "e" || characters[index] == "E" {
            index += 1
            if index < characters.count, characters[index] == "+" || characters[index] == "-" {
                index += 1
            }
            guard index < characters.count, characters[index].isASCIIDigit else {
                throw unexpected(expecting: "digits in exponent")
            }
            while index < characters.count, characters[index].isASCIIDigit {
                index += 1
            }
        }
        let literal = String(characters[start..<index])
        // The scanner only admits well-formed literals, so a nil here is a bug, not user error.
        guard let value = Double(literal) else {
            throw error(at: start, "invalid number '\(literal)'")
        }
        guard value.isFinite else {
            throw error(at: start, "number '\(literal)' is too large")
        }
        skipWhitespace()
        return value
    }

    // MARK: - Helpers

    /// The next significant character; whitespace after every token is already skipped.
    func peek() -> Character? {
        index < characters.count ? characters[index] : nil
    }

    mutating func advance() {
        index += 1
        skipWhitespace()
    }

    mutating func skipWhitespace() {
        while index < characters.count, characters[index].isWhitespace {
            index += 1
        }
    }

    mutating func enterNesting(at position: Int) throws(MathExpressionError) {
        // Bounding recursion depth turns hostile input into an error rather than a stack overflow.
        guard depth < MathExpression.maxNestingDepth else {
            throw error(at: position, "expression is nested too deeply (limit is \(MathExpression.maxNestingDepth))")
        }
        depth += 1
    }

    func checked(_ value: Double, op: Character, at position: Int) throws(MathExpressionError) -> Double {
        guard value.isFinite else {
            throw error(at: position, "result of '\(op)' is not a finite number")
        }
        return value
    }

    func error(at index: Int, _ message: String) -> MathExpressionError {
        MathExpressionError(position: index + 1, message: message)
    }

    /// Distinguishes characters outside the language from valid tokens in the wrong place.
    func unexpected(expecting expected: String) -> MathExpressionError {
        guard index < characters.count else {
            return error(at: index, "expected \(expected) but found end of input")
        }
        let character = characters[index]
        // Whitespace only gets here inside a number (e.g. "1e 3"), where it is a misplaced token.
        if !character.isMathToken && !character.isWhitespace {
            return error(at: index, "unexpected character '\(character)'")
        }
        return error(at: index, "expected \(expected) but found '\(character)'")
    }
}

extension Character {
    fileprivate var isASCIIDigit: Bool {
        isASCII && isWholeNumber
    }

    fileprivate var isMathToken: Bool {
        isASCIIDigit || "+-*/^().".contains(self)
    }
}
