import Foundation
import Skillbus
import Testing

/// `skillbus bench`, the user's benchmark, as a user runs it: every part, as text and as JSON. The team's
/// figures (`skillbus-perf`) are UpAndBenchTests'.
@Suite("skillbus bench, as a user runs it", .serialized, .timeLimit(.minutes(3)))
struct UserBenchTests {
    @Test("bench smoke: the user's bench measures echo on both sides, and rounds, as text and as JSON")
    func userBenchSmoke() async throws {
        let (code, output) = try await runSkillbus(
            ["bench", "--workers", "1", "--requests", "10", "--json"], timeout: .seconds(60))
        #expect(code == 0, "\(output.suffix(20))")
        let document = try JSONValue(parsing: output.first { $0.hasPrefix("{") } ?? "")
        #expect(document["requests"]?.intValue == 10 && document["workers"]?.intValue == 1)
        for level in ["inFlight1", "inFlight64"] {
            for side in ["skillbus", "baseline"] {
                let figures = document[side]?[level]
                #expect((figures?["tasksPerSecond"]?.doubleValue ?? 0) > 0, "\(side).\(level)")
                // Five alternating pairs of ten requests each.
                #expect(figures?["failed"] == 0 && figures?["completed"]?.intValue == 50, "\(side).\(level)")
            }
            let ratios = document["ratios"]?[level]
            #expect((ratios?["throughputRatio"]?.doubleValue ?? 0) > 0 && ratios?["p99LatencyRatio"] != nil)
            #expect(ratios?["throughputRatios"]?.arrayValue?.count == 5, "ratios.\(level)")
        }
        let rounds = document["rounds"]
        for key in ["singleInvocation", "fanout"] {
            #expect(rounds?[key]?["failed"] == 0 && rounds?[key]?["completed"]?.intValue == 10, "rounds.\(key)")
        }
        #expect((rounds?["fanoutInvocationsVsSingleRatio"]?.doubleValue ?? 0) > 0)
        // One-invocation ROUNDs against REQUESTs, with the coordinator's CPU for each shape.
        let versus = rounds?["versusRequests"]
        for side in ["round", "request"] {
            #expect(versus?[side]?["completed"]?.intValue == 50 && versus?[side]?["failed"] == 0, "\(side)")
            #expect((versus?[side]?["serverMicrosPerRequest"]?.doubleValue ?? 0) > 0, "\(side)")
        }
        for ratio in ["throughputRatio", "coordinatorCpuRatio", "fanoutCpuRatio", "planCpuRatio"] {
            #expect((versus?[ratio]?.doubleValue ?? 0) > 0, "\(ratio)")
        }
        Self.expectTurnRows(document["turns"], samples: 10)
        // The deployed coordinator (keys, journal, a feed watcher) against the plain one and the raw proxy,
        // and keys alone: three alternating pairs of ten each, all answered ok.
        let deployed = document["deployed"]
        let rows = [
            ("versusPlain", "deployed", "plain"), ("versusRaw", "deployed", "raw"),
        ] + ["inFlight1", "inFlight64"].map { ("keysAlone." + $0, "keys", "plain") }
        for (name, subject, baseline) in rows {
            let row = name.split(separator: ".").reduce(deployed) { $0?[String($1)] }
            for side in [subject, baseline] {
                #expect(row?[side]?["failed"] == 0 && row?[side]?["completed"]?.intValue == 30, "\(name).\(side)")
            }
            #expect((row?["throughputRatio"]?.doubleValue ?? 0) > 0, "\(name)")
        }

        let (textCode, text) = try await runSkillbus(["bench", "--workers", "1", "--requests", "10"], timeout: .seconds(60))
        #expect(textCode == 0)
        #expect(text.contains { $0.hasPrefix("  skillbus / baseline") } && text.contains { $0.hasPrefix("  fan-out to") })
        #expect(text.contains { $0.hasPrefix("  one-invocation ROUND: rate") })
        #expect(text.contains { $0.hasPrefix("  ROUNDs / plain REQUESTs") })
        for row in [
            "one-call turn / plain send", "delegated ask / two asks in turn", "asks round of 3 / 3 asks at once",
            "asks round of 3 / 3 asks, 1 round",
        ] {
            #expect(text.contains { $0.hasPrefix("  " + row) }, "\(row)")
        }
        // The figures of the team's perf work (targets, issues) are skillbus-perf's, not the product's.
        #expect(!text.contains { $0.localizedCaseInsensitiveContains("issue") || $0.contains("target") })
    }

    @Test("bench --only mcp: a tools/call through skillbus mcp against the same send, p50 at 1 in flight")
    func userBenchMCP() async throws {
        let (code, output) = try await runSkillbus(
            ["bench", "--workers", "1", "--requests", "10", "--only", "mcp", "--json"], timeout: .seconds(60))
        #expect(code == 0, "\(output.suffix(20))")
        let document = try JSONValue(parsing: output.first { $0.hasPrefix("{") } ?? "")
        #expect(document["skillbus"] == nil && document["turns"] == nil, "only the MCP row was measured")
        let mcp = document["mcp"]
        for side in ["mcpCall", "plainSend"] {
            // Five alternating pairs of ten calls each, every one answered with its echo.
            #expect(mcp?[side]?["completed"]?.intValue == 50 && mcp?[side]?["failed"] == 0, "\(side)")
        }
        #expect((mcp?["p50Ratio"]?.doubleValue ?? 0) > 0 && mcp?["p50Ratios"]?.arrayValue?.count == 5)

        let (textCode, text) = try await runSkillbus(
            ["bench", "--workers", "1", "--requests", "10", "--only", "mcp"], timeout: .seconds(60))
        #expect(textCode == 0)
        #expect(text.contains { $0.hasPrefix("  tools/call via skillbus mcp") }, "\(text)")
    }

    @Test("bench --only turns measures the turn rows alone; --only refuses a part it does not know")
    func userBenchTurnsOnly() async throws {
        let (code, output) = try await runSkillbus(
            ["bench", "--workers", "1", "--requests", "10", "--only", "turns", "--json"], timeout: .seconds(60))
        #expect(code == 0, "\(output.suffix(20))")
        let document = try JSONValue(parsing: output.first { $0.hasPrefix("{") } ?? "")
        #expect(document["skillbus"] == nil && document["rounds"] == nil, "only the turns were measured")
        Self.expectTurnRows(document["turns"], samples: 10)

        let (usageCode, usage) = try await runSkillbus(["bench", "--only", "turns,echoes"], timeout: .seconds(10))
        #expect(usageCode == 2)
        #expect(usage.contains { $0.contains("option '--only'") && $0.contains("'echoes'") }, "\(usage)")
    }

    /// The turn rows of the user's bench: each with both sides' figures, five pair ratios and their median.
    /// The asks round's row has figures when the bus takes asks rounds, and says why not when it does not.
    static func expectTurnRows(_ turns: JSONValue?, samples: Int) {
        #expect(turns?["samples"]?.intValue == samples && turns?["pairs"]?.intValue == 5)
        let rows = [
            ("oneCallTurnVsSend", "oneCallTurn", "plainSend"),
            ("delegatedAskVsTwoAsks", "delegatedAsk", "twoAsksInTurn"),
            ("asksRoundVsThreeAsks", "asksRound", "threeAsksAtOnce"),
            ("asksRoundVsThreeAsksInOneRound", "asksRound", "threeAsksInOneRound"),
        ]
        for (name, subject, baseline) in rows {
            let row = turns?[name]
            if name.hasPrefix("asksRound"), row?["available"] == false {
                #expect(row?["reason"] == "needs asks rounds")
                continue
            }
            for side in [subject, baseline] {
                // Five alternating pairs of `samples` samples each, every one answered ok.
                #expect(
                    row?[side]?["failed"] == 0 && row?[side]?["completed"]?.intValue == 5 * samples, "\(name).\(side)")
                #expect((row?[side]?["p50Ms"]?.doubleValue ?? 0) > 0, "\(name).\(side).p50Ms")
            }
            let ratios = row?["p50Ratios"]?.arrayValue?.compactMap(\.doubleValue) ?? []
            #expect(ratios.count == 5 && ratios.allSatisfy { $0 > 0 }, "\(name).p50Ratios")
            #expect(
                ratios.count == 5 && ratios.sorted()[2] == row?["p50Ratio"]?.doubleValue, "\(name): the median pair")
        }
    }
}
