import Foundation
import Skillbus
import Testing

/// Team rounds (PROTOCOL §3.5.10) with real processes: the shipped team (configs/team.json) runs the shipped
/// pipeline plan and answers asks rounds; every agent's skill calls are the round's, so identical ones run once.
@Suite("Team rounds", .serialized, .timeLimit(.minutes(3)))
struct TeamRoundTests {
    static let configs = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent().appendingPathComponent("configs")

    /// A coordinator and the agents of configs/team.json, each started from its entry there.
    func team() async throws -> TestCluster {
        let cluster = try await TestCluster()
        let file = try JSONValue(parsing: Array(try Data(contentsOf: Self.configs.appendingPathComponent("team.json"))))
        for entry in file["workers"]?.arrayValue ?? [] {
            guard case .object(var worker) = entry, let name = worker["name"]?.stringValue else { continue }
            worker["version"] = 1
            try await cluster.startWorker(name, ["--config", try Self.write(.object(worker), name: name)])
        }
        return cluster
    }

    static func write(_ json: JSONValue, name: String) throws -> String {
        let path = NSTemporaryDirectory() + "skillbus-team-\(name)-\(UUID().uuidString.prefix(8)).json"
        try Data(json.serialized()).write(to: URL(fileURLWithPath: path))
        return path
    }

    /// `skillbus ask … --json` parsed.
    func ask(_ cluster: TestCluster, _ arguments: [String]) async throws -> (code: Int32, document: JSONValue) {
        let (code, output) = try await runSkillbus(["ask"] + arguments + ["--json", "--coordinator", cluster.bus])
        return (code, try JSONValue(parsing: output.first { $0.hasPrefix("{") } ?? "null"))
    }

    func subCalls(_ document: JSONValue) -> [JSONValue] {
        (document["invocations"]?.arrayValue ?? []).filter { $0["id"]?.stringValue?.hasPrefix("sub-") == true }
    }

    @Test("the shipped pipeline: writer drafts, critic reviews the draft, writer revises; sent again, stored")
    func pipeline() async throws {
        let cluster = try await team()
        defer { cluster.terminate() }
        let plan = Self.configs.appendingPathComponent("plans/team.json").path
        let (code, document) = try await cluster.sendJSON(["--plan", plan, "--round-id", "team-1"])
        #expect(code == 0 && document["status"] == "ok", "\(document)")
        let steps = (document["invocations"]?.arrayValue ?? []).prefix(4)
        // The last step runs text.stats, which the lead and the critic both offer.
        #expect(steps.prefix(3).map { $0["agent"]?.stringValue ?? "" } == ["writer", "critic", "writer"])
        let draft = document["result"]?["draft"]?["text"]?.stringValue ?? ""
        let critique = document["result"]?["critique"]?["text"]?.stringValue ?? ""
        #expect(draft == "Skillbus makes agents work together." && critique == "5 words; give an example.")
        // Each ask's message was made of the replies before it, and its turn document is in the round's.
        let asked = steps.map { $0["ask"]?["message"]?.stringValue ?? "" }
        #expect(asked[1] == "critique " + draft && asked[2] == "revise \(draft) after \(critique)")
        #expect(steps.prefix(3).allSatisfy { $0["turn"]?["round"] == "team-1" && $0["turn"]?["status"] == "ok" })
        #expect(steps[2]["turn"]?["role"] == "writer")
        #expect(document["result"]?["count"]?["json"]?["words"] == 11)
        // The agents' own calls are the round's sub-calls.
        #expect(subCalls(document).map { $0["skill"]?.stringValue ?? "" } == ["echo", "text.stats", "echo"])

        let (againCode, again) = try await cluster.sendJSON(["--plan", plan, "--round-id", "team-1"])
        #expect(againCode == 0 && again["stored"] == true)
        #expect(again["invocations"] == document["invocations"])
    }

    @Test("asks majority: three agents agree (case aside), and their three identical calls run once")
    func majority() async throws {
        let cluster = try await team()
        defer { cluster.terminate() }
        let (code, document) = try await ask(
            cluster, ["what is 6*7", "--agents", "lead,writer,critic", "--aggregate", "majority"])
        #expect(code == 0 && document["shape"] == "asks" && document["status"] == "ok", "\(document)")
        // The critic says "6*7 IS 42": replies are compared lower-cased; the result is the first agent's.
        #expect(document["result"]?["text"] == "6*7 is 42")
        #expect(document["aggregate"]?["votes"] == 3 && document["aggregate"]?["of"] == 3)
        let calls = subCalls(document)
        #expect(calls.count == 3 && calls.allSatisfy { $0["skill"] == "math.eval" && $0["status"] == "ok" })
        #expect(calls.filter { $0["deduplicated"] == true }.count == 2, "\(calls)")
        #expect(document["summary"]?["deduplicated"] == 2)
    }

    @Test("asks all: each reply; the lead's call, the critic it asked, and the critic asked directly run stats once")
    func allWithDelegation() async throws {
        let cluster = try await team()
        defer { cluster.terminate() }
        let (code, document) = try await ask(cluster, ["review Skillbus runs agents", "--agents", "lead,critic"])
        #expect(code == 0 && document["status"] == "ok", "\(document)")
        let replies = (document["result"]?.arrayValue ?? []).map { $0["result"]?["text"]?.stringValue ?? "" }
        #expect(replies == ["3 words.\nThe critic says: 3 words; give an example.", "3 words; give an example."])
        // The lead asked the critic: a nested turn of the same round, in the lead's turn document.
        let lead = document["invocations"]?.arrayValue?.first
        let delegation = lead?["turn"]?["calls"]?.arrayValue?.first { $0["ask"] != nil }
        #expect(delegation?["turn"]?["agent"] == "critic" && delegation?["turn"]?["round"] == document["round"])
        let stats = subCalls(document).filter { $0["skill"] == "text.stats" }
        #expect(stats.count == 3 && stats.filter { $0["deduplicated"] == false }.count == 1, "\(stats)")
    }

    @Test("asks first: the quick agent wins and the slow one's turn is cancelled, its call with it")
    func firstCancelsTheOthers() async throws {
        let cluster = try await TestCluster()
        defer { cluster.terminate() }
        // Only the slow agent offers sleep: its call runs on it.
        let agents: [(String, String, JSONValue)] = [
            ("quick", "echo", ["intent": "go", "skill": "echo", "params": ["text": "done"], "reply": "{result}"]),
            ("slow", "sleep", ["intent": "go", "skill": "sleep", "params": ["ms": 20_000], "reply": "rested"]),
        ]
        for (name, skill, rule) in agents {
            let config: JSONValue = [
                "version": 1, "name": .string(name), "skills": [.string(skill)], "planner": ["rules": [rule]],
            ]
            try await cluster.startWorker(name, ["--config", try Self.write(config, name: name)])
        }
        let (code, document) = try await ask(cluster, ["go", "--all", "--aggregate", "first"])
        #expect(code == 0 && document["agent"] == "quick" && document["result"]?["text"] == "done", "\(document)")
        let slow = document["invocations"]?.arrayValue?.first { $0["id"] == "slow" }
        #expect(slow?["status"] == "cancelled" && slow?["error"]?["details"]?["reason"] == "lost race")
        // The slow agent stopped its turn, and so its 20 s sleep.
        try await waitUntil("the slow agent's sleep to stop", timeout: .seconds(10)) {
            try await cluster.inFlight(agent: "slow") == 0
        }
    }

    @Test("a team round's call runs on the agent that made it when that agent offers the skill (OFFER), once")
    func offeredCallsRunOnTheirAgent() async throws {
        let cluster = try await TestCluster()
        defer { cluster.terminate() }
        // A plain worker offers echo too: a REQUEST could be routed to it, an offered call never is.
        _ = try await cluster.startWorker("helper")
        for name in ["left", "right"] {
            let rule: JSONValue = [
                "intent": "say (?<word>\\w+)", "skill": "echo", "params": ["text": "{word}"], "reply": "{result}",
            ]
            let config: JSONValue = [
                "version": 1, "name": .string(name), "skills": ["echo"], "planner": ["rules": [rule]],
            ]
            try await cluster.startWorker(name, ["--config", try Self.write(config, name: name)])
        }
        for _ in 0..<3 {
            let (code, document) = try await ask(cluster, ["say hi", "--agents", "left,right"])
            #expect(code == 0 && document["status"] == "ok", "\(document)")
            let turns = (document["invocations"]?.arrayValue ?? []).compactMap { $0["turn"] }
            let calls = turns.flatMap { turn in (turn["calls"]?.arrayValue ?? []).map { (turn["agent"], $0) } }
            #expect(calls.count == 2 && calls.allSatisfy { $0.1["result"]?["text"] == "hi" }, "\(turns)")
            // One ran, on the agent whose turn made it; the other turn got that outcome.
            let ranBy = Set(calls.map { $0.1["agent"]?.stringValue ?? "" })
            #expect(ranBy.count == 1 && (ranBy == ["left"] || ranBy == ["right"]), "\(calls)")
            #expect(subCalls(document).filter { $0["deduplicated"] == false }.count == 1, "\(document)")
        }
    }

    @Test("an ask step whose agent hands over is answered by the agent it handed to")
    func handoffInsideARound() async throws {
        let cluster = try await team()
        defer { cluster.terminate() }
        let plan: JSONValue = ["steps": [["id": "complaint", "ask": ["role": "lead", "message": "my order is broken"]]]]
        let (code, document) = try await cluster.sendJSON(["--plan", try Self.write(plan, name: "plan")])
        #expect(code == 0 && document["status"] == "ok", "\(document)")
        let step = document["invocations"]?.arrayValue?.first
        #expect(step?["agent"] == "support" && step?["turn"]?["handedOverBy"]?["agent"] == "lead")
        #expect(step?["result"]?["text"]?.stringValue?.hasPrefix("Support here") == true)
    }
}
