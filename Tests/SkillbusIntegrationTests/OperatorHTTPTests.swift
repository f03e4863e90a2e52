import Foundation
import Skillbus
import SkillbusTestSupport
import SkillbusZMQ
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// Raw TCP to the operator endpoint. The blocking socket calls run on a Dispatch thread, never on the pool.
enum HTTPProbe {
    /// Sends `request` and reads until the server closes the connection (or 10 s pass).
    static func exchange(_ port: UInt16, _ request: [UInt8]) async -> String {
        await withCheckedContinuation { continuation in
            DispatchQueue.global().async {
                guard let fd = connect(port) else { return continuation.resume(returning: "") }
                defer { close(fd) }
                _ = request.withUnsafeBytes { send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
                var answer: [UInt8] = []
                var buffer = [UInt8](repeating: 0, count: 65536)
                while true {
                    let count = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
                    guard count > 0 else { break }
                    answer += buffer[..<count]
                }
                continuation.resume(returning: String(decoding: answer, as: UTF8.self))
            }
        }
    }

    static func get(_ port: UInt16, _ path: String) async -> String {
        await exchange(port, Array("GET \(path) HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".utf8))
    }

    /// The status code of a response's first line, or 0.
    static func status(_ response: String) -> Int {
        Int(response.split(separator: " ", maxSplits: 2).dropFirst().first ?? "") ?? 0
    }

    /// A blocking connection to 127.0.0.1:`port` that gives up reading after 10 s.
    static func connect(_ port: UInt16) -> Int32? { LoopbackTCP.connect(port, receiveTimeoutSeconds: 10) }
}

/// A client that connects, sends `bytes` and then never reads again, until the test closes it.
final class StalledClient: Sendable {
    let fd: Int32

    init(_ port: UInt16, sending bytes: String) throws {
        guard let fd = HTTPProbe.connect(port) else { throw TimedOut(what: "a connection to port \(port)") }
        // A small receive buffer, so that whatever the server streams to it backs up quickly.
        var size: Int32 = 4096
        setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &size, socklen_t(MemoryLayout<Int32>.size))
        _ = Array(bytes.utf8).withUnsafeBytes { send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
        self.fd = fd
    }

    func close() { _ = Glibc.close(fd) }
}

/// A cluster whose coordinator serves the operator endpoint on an ephemeral port.
struct OperatorCluster {
    let cluster: TestCluster
    let port: UInt16

    init() async throws {
        cluster = try await TestCluster(coordinatorArguments: ["--http", "127.0.0.1:0"])
        let ready = try await cluster.coordinator.waitForLine("ready line") { $0.contains(" ready: ") }
        let address = ready.split(separator: " ").first { $0.hasPrefix("http=") }?.split(separator: ":").last
        port = try #require(address.flatMap { UInt16($0) }, "no http=HOST:PORT in '\(ready)'")
    }
}

/// Runs a script of Tests/interop with python3; its lines can be awaited.
func interopScript(_ name: String, _ arguments: [String]) throws -> SkillbusProcess {
    let script = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("interop/\(name)").path
    return try SkillbusProcess(["-u", script] + arguments, name: name, executable: "/usr/bin/env", prefix: ["python3"])
}

/// The metrics as prometheus_client's parser reads them: `sample(name, labels)` is the value of one sample.
struct ParsedMetrics {
    let document: JSONValue

    static func fetch(_ port: UInt16) async throws -> ParsedMetrics {
        let dump = try interopScript("metrics_dump.py", ["http://127.0.0.1:\(port)/metrics"])
        let code = try await dump.waitForExit(timeout: .seconds(30))
        await dump.waitForOutputEnd()
        guard code == 0, let line = dump.output.first(where: { $0.hasPrefix("{") }) else {
            throw TimedOut(what: "metrics_dump.py (exit \(code)): \(dump.output.joined(separator: " | "))")
        }
        return ParsedMetrics(document: try JSONValue(parsing: line))
    }

    var families: [JSONValue] { document["families"]?.arrayValue ?? [] }

    func type(of family: String) -> String? {
        families.first { $0["name"]?.stringValue == family }?["type"]?.stringValue
    }

    func sample(_ name: String, _ labels: [String: String] = [:]) -> Double? {
        for family in families {
            for sample in family["samples"]?.arrayValue ?? [] where sample["name"]?.stringValue == name {
                let have = (sample["labels"]?.objectValue ?? [:]).compactMapValues(\.stringValue)
                if have == labels { return sample["value"]?.doubleValue }
            }
        }
        return nil
    }
}

@Suite("The operator HTTP endpoint: metrics, dashboard, bad and stalled clients", .serialized, .timeLimit(.minutes(3)))
struct OperatorHTTPTests {
    @Test("after known traffic, /metrics parsed by prometheus_client says exactly what happened")
    func metricsAfterKnownTraffic() async throws {
        let setup = try await OperatorCluster()
        let cluster = setup.cluster
        defer { cluster.terminate() }
        try await cluster.startWorker("alpha", ["--skills", "echo,sleep"])
        for index in 0..<5 {
            #expect(try await cluster.send(["echo", "text=hello \(index)"]).code == 0)
        }
        // A plan whose second step is identical to the first: one execution, one deduplication.
        let plan = NSTemporaryDirectory() + "skillbus-metrics-plan-\(UUID().uuidString).json"
        let step = #"{"skill":"echo","params":{"text":"twice"}}"#
        try Data(#"{"steps":[\#(step.dropLast()),"id":"a"},\#(step.dropLast()),"id":"b"}]}"#.utf8)
            .write(to: URL(fileURLWithPath: plan))
        defer { try? FileManager.default.removeItem(atPath: plan) }
        #expect(try await cluster.send(["--plan", plan]).code == 0)
        // Three REQUESTs in rounds of their own, then two identical ones in one round: the second takes the
        // first one's outcome (a deduplication, not a REQUEST that ran).
        let context = try ZMQContext()
        let client = try await SkillbusClient.connect(endpoint: cluster.bus, context: context)
        for index in 0..<3 {
            #expect(try await client.invoke("echo", parameters: ["text": .string("r\(index)")]).status == .ok)
        }
        for _ in 0..<2 {
            let outcome = try await client.invoke("echo", parameters: ["text": "same"], roundID: "metrics-requests")
            #expect(outcome.status == .ok)
        }
        client.close()
        // A message in no protocol the bus speaks.
        let raw = try RawPeer(cluster.bus, context: context)
        _ = try await raw.exchange([Array("NOPE1".utf8), Array("HELLO".utf8)])
        raw.close()

        // The snapshot is at most one tick (100 ms) old: wait for the last of the traffic to show.
        var metrics = try await ParsedMetrics.fetch(setup.port)
        let deadline = ContinuousClock.now + .seconds(20)
        while metrics.sample("skillbus_refusals_total", ["reason": "unsupported_protocol"]) != 1 {
            try #require(ContinuousClock.now < deadline, "the refusal never showed in /metrics")
            try await Task.sleep(for: .milliseconds(50))
            metrics = try await ParsedMetrics.fetch(setup.port)
        }
        #expect(metrics.document["contentType"]?.stringValue?.hasPrefix("text/plain; version=0.0.4") == true)
        #expect(metrics.sample("skillbus_round_invocations_total", ["skill": "echo", "status": "ok"]) == 7)
        #expect(metrics.sample("skillbus_rounds_total", ["status": "ok"]) == 6)
        #expect(metrics.sample("skillbus_requests_total", ["skill": "echo", "status": "ok"]) == 4)
        #expect(metrics.sample("skillbus_executions_total", ["skill": "echo", "agent": "alpha"]) == 10)
        #expect(metrics.sample("skillbus_deduplications_total", ["skill": "echo"]) == 2)
        #expect(metrics.sample("skillbus_feed_events_total", ["topic": "round.done"]) == 6)
        // Histograms: cumulative buckets ending in +Inf, equal to the count.
        #expect(metrics.sample("skillbus_request_duration_seconds_count", ["skill": "echo"]) == 4)
        #expect(metrics.sample("skillbus_request_duration_seconds_bucket", ["skill": "echo", "le": "+Inf"]) == 4)
        #expect(metrics.sample("skillbus_round_duration_seconds_count") == 6)
        #expect(metrics.sample("skillbus_round_duration_seconds_bucket", ["le": "+Inf"]) == 6)
        #expect(metrics.sample("skillbus_round_invocation_duration_seconds_count", ["skill": "echo"]) == 6)
        #expect((metrics.sample("skillbus_round_duration_seconds_sum") ?? 0) > 0)
        #expect(metrics.type(of: "skillbus_requests") == "counter")
        #expect(metrics.type(of: "skillbus_request_duration_seconds") == "histogram")
        #expect(metrics.type(of: "skillbus_wait_queue_depth") == "gauge")
        // Agents, their states, the queue and the registry.
        #expect(metrics.sample("skillbus_agents", ["state": "idle"]) == 1)
        #expect(metrics.sample("skillbus_agent_state", ["agent": "alpha", "state": "idle"]) == 1)
        #expect(metrics.sample("skillbus_agent_state", ["agent": "alpha", "state": "executingSkill"]) == 0)
        #expect(metrics.sample("skillbus_agent_capacity", ["agent": "alpha"]) == 4)
        #expect(metrics.sample("skillbus_wait_queue_depth") == 0)
        #expect(metrics.sample("skillbus_registry_agents") == 1)
        #expect(metrics.sample("skillbus_registry_skills") == 2)
        #expect((metrics.sample("skillbus_registry_sequence") ?? 0) >= 1)
        #expect((metrics.sample("skillbus_process_resident_memory_bytes") ?? 0) > 1_000_000)
        // Every family follows the naming rules.
        for family in metrics.families {
            let name = family["name"]?.stringValue ?? ""
            #expect(name.hasPrefix("skillbus_"), "family \(name)")
            let help = family["help"]?.stringValue ?? ""
            #expect(!help.isEmpty, "family \(name) has no HELP")
            if family["type"]?.stringValue == "histogram" { #expect(name.hasSuffix("_seconds"), "family \(name)") }
        }
    }

    @Test("404, 405, malformed, too large and HTTP/2 requests get their HTTP errors, and the server keeps serving")
    func badRequests() async throws {
        let setup = try await OperatorCluster()
        defer { setup.cluster.terminate() }
        let cases: [(String, Int, String)] = [
            ("GET /nope HTTP/1.1\r\n\r\n", 404, "no such page: /nope"),
            ("POST /metrics HTTP/1.1\r\nContent-Length: 0\r\n\r\n", 405, "POST is not allowed on /metrics"),
            ("DELETE / HTTP/1.1\r\n\r\n", 405, "Allow: GET, HEAD"),
            ("GARBAGE\r\n\r\n", 400, "malformed request line 'GARBAGE'"),
            ("GET /metrics HTTP/1.1\r\nno colon here\r\n\r\n", 400, "malformed header field 'no colon here'"),
            ("GET metrics HTTP/1.1\r\n\r\n", 400, "is no absolute path"),
            ("GET /metrics HTTP/2.0\r\n\r\n", 505, "HTTP/2.0 is not supported"),
            ("GET / HTTP/1.1\r\nX-Big: " + String(repeating: "x", count: 20_000) + "\r\n\r\n", 431, "larger than"),
        ]
        for (request, status, words) in cases {
            let answer = await HTTPProbe.exchange(setup.port, Array(request.utf8))
            #expect(HTTPProbe.status(answer) == status, "\(request.prefix(40)): \(answer.prefix(200))")
            #expect(answer.contains(words), "\(request.prefix(40)): \(answer.prefix(300))")
            let metrics = await HTTPProbe.get(setup.port, "/metrics")
            #expect(HTTPProbe.status(metrics) == 200 && metrics.contains("skillbus_wait_queue_depth 0"))
        }
        let head = await HTTPProbe.exchange(setup.port, Array("HEAD /state HTTP/1.1\r\n\r\n".utf8))
        #expect(HTTPProbe.status(head) == 200 && head.hasSuffix("\r\n\r\n"), "HEAD has no body: \(head)")
        let page = await HTTPProbe.get(setup.port, "/")
        #expect(page.contains("Content-Type: text/html") && page.contains("new EventSource(\"/events\")"))
        #expect(!page.contains("http://") && !page.contains("https://"), "the page loads nothing from elsewhere")
    }

    @Test("stalled HTTP clients hold neither the bus nor the other HTTP clients; past 64 connections the answer is 503")
    func stalledClients() async throws {
        let setup = try await OperatorCluster()
        let cluster = setup.cluster
        defer { cluster.terminate() }
        try await cluster.startWorker("alpha", ["--skills", "echo"])
        // Half a request, never finished and never read; and an event stream never read.
        let halfRequest = try StalledClient(setup.port, sending: "GET /metr")
        let unreadStream = try StalledClient(setup.port, sending: "GET /events HTTP/1.1\r\n\r\n")
        defer {
            halfRequest.close()
            unreadStream.close()
        }
        let context = try ZMQContext()
        let client = try await SkillbusClient.connect(endpoint: cluster.bus, context: context)
        defer { client.close() }
        // Echo requests keep being answered, each with its feed events streamed towards the stalled reader.
        for index in 0..<300 {
            let outcome = try await client.invoke("echo", parameters: ["text": .string("n\(index)")], timeout: .seconds(5))
            #expect(outcome.status == .ok)
        }
        let metrics = await HTTPProbe.get(setup.port, "/metrics")
        #expect(HTTPProbe.status(metrics) == 200)
        // Fill every connection slot: the next client is told so at once, and slots come back when clients go.
        var holders: [StalledClient] = []
        for _ in 0..<62 { holders.append(try StalledClient(setup.port, sending: "GET /")) }
        try await waitUntil("a client past the limit to get 503") {
            HTTPProbe.status(await HTTPProbe.get(setup.port, "/state")) == 503
        }
        for holder in holders { holder.close() }
        try await waitUntil("the slots to come back") {
            HTTPProbe.status(await HTTPProbe.get(setup.port, "/state")) == 200
        }
        let outcome = try await client.invoke("echo", parameters: ["text": "still here"], timeout: .seconds(5))
        #expect(outcome.status == .ok)
    }

    @Test("the dashboard in headless Chromium shows the cluster's agents and updates a card while a task runs")
    func dashboardInBrowser() async throws {
        guard FileManager.default.isExecutableFile(atPath: "/usr/bin/chromium") else {
            print("SKIPPED dashboardInBrowser: /usr/bin/chromium is missing (apt-get install -y chromium)")
            return
        }
        let setup = try await OperatorCluster()
        let cluster = setup.cluster
        defer { cluster.terminate() }
        try await cluster.startWorker("alpha", ["--skills", "echo,sleep"])
        try await cluster.startWorker("beta", ["--skills", "echo,sleep"])
        let browser = try interopScript("dashboard_check.py", ["http://127.0.0.1:\(setup.port)/", "alpha,beta", "sleep"])
        defer { browser.signal(SIGTERM) }
        try await browser.waitForLine("both cards", timeout: .seconds(60)) { $0.hasPrefix("cards: ") || $0.hasPrefix("FAILED") }
        #expect(browser.output.contains("cards: alpha,beta"), "\(browser.output)")
        let sending = Task { try await cluster.send(["sleep", "ms:=1500", "--agents", "alpha"]) }
        try await browser.waitForLine("the card in executingSkill") { $0.hasPrefix("executing:") || $0.hasPrefix("FAILED") }
        #expect(browser.output.contains("executing: alpha sleep"), "\(browser.output)")
        #expect(try await sending.value.code == 0)
        try await browser.waitForLine("the round ok") { $0.hasPrefix("round:") || $0.hasPrefix("FAILED") }
        #expect(browser.output.contains("executions: alpha 1"), "\(browser.output)")
        #expect(try await browser.waitForExit(timeout: .seconds(30)) == 0, "\(browser.output)")
    }

    @Test("the dashboard's session view draws both agents of a session as it runs, and again after a reload")
    func sessionViewInBrowser() async throws {
        guard FileManager.default.isExecutableFile(atPath: "/usr/bin/chromium") else {
            print("SKIPPED sessionViewInBrowser: /usr/bin/chromium is missing (apt-get install -y chromium)")
            return
        }
        let setup = try await OperatorCluster()
        let cluster = setup.cluster
        defer { cluster.terminate() }
        for name in ["a", "b"] { try await cluster.startSayingWorker(name) }
        let browser = try interopScript("session_view_check.py", ["http://127.0.0.1:\(setup.port)/", "s1", "a,b"])
        defer { browser.signal(SIGTERM) }
        try await browser.waitForLine("the page to be live", timeout: .seconds(60)) {
            $0 == "ready" || $0.hasPrefix("FAILED")
        }
        #expect(browser.output.contains("ready"), "\(browser.output)")
        #expect(try await cluster.say("hello", agent: "a", session: "s1"))
        #expect(try await cluster.say("world", agent: "b", session: "s1"))
        // Each agent's row: a bar for every state of its turn (PROTOCOL §3.7) and a mark for its call.
        for step in ["live", "history"] {
            let line = try await browser.waitForLine("the \(step) picture", timeout: .seconds(60)) {
                $0.hasPrefix("\(step): ") || $0.hasPrefix("FAILED")
            }
            let picture = try JSONValue(parsing: String(line.drop { $0 != "{" }))
            for agent in ["a", "b"] {
                #expect(
                    picture[agent]?["states"]
                        == ["thinking", "selectingSkill", "executingSkill", "thinking", "streaming", "completed"],
                    "\(line)")
                let calls = picture[agent]?["calls"]?.arrayValue?.compactMap(\.stringValue) ?? []
                #expect(calls.count == 1 && calls[0].hasPrefix("call echo on \(agent): ok, "), "\(line)")
            }
        }
        #expect(try await browser.waitForExit(timeout: .seconds(30)) == 0, "\(browser.output)")
    }

    @Test("without --http there is no endpoint; a non-loopback one needs --insecure; a taken or bad one is named")
    func endpointChecks() async throws {
        let plain = try await TestCluster()
        let ready = try await plain.coordinator.waitForLine("ready line") { $0.contains(" ready: ") }
        #expect(!ready.contains("http="))
        plain.terminate()
        let open = try await runSkillbus(["coordinator", "--bus", "tcp://127.0.0.1:*", "--feed", "tcp://127.0.0.1:*",
            "--http", "0.0.0.0:0"])
        #expect(open.code != 0)
        #expect(open.output.joined().contains("refusing to serve HTTP on 0.0.0.0:0"), "\(open.output)")
        // A port another coordinator holds: the start fails, naming the endpoint and why.
        let holder = try await OperatorCluster()
        defer { holder.cluster.terminate() }
        let taken = try await runSkillbus(["coordinator", "--bus", "tcp://127.0.0.1:*", "--feed", "tcp://127.0.0.1:*",
            "--http", "127.0.0.1:\(holder.port)"])
        #expect(taken.code == 1)
        #expect(taken.output.joined().contains("cannot serve HTTP on 127.0.0.1:\(holder.port): bind failed"), "\(taken.output)")
        let bad = try await runSkillbus(["coordinator", "--http", "127.0.0.1:http"])
        #expect(bad.code == 2)
        #expect(bad.output.joined().contains("option '--http'"), "\(bad.output)")
    }
}
