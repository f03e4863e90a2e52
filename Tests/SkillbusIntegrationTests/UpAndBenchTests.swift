import Foundation
import Skillbus
import Testing

@Suite("skillbus up, bench and configs, as a user runs them", .serialized, .timeLimit(.minutes(3)))
struct UpAndBenchTests {
    func writeFile(_ text: String) throws -> String {
        let path = NSTemporaryDirectory() + "skillbus-up-\(UUID().uuidString).json"
        try Data(text.utf8).write(to: URL(fileURLWithPath: path))
        return path
    }

    @Test("up starts the cluster, restarts a crashed worker, and stops everything on SIGTERM")
    func upSupervises() async throws {
        let config = try writeFile(
            """
            {"version": 1,
             "coordinator": {"bus": "tcp://127.0.0.1:*", "feed": "tcp://127.0.0.1:*", "heartbeatMs": 200},
             "workers": [{"name": "alpha", "skills": ["echo"], "heartbeatMs": 200},
                         {"name": "beta", "skills": ["math.eval"], "heartbeatMs": 200}]}
            """)
        defer { try? FileManager.default.removeItem(atPath: config) }
        let up = try SkillbusProcess(["up", "--config", config], name: "up")
        defer { up.signal(SIGKILL) }
        let banner = try await up.waitForLine("the banner") { $0.hasPrefix("skillbus up: coordinator on ") }
        let bus = String(banner.dropFirst("skillbus up: coordinator on ".count).prefix { $0 != " " })
        for name in ["alpha", "beta"] {
            try await up.waitForLine("\(name) to join") {
                $0.hasPrefix("[coordinator]") && $0.contains("agent '\(name)' joined")
            }
        }
        let (code, output) = try await runSkillbus([
            "send", "math.eval", "expression=6*7", "--coordinator", bus, "--json",
        ])
        #expect(code == 0)
        #expect(try JSONValue(parsing: output.first { $0.hasPrefix("{") } ?? "")["result"]?["json"]?["value"] == 42)

        // kill -9 a worker: up says so, starts it again, and it rejoins.
        let started = try await up.waitForLine("alpha's pid") { $0.hasPrefix("[alpha] started (pid ") }
        let pid = Int32(started.split(separator: " ").last!.dropLast())!
        kill(pid, SIGKILL)
        try await up.waitForLine("the crash report") { $0.hasPrefix("[alpha] killed by signal 9; restarting") }
        try await waitUntil("alpha to rejoin", timeout: .seconds(30)) {
            up.output.filter { $0.hasPrefix("[coordinator]") && $0.contains("agent 'alpha' joined") }.count >= 2
        }
        let (again, said) = try await runSkillbus(["send", "echo", "text=back", "--coordinator", bus])
        #expect(again == 0, "\(said)")

        // SIGTERM: every child stops, then up itself, cleanly.
        let children = up.output.compactMap { line -> Int32? in
            guard line.contains("] started (pid ") else { return nil }
            return Int32(line.split(separator: " ").last!.dropLast())
        }
        up.signal(SIGTERM)
        #expect(try await up.waitForExit(timeout: .seconds(30)) == 0)
        #expect(up.output.contains("skillbus up: stopped"))
        for child in children { #expect(kill(child, 0) != 0, "child \(child) still running") }
    }

    @Test("a memory value set in a session through up is read back after Ctrl-C and a second up, from the same agent")
    func upRemembers() async throws {
        let state = NSTemporaryDirectory() + "skillbus-up-state-\(UUID().uuidString.prefix(8))"
        defer { try? FileManager.default.removeItem(atPath: state) }
        let config = try writeFile(
            """
            {"version": 1,
             "coordinator": {"bus": "tcp://127.0.0.1:*", "feed": "tcp://127.0.0.1:*", "heartbeatMs": 200},
             "workers": [{"name": "alpha", "skills": ["echo", "memory.set", "memory.get"], "heartbeatMs": 200}]}
            """)
        defer { try? FileManager.default.removeItem(atPath: config) }
        /// Starts up with the shared state folder; returns it and its bus once alpha has joined.
        func startUp() async throws -> (SkillbusProcess, String) {
            let up = try SkillbusProcess(["up", "--config", config], name: "up", environment: ["XDG_STATE_HOME": state])
            let banner = try await up.waitForLine("the banner") { $0.hasPrefix("skillbus up: coordinator on ") }
            let bus = String(banner.dropFirst("skillbus up: coordinator on ".count).prefix { $0 != " " })
            try await up.waitForLine("alpha to join") { $0.hasPrefix("[coordinator]") && $0.contains("agent 'alpha' joined") }
            return (up, bus)
        }
        let (first, bus) = try await startUp()
        defer { first.signal(SIGKILL) }
        #expect(first.output.contains("skillbus up: agents keep their context under \(state)/skillbus/agents"))
        // The journal beside the agents' folder, not in it as if it were an agent's.
        #expect(first.output.contains("skillbus up: the coordinator journals rounds in \(state)/skillbus/coordinator"))
        let agentFolders = try FileManager.default.contentsOfDirectory(atPath: state + "/skillbus/agents")
        #expect(agentFolders == ["alpha"], "\(agentFolders)")
        let (setCode, _) = try await runSkillbus(
            ["send", "memory.set", "key=colour", "value=blue", "--session", "s1", "--coordinator", bus])
        #expect(setCode == 0)
        first.signal(SIGINT)  // Ctrl-C
        #expect(try await first.waitForExit(timeout: .seconds(30)) == 0)

        let (second, secondBus) = try await startUp()
        defer { second.signal(SIGKILL) }
        // The new bus read s1's agent back from its journal before anyone used s1 again.
        let (earlyCode, early) = try await runSkillbus(["history", "s1", "--coordinator", secondBus])
        #expect(earlyCode == 0 && early.contains { $0.contains("session s1 on alpha: 2 message(s)") })
        let (code, output) = try await runSkillbus(
            ["send", "memory.get", "key=colour", "--session", "s1", "--coordinator", secondBus, "--json"])
        let document = try JSONValue(parsing: output.first { $0.hasPrefix("{") } ?? "")
        #expect(code == 0 && document["agent"] == "alpha" && document["result"]?["json"]?["value"] == "blue")
        let (historyCode, history) = try await runSkillbus(["history", "s1", "--coordinator", secondBus])
        #expect(historyCode == 0 && history.contains { $0.contains("session s1 on alpha: 4 message(s)") })
        second.signal(SIGTERM)
        #expect(try await second.waitForExit(timeout: .seconds(30)) == 0)
    }

    @Test("up reloads its config on SIGHUP: changed skills, new and removed workers; a broken config changes nothing")
    func upReloads() async throws {
        func config(_ workers: String) -> String {
            """
            {"version": 1,
             "coordinator": {"bus": "tcp://127.0.0.1:*", "feed": "tcp://127.0.0.1:*", "heartbeatMs": 200},
             "workers": [\(workers)]}
            """
        }
        let path = try writeFile(
            config(#"{"name": "alpha", "skills": ["echo"]}, {"name": "beta", "skills": ["math.eval"]}"#))
        defer { try? FileManager.default.removeItem(atPath: path) }
        let up = try SkillbusProcess(["up", "--config", path], name: "up")
        defer { up.signal(SIGKILL) }
        let banner = try await up.waitForLine("the banner") { $0.hasPrefix("skillbus up: coordinator on ") }
        let bus = String(banner.dropFirst("skillbus up: coordinator on ".count).prefix { $0 != " " })
        let feed = String(banner.split(separator: "(feed ").last!.prefix { $0 != ")" })
        for name in ["alpha", "beta"] {
            try await up.waitForLine("\(name) to join") { $0.contains("agent '\(name)' joined") }
        }
        @Sendable func registry() async throws -> [String: [String]] {
            let (_, output) = try await runSkillbus(["skills", "--json", "--coordinator", bus, "--feed", feed])
            let document = try JSONValue(parsing: output.first { $0.hasPrefix("{") } ?? "{}")
            var agents: [String: [String]] = [:]
            for entry in document["agents"]?.arrayValue ?? [] {
                agents[entry["agent"]?.stringValue ?? ""] =
                    entry["skills"]?.arrayValue?.compactMap { $0["identifier"]?.stringValue } ?? []
            }
            return agents
        }

        try Data("{ not json".utf8).write(to: URL(fileURLWithPath: path))
        up.signal(SIGHUP)
        try await up.waitForLine("the refusal") { $0.contains("not reloaded, nothing changed") }
        #expect(try await registry() == ["alpha": ["echo"], "beta": ["math.eval"]])

        try Data(
            config(#"{"name": "alpha", "skills": ["echo", "text.stats"]}, {"name": "gamma", "skills": ["sleep"]}"#)
                .utf8
        ).write(to: URL(fileURLWithPath: path))
        up.signal(SIGHUP)
        try await waitUntil("the reloaded cluster") {
            try await registry() == ["alpha": ["echo", "text.stats"], "gamma": ["sleep"]]
        }
        up.signal(SIGTERM)
        #expect(try await up.waitForExit(timeout: .seconds(30)) == 0)
    }

    @Test("up fails fast, and says why, when the coordinator cannot bind")
    func upWithBusyPort() async throws {
        let holder = try await TestCluster()
        defer { holder.terminate() }
        let config = try writeFile(
            #"{"version": 1, "coordinator": {"bus": "\#(holder.bus)", "feed": "tcp://127.0.0.1:*"}, "workers": []}"#)
        defer { try? FileManager.default.removeItem(atPath: config) }
        let (code, output) = try await runSkillbus(["up", "--config", config], timeout: .seconds(10))
        #expect(code == 1)
        #expect(output.contains { $0.contains("Address already in use") })
    }

    @Test("broken configs are refused with the key's path and exit code 2")
    func brokenConfigs() async throws {
        let config = try writeFile(#"{"version": 1, "workers": [{"name": "a", "capacity": "many"}]}"#)
        defer { try? FileManager.default.removeItem(atPath: config) }
        let (code, output) = try await runSkillbus(["up", "--config", config])
        #expect(code == 2)
        #expect(output.contains { $0.contains("workers[0].capacity") })
        let coordinatorConfig = try writeFile(#"{"version": 1, "bus": "tcp://127.0.0.1"}"#)
        defer { try? FileManager.default.removeItem(atPath: coordinatorConfig) }
        let (coordinatorCode, coordinatorOutput) = try await runSkillbus(["coordinator", "--config", coordinatorConfig])
        #expect(coordinatorCode == 2)
        #expect(coordinatorOutput.contains { $0.contains("bus: 'tcp://127.0.0.1' has no port") })
        let (flagCode, flagOutput) = try await runSkillbus(["worker", "--name", "x", "--capacity", "zero"])
        #expect(flagCode == 2)
        #expect(flagOutput.contains { $0.contains("--capacity") })
    }

    /// Every key `skillbus-perf --json` prints, per object.
    static func expectBenchDocument(
        _ document: JSONValue, requests: Int, registrySkills: Int, killRuns: Int, rememberedRounds: Int
    ) {
        for key in ["workers", "payloadBytes", "requests", "workerCapacity", "libzmq"] {
            #expect(document[key] != nil, "\(key)")
        }
        #expect(document["requests"]?.intValue == requests)
        for side in ["skillbus", "baseline"] {
            for level in ["inFlight1", "inFlight64"] {
                let figures = document[side]?[level]
                for key in ["tasksPerSecond", "p50Ms", "p99Ms", "maxMs"] {
                    #expect((figures?[key]?.doubleValue ?? 0) > 0, "\(side).\(level).\(key)")
                }
                #expect(figures?["failed"] == 0)
                // Five alternating pairs, each side of each at most 1,000 requests at 1 in flight.
                let perPair = level == "inFlight1" ? min(requests, 1000) : requests
                #expect(figures?["completed"]?.intValue == 5 * perPair, "\(side).\(level).completed")
            }
        }
        for level in ["inFlight1", "inFlight64"] {
            for key in ["throughputRatio", "p50LatencyRatio", "p99LatencyRatio"] {
                #expect(document["ratios"]?[level]?[key]?.doubleValue != nil, "ratios.\(level).\(key)")
            }
            for key in ["throughputRatios", "p50LatencyRatios"] {
                #expect(document["ratios"]?[level]?[key]?.arrayValue?.count == 5, "ratios.\(level).\(key)")
            }
        }
        let deduplication = document["deduplication"]
        #expect(deduplication?["throughputRatios"]?.arrayValue?.count == 7)
        #expect(deduplication?["throughputRatio"]?.doubleValue != nil)
        for figure in ["with", "without"] { #expect(deduplication?[figure]?["failed"] == 0, "\(figure)") }
        for figure in ["coordinatorCpuMicrosPerRequest", "coordinatorResidentMB"] {
            for side in ["with", "without"] {
                #expect(deduplication?[figure]?[side]?.doubleValue != nil, "\(figure).\(side)")
            }
        }
        let retries = document["retries"]
        #expect(retries?["throughputRatios"]?.arrayValue?.count == 5 && retries?["throughputRatio"]?.doubleValue != nil)
        for side in ["armed", "plain"] {
            #expect(retries?[side]?["failed"] == 0, "retries.\(side)")
            #expect(retries?["coordinatorCpuMicrosPerRequest"]?[side]?.doubleValue != nil, "retries cpu \(side)")
        }
        let priorityCache = document["priorityCache"]
        for key in ["priorityThroughputRatios", "cacheThroughputRatios"] {
            #expect(priorityCache?[key]?.arrayValue?.count == 5, "priorityCache.\(key)")
        }
        for side in ["prioritizedRounds", "plainRounds", "cacheArmedMiss", "plainEcho"] {
            #expect(priorityCache?[side]?["failed"] == 0, "priorityCache.\(side)")
        }
        #expect((priorityCache?["cacheEntries"]?.intValue ?? 0) > 0, "priorityCache.cacheEntries")
        for side in ["cacheArmed", "plain"] {
            #expect(
                (priorityCache?["coordinatorCpuMicrosPerRequest"]?[side]?.doubleValue ?? 0) > 0, "cache cpu \(side)")
        }
        let context = document["context"]
        for series in ["echo", "echoInSession", "memorySetGet"] {
            for level in ["inFlight1", "inFlight16"] {
                #expect(context?[series]?[level]?["failed"] == 0, "context.\(series).\(level)")
                #expect((context?[series]?[level]?["p50Ms"]?.doubleValue ?? 0) > 0, "context.\(series).\(level)")
            }
        }
        for key in ["sendEcho", "turnWithOneCall"] {
            #expect(document["turns"]?[key]?["failed"] == 0 && (document["turns"]?[key]?["p50Ms"]?.doubleValue ?? 0) > 0, "turns.\(key)")
        }
        UserBenchTests.expectTurnRows(document["turns"], samples: min(requests, 300))
        #expect(document["turns"]?["targets"]?["delegatedAskVsTwoAsks"]?.doubleValue == 1.2)
        for level in ["inFlight1", "inFlight64"] {
            let figures = document["output"]?[level]
            for key in ["echo", "textLines3Parts"] {
                #expect(figures?[key]?["failed"] == 0 && (figures?[key]?["tasksPerSecond"]?.doubleValue ?? 0) > 0, "output.\(level).\(key)")
            }
            #expect(figures?["throughputRatio"]?.doubleValue != nil, "output.\(level).throughputRatio")
        }
        let store = context?["store"]
        #expect(store?["openMs"]?["runs"]?.arrayValue?.count == 3 && store?["history1000Ms"]?["median"] != nil)
        #expect((store?["workerResidentMB"]?.doubleValue ?? 0) > 0 && (store?["emptyWorkerResidentMB"]?.doubleValue ?? 0) > 0)
        let rounds = document["rounds"]
        for key in ["singleInvocation", "fanout", "plan20Steps10Duplicates"] {
            #expect(rounds?[key]?["failed"] == 0, "rounds.\(key)")
        }
        for key in ["fanoutAgents", "fanoutInvocationsVsSingleRatio", "planVsSingleP50Ratio"] {
            #expect(rounds?[key] != nil, "rounds.\(key)")
        }
        let registry = document["registry"]
        #expect(registry?["skills"]?.intValue == registrySkills)
        for key in ["agents", "rawSnapshotMs", "newReplicaVsRawRatio", "killVsLivenessBoundRatio"] {
            #expect(registry?[key] != nil, "registry.\(key)")
        }
        #expect(registry?["killToReplicaMs"]?["runs"]?.arrayValue?.count == killRuns)
        for key in ["routing10Skills", "routingLargeRegistry"] {
            #expect((registry?[key]?["tasksPerSecond"]?.doubleValue ?? 0) > 0, "\(key)")
            #expect(registry?[key]?["failed"] == 0)
        }
        #expect(registry?["routingLargeVsSmallRatio"] != nil)
        for level in ["inFlight1", "inFlight64"] {
            let curve = document["curve"]?[level]
            for side in ["plain", "curve"] {
                #expect(curve?[side]?["failed"] == 0 && (curve?[side]?["p50Ms"]?.doubleValue ?? 0) > 0, "curve.\(level).\(side)")
            }
            #expect((curve?["throughputRatio"]?.doubleValue ?? 0) > 0 && (curve?["p50LatencyRatio"]?.doubleValue ?? 0) > 0)
            #expect(curve?["throughputRatios"]?.arrayValue?.count == 3, "curve.\(level)")
        }
        // Issue 14's rows: each a positive figure with its target and whether it is met.
        let speed = document["speed"]
        for key in [
            "echo64ThroughputRatio", "coordinatorCpuMicrosPerRequest64", "fanoutCpuPerInvocationVsRequestRatio",
            "p50At1Ratio",
        ] {
            #expect((speed?[key]?["value"]?.doubleValue ?? 0) > 0, "speed.\(key).value")
            #expect((speed?[key]?["target"]?.doubleValue ?? 0) > 0, "speed.\(key).target")
            #expect(speed?[key]?["met"]?.boolValue != nil, "speed.\(key).met")
        }
        let cpu = speed?["coordinatorCpuMicrosPerRequest64"]
        #expect((cpu?["proxyCpuMicrosPerRequest"]?.doubleValue ?? 0) > 0 && (cpu?["vsProxyRatio"]?.doubleValue ?? 0) > 0)
        let fanout = speed?["fanoutCpuPerInvocationVsRequestRatio"]
        // The figure is the median of five pairs, each of which is listed.
        let pairRatios = fanout?["pairRatios"]?.arrayValue?.compactMap(\.doubleValue) ?? []
        #expect(pairRatios.count == 5 && pairRatios.allSatisfy { $0 > 0 }, "speed fan-out pairRatios")
        #expect(pairRatios.count == 5 && pairRatios.sorted()[2] == fanout?["value"]?.doubleValue, "the median pair")
        for key in ["fanoutCpuMicrosPerInvocation", "requestCpuMicros"] {
            #expect((fanout?[key]?.doubleValue ?? 0) > 0, "speed fan-out \(key)")
        }
        let memory = speed?["coordinatorResidentMB"]
        for figure in ["idle", "remembered"] {
            #expect((memory?[figure]?["value"]?.doubleValue ?? 0) > 0, "speed memory \(figure)")
            #expect(memory?[figure]?["met"]?.boolValue != nil, "speed memory \(figure).met")
        }
        #expect(memory?["rememberedRounds"]?.intValue == rememberedRounds)
        #expect((memory?["distinctTextsMB"]?.doubleValue ?? 0) > 0, "speed memory distinctTextsMB")
    }

    /// `skillbus-perf` with its options, on the `skillbus` under test.
    func runPerf(_ arguments: [String]) async throws -> (code: Int32, output: [String]) {
        try await runSkillbus(
            ["--skillbus", skillbusBinary] + arguments, timeout: .seconds(120), executable: skillbusPerfBinary)
    }

    @Test("perf smoke: the smallest sizes the options allow run both sides and print every key")
    func benchSmoke() async throws {
        let (code, output) = try await runPerf(
            [
                "--workers", "1", "--requests", "10", "--registry-agents", "1", "--skills-per-agent", "1",
                "--snapshot-runs", "1", "--kill-runs", "0", "--store-sessions", "2", "--store-messages", "1",
                "--remembered-rounds", "50", "--json",
            ])
        #expect(code == 0, "\(output.suffix(20))")
        let document = try JSONValue(parsing: output.first { $0.hasPrefix("{") } ?? "")
        Self.expectBenchDocument(document, requests: 10, registrySkills: 1, killRuns: 0, rememberedRounds: 50)
        #expect(document["registry"]?["newReplicaMs"]?["runs"]?.arrayValue?.count == 1)
    }

    /// The full figures take about ten seconds (a kill -9 waits out three missed heartbeats): `make bench-test`.
    @Test(
        "skillbus-perf runs both sides and prints every figure as JSON (SKILLBUS_BENCH_TESTS=1)",
        .enabled(if: ProcessInfo.processInfo.environment["SKILLBUS_BENCH_TESTS"] == "1"))
    func benchReports() async throws {
        let (code, output) = try await runPerf(
            [
                "--workers", "1", "--requests", "200", "--registry-agents", "5", "--skills-per-agent", "20",
                "--snapshot-runs", "2", "--kill-runs", "1", "--store-sessions", "20", "--store-messages", "50",
                "--remembered-rounds", "1000", "--json",
            ])
        #expect(code == 0)
        let document = try JSONValue(parsing: output.first { $0.hasPrefix("{") } ?? "")
        Self.expectBenchDocument(document, requests: 200, registrySkills: 100, killRuns: 1, rememberedRounds: 1000)
        #expect((document["ratios"]?["inFlight64"]?["throughputRatio"]?.doubleValue ?? 0) > 0)
        for figure in ["coordinatorCpuMicrosPerRequest", "coordinatorResidentMB"] {
            for side in ["with", "without"] {
                #expect((document["deduplication"]?[figure]?[side]?.doubleValue ?? 0) > 0, "\(figure).\(side)")
            }
        }
        let registry = document["registry"]
        #expect(registry?["newReplicaMs"]?["runs"]?.arrayValue?.count == 2)
        // A figure was measured; that death is noticed only after three missed heartbeats is tested
        // without clocks in CoordinatorStateTests ("a silent worker is dead after 3 of its intervals").
        #expect((registry?["killToReplicaMs"]?["median"]?.doubleValue ?? 0) > 0)
    }
}
