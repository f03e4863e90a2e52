import Foundation
import Testing

/// The README is the first thing a user reads; a script that rewrites it must not mangle it.
@Suite("README: one of each section, the two commands")
struct ReadmeTests {
    static let readme = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("README.md")

    @Test("starts with its title, names make up and make test, and repeats no heading or paragraph")
    func wellFormed() throws {
        let text = try String(contentsOf: Self.readme, encoding: .utf8)
        #expect(text.hasPrefix("# Skillbus\n"))
        #expect(text.contains("make up ") && text.contains("make test "))
        let headings = text.split(separator: "\n").filter { $0.hasPrefix("## ") }
        #expect(Set(headings).count == headings.count, "a heading appears twice")
        let paragraphs = text.components(separatedBy: "\n\n")
            .map { $0.trimmingCharacters(in: .whitespacesAndNewlines) }
            .filter { $0.count > 200 && !$0.hasPrefix("```") && !$0.hasPrefix("|") }
        #expect(Set(paragraphs).count == paragraphs.count, "a paragraph appears twice")
    }
}
