import Foundation

/// A line that matched a grep pattern.
public struct GrepMatch: Sendable, Equatable {
    /// 1-based line number.
    public let lineNumber: Int
    /// The line without its line terminator.
    public let line: String

    public init(lineNumber: Int, line: String) {
        self.lineNumber = lineNumber
        self.line = line
    }
}

/// The grep pattern is not a valid regular expression, or the search was stopped.
public struct TextGrepError: Error, Sendable, Equatable, CustomStringConvertible {
    public let pattern: String
    public let message: String
    /// The caller's `shouldStop` ended the search (its deadline passed, or it was cancelled).
    public let stopped: Bool

    public init(pattern: String, message: String, stopped: Bool = false) {
        self.pattern = pattern
        self.message = message
        self.stopped = stopped
    }

    public var description: String {
        message
    }
}

/// Line-oriented regular-expression search, like `grep -n`.
public enum TextGrep {
    /// Returns the lines of `text` that contain a match for `pattern`, stopping after `maxMatches`.
    ///
    /// Lines are split on "\n" with a trailing "\r" removed; a final newline does not start an extra
    /// empty line. Patterns use ICU syntax as implemented by `NSRegularExpression`. `shouldStop` is asked
    /// while a match runs (ICU reports progress every fraction of a millisecond), so a pattern that
    /// backtracks catastrophically is stopped as soon as it says so, with an error.
    public static func matches(
        pattern: String,
        in text: String,
        maxMatches: Int = 10_000,
        shouldStop: () -> Bool = { false }
    ) throws(TextGrepError) -> [GrepMatch] {
        let regex: NSRegularExpression
        do {
            regex = try NSRegularExpression(pattern: pattern)
        } catch {
            // Foundation's error carries no detail beyond "the value is invalid", so name the pattern.
            let reason = pattern.isEmpty ? ": the pattern is empty" : ""
            throw TextGrepError(pattern: pattern, message: "invalid regular expression '\(pattern)'\(reason)")
        }
        guard maxMatches > 0 else {
            return []
        }

        var results: [GrepMatch] = []
        for (offset, line) in lines(of: text).enumerated() {
            let range = NSRange(line.startIndex..<line.endIndex, in: line)
            var matched = false
            var stopped = false
            withoutActuallyEscaping(shouldStop) { shouldStop in
                regex.enumerateMatches(in: line, options: [.reportProgress], range: range) { match, _, stop in
                    if match != nil {
                        matched = true
                        stop.pointee = true
                    } else if shouldStop() {
                        stopped = true
                        stop.pointee = true
                    }
                }
            }
            if stopped {
                throw TextGrepError(
                    pattern: pattern, message: "the search for '\(pattern)' was stopped at line \(offset + 1)",
                    stopped: true)
            }
            guard matched else {
                continue
            }
            results.append(GrepMatch(lineNumber: offset + 1, line: line))
            if results.count == maxMatches {
                break
            }
        }
        return results
    }

    /// Splits on the "\n" scalar; splitting on Characters would miss "\r\n", which is one grapheme.
    static func lines(of text: String) -> [String] {
        // Empty input has no lines at all, just as `grep` reports nothing for an empty file.
        if text.isEmpty {
            return []
        }
        var pieces = text.unicodeScalars.split(separator: "\n", omittingEmptySubsequences: false)
        if text.unicodeScalars.last == "\n" {
            pieces.removeLast()
        }
        return pieces.map { piece in
            var line = Substring(piece)
            if line.unicodeScalars.last == "\r" {
                line.unicodeScalars.removeLast()
            }
            return String(line)
        }
    }
}
