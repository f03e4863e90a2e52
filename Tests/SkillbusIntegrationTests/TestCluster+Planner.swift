import Foundation
import Skillbus

extension TestCluster {
    /// A worker with echo and the rules planner, which answers `say WORD` by calling echo with `WORD!`: a turn
    /// of one call whose states are always the same (PROTOCOL §3.7).
    func startSayingWorker(_ name: String) async throws {
        let rules: JSONValue = [
            "rules": [
                ["intent": "say (?<word>\\w+)", "skill": "echo", "params": ["text": "{word}!"], "reply": "{result}"]
            ]
        ]
        let config = NSTemporaryDirectory() + "skillbus-saying-\(name)-\(UUID().uuidString.prefix(8)).json"
        try Data(
            JSONValue.object(["version": 1, "name": .string(name), "skills": ["echo"], "planner": rules]).serialized()
        )
        .write(to: URL(fileURLWithPath: config))
        defer { try? FileManager.default.removeItem(atPath: config) }
        try await startWorker(name, ["--config", config])
    }

    /// `skillbus ask "say WORD" --agent AGENT --session SESSION`: true when it answered `WORD!`.
    func say(_ word: String, agent: String, session: String) async throws -> Bool {
        let (code, output) = try await runSkillbus(
            ["ask", "say \(word)", "--agent", agent, "--session", session, "--coordinator", bus])
        return code == 0 && output.contains("\(word)!")
    }
}
