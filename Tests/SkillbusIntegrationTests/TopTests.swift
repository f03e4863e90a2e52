import Foundation
import Skillbus
import Testing

/// `skillbus top` against a real cluster: `--once` after known traffic and with sessions, its bad input, and the
/// live view in a pseudo-terminal (keys, a resize, Ctrl-C and the terminal put back).
@Suite("skillbus top", .serialized, .timeLimit(.minutes(2)))
struct TopTests {
    /// The columns of the row that starts with `name` in a `--once` frame, split at spaces.
    static func row(_ name: String, in output: [String]) -> [String]? {
        output.first { $0.hasPrefix(name + " ") }?.split(separator: " ").map(String.init)
    }

    @Test("--once names the agents and the skills with the bus's counts, and the feed's rates and latencies")
    func once() async throws {
        let cluster = try await TestCluster()
        defer { cluster.terminate() }
        try await cluster.startWorker("alpha", ["--skills", "echo,math.eval", "--capacity", "3"])
        try await cluster.startWorker("beta", ["--skills", "text.stats"])
        for text in ["a", "b", "c"] { #expect(try await cluster.send(["echo", "text=\(text)"]).code == 0) }
        #expect(try await cluster.send(["math.eval", "expression=1/"]).code == 2)

        let (code, output) = try await runSkillbus([
            "top", "--once", "--window", "0", "--width", "140", "--coordinator", cluster.bus, "--feed", cluster.feed,
        ])
        #expect(code == 0, "\(output)")
        // AGENT STATE LOAD REQ/S P50 P99 OK ERR SESS SKILLS: three echoes and a failed math.eval, all on alpha.
        let alpha = try #require(Self.row("alpha", in: output), "\(output)")
        #expect(alpha[1] == "idle" && alpha[2] == "0/3")
        #expect(alpha[6] == "3" && alpha[7] == "1")
        #expect(alpha.last == "echo,math.eval")
        let beta = try #require(Self.row("beta", in: output))
        #expect(beta[6] == "0" && beta[7] == "0" && beta.last == "text.stats")
        // SKILL PROVIDERS REQ/S P50 P99 OK ERR QUEUE
        let echo = try #require(Self.row("echo", in: output))
        #expect(echo[1] == "1" && echo[5] == "3" && echo[6] == "0" && echo[7] == "0")
        let math = try #require(Self.row("math.eval", in: output))
        #expect(math[5] == "0" && math[6] == "1")
        #expect(output.contains { $0.hasPrefix("bus:") && $0.contains("2 agent(s), 3 skill(s)") })
        #expect(output.allSatisfy { $0.count <= 140 })

        // Traffic while it watches shows as a rate and a latency (the window leaves the two sends time to end
        // on a loaded machine: the counts come from the listing at its end).
        let watcher = try SkillbusProcess(
            ["top", "--once", "--window", "8", "--coordinator", cluster.bus, "--feed", cluster.feed], name: "top")
        try await watcher.waitForLine("watching") { $0.hasPrefix("watching ") }
        for _ in 0..<2 { #expect(try await cluster.send(["echo", "text=x"]).code == 0) }
        #expect(try await watcher.waitForExit() == 0)
        await watcher.waitForOutputEnd()
        let watched = try #require(Self.row("echo", in: watcher.output))
        #expect(watched[5] == "5")
        #expect(Double(watched[2]) ?? 0 > 0, "\(watched)")
        #expect(watched[3] != "-" && watched[3].hasSuffix("ms"), "\(watched)")
        #expect(watcher.output.contains { $0.hasPrefix("bus:") && !$0.hasPrefix("bus: 0.0 req/s") })
    }

    @Test("--once lists the sessions that turns ran in while it watched, with each agent's state and the calls")
    func sessions() async throws {
        let cluster = try await TestCluster()
        defer { cluster.terminate() }
        for name in ["a", "b"] { try await cluster.startSayingWorker(name) }
        let watcher = try SkillbusProcess(
            ["top", "--once", "--window", "8", "--width", "140", "--coordinator", cluster.bus, "--feed", cluster.feed],
            name: "top")
        try await watcher.waitForLine("watching") { $0.hasPrefix("watching ") }
        #expect(try await cluster.say("hello", agent: "a", session: "s1"))
        #expect(try await cluster.say("world", agent: "b", session: "s1"))
        #expect(try await watcher.waitForExit() == 0)
        await watcher.waitForOutputEnd()
        // SESSION AGE QUIET CALLS AGENTS
        let row = try #require(Self.row("s1", in: watcher.output), "\(watcher.output)")
        #expect(row[3] == "2", "\(row)")
        #expect(row.dropFirst(4).joined(separator: " ") == "a: completed, b: completed", "\(row)")
        #expect(watcher.output.contains { $0.hasPrefix("SESSION ") })
    }

    @Test(
        "bad input is refused with the reason",
        arguments: [
            (["--window", "1"], 2, "go with '--once'"),
            (["--once", "--width", "5"], 2, "--width"),
            (["--once", "--window", "soon"], 2, "--window"),
            ([], 2, "needs a terminal"),
            (["--once", "--coordinator", "tcp://127.0.0.1:1", "--timeout", "0.3"], 3, "unreachable"),
        ])
    func badInput(arguments: [String], code: Int32, reason: String) async throws {
        let (exit, output) = try await runSkillbus(["top"] + arguments)
        #expect(exit == code, "\(output)")
        #expect(output.contains { $0.contains(reason) }, "\(output)")
    }

    @Test("the live view sorts, filters, follows a resize and puts the terminal back on Ctrl-C")
    func liveView() async throws {
        let cluster = try await TestCluster()
        defer { cluster.terminate() }
        try await cluster.startWorker("alpha", ["--skills", "echo"])
        let script = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent("interop/top_pty.py").path
        let driver = try SkillbusProcess(
            ["-u", script, skillbusBinary, cluster.bus, cluster.feed], name: "top in a pty", executable: "/usr/bin/env",
            prefix: ["python3"])
        #expect(try await driver.waitForExit(timeout: .seconds(60)) == 0)
        await driver.waitForOutputEnd()
        #expect(driver.output.last == "ok", "\(driver.output)")
    }
}
