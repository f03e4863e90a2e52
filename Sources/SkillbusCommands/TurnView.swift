import Foundation
import Skillbus
import Synchronization

/// What `skillbus ask` shows on a terminal while its turn runs: the agent's state as it changes, each call
/// as it starts and as it ends (skill, parameters in short, agent, duration, result in short), on standard
/// error; the reply streams on standard output between them.
final class TurnView: Sendable {
    /// Whether standard output is in the middle of a line of the reply: a line on standard error would
    /// then be glued to it.
    private let midLine = Mutex(false)

    func piece(_ text: String) {
        midLine.withLock { $0 = !text.hasSuffix("\n") }
        FileHandle.standardOutput.write(Data(text.utf8))  // unbuffered, so each piece shows as it comes
    }

    func show(_ agent: String, _ progress: TurnProgress) { show(agent, progress, indent: "") }

    /// A nested turn's lines go under the step that asked for it, four spaces deeper for each level.
    private func show(_ agent: String, _ progress: TurnProgress, indent: String) {
        let line: String
        switch progress {
        case .nested(let depth, let inner):
            return show(agent, inner, indent: String(repeating: "    ", count: depth))
        case .state(.executingSkill(let skill), let parameters):
            line = "\(agent): executingSkill \(skill) \(Self.brief(parameters ?? [:], 60))"
        case .state(.delegating(let target), _):
            line = "\(agent): delegating to \(target)"
        case .state(.failed(let reason), _):
            line = "\(agent): failed (\(reason))"
        case .state(let state, _):
            line = "\(agent): \(state.name)"
        case .call(let call):
            let outcome: String
            switch call.outcome {
            case .success(let result): outcome = Self.brief(result.humanReadable, 80)
            case .failure(let error): outcome = "\(error.code): " + Self.brief(error.message, 80)
            }
            let ranOn = call.agent.isEmpty ? "not run" : "on \(call.agent), " + String(format: "%.1f ms", call.durationMs)
            let mark = if case .success = call.outcome { "✓" } else { "✗" }
            let what =
                call.asked.map { "ask \($0.text) \"\(Self.brief(call.parameters["message"]?.stringValue ?? "", 60))\"" }
                ?? "\(call.skill) \(Self.brief(.object(call.parameters), 60))"
            line = "  \(mark) \(what) \(ranOn) → \(outcome)"
        }
        if midLine.withLock({ $0 }) {
            midLine.withLock { $0 = false }
            FileHandle.standardOutput.write(Data("\n".utf8))
        }
        printError(indent + line)
    }

    /// Parameters as `key=value` pairs, cut to `limit` characters.
    static func brief(_ parameters: JSONValue, _ limit: Int) -> String {
        let pairs = (parameters.objectValue ?? [:]).sorted { $0.key < $1.key }.map { key, value in
            "\(key)=\(value.stringValue ?? value.jsonString)"
        }
        return brief(pairs.joined(separator: " "), limit)
    }

    static func brief(_ text: String, _ limit: Int) -> String {
        let line = text.replacingOccurrences(of: "\n", with: " ")
        return line.count <= limit ? line : String(line.prefix(limit - 1)) + "…"
    }
}
