import Foundation
import Skillbus
import Synchronization

/// How `skillbus send` shows partial output as it arrives (PROTOCOL §5.20): lines for people, one JSON
/// object per event for `--stream`, or nothing until the document for `--json`. It hears the batches on
/// the client's socket thread, all of them before the round's document.
final class OutputPrinter: Sendable {
    enum Mode: Sendable {
        /// Each part on a line of its own, prefixed with its invocation's id when `labelled`.
        case lines(labelled: Bool)
        /// `{"event":"output",…}` per batch, then `{"event":"round","document":…}`.
        case jsonLines
        /// Nothing now: the document (`--json`) holds the parts.
        case silent
    }

    let mode: Mode
    /// The text parts printed for each invocation, so that a text result that only repeats them is not
    /// printed twice. Bounded as the output is: by the worker's and the bus's limits.
    private let printed = Mutex<[String: [String]]>([:])

    init(mode: Mode) { self.mode = mode }

    func receive(_ invocation: String, _ batch: OutputBatch) {
        switch mode {
        case .silent:
            return
        case .jsonLines:
            let event: JSONValue = [
                "event": "output", "invocation": .string(invocation), "first": .number(Double(batch.first)),
                "parts": .array(batch.parts.map(\.json)),
            ]
            Self.write(event.jsonString + "\n")
        case .lines(let labelled):
            let lines = batch.parts.map { part in
                labelled ? "[\(invocation)] \(part.humanReadable)" : part.humanReadable
            }
            printed.withLock { printed in
                for part in batch.parts {
                    printed[invocation, default: []].append(part.humanReadable)
                }
            }
            Self.write(lines.map { $0 + "\n" }.joined())
        }
    }

    /// The end of a `--stream`: the round's document as the last event.
    static func finish(_ document: RoundDocument) {
        write((["event": "round", "document": document.json] as JSONValue).jsonString + "\n")
    }

    /// Whether `result` is the text its streamed parts already showed (a command skill's standard output:
    /// the lines as parts, then all of them as the result).
    func alreadyShown(_ result: SkillResult, of invocation: String) -> Bool {
        guard case .text(let text) = result, let parts = printed.withLock({ $0[invocation] }), !parts.isEmpty
        else { return false }
        let body = text.hasSuffix("\n") ? String(text.dropLast()) : text
        return body == parts.joined(separator: "\n")
    }

    /// Straight to the file descriptor, unbuffered: a part shows the moment it arrives, and nothing the
    /// process prints later can overtake it.
    private static func write(_ text: String) {
        FileHandle.standardOutput.write(Data(text.utf8))
    }
}
