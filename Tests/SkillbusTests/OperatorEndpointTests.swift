import Foundation
import Testing

@testable import Skillbus

@Suite("The operator endpoint's parts, without sockets")
struct OperatorEndpointTests {
    @Test(
        "request heads are read or refused with the right status",
        arguments: [
            ("GET /metrics?x=1 HTTP/1.1\r\nHost: a\r\nAccept:  text/plain \r\n\r\n", 200, "/metrics"),
            ("\r\nGET / HTTP/1.0\r\n\r\n", 200, "/"),
            ("GET / HTTP/1.1\r\nHost: a\r\n", 0, "incomplete"),
            ("GARBAGE\r\n\r\n", 400, "malformed request line"),
            ("GET  / HTTP/1.1\r\n\r\n", 400, "malformed request line"),
            ("G(T / HTTP/1.1\r\n\r\n", 400, "malformed method"),
            ("GET / HTTX/1.1\r\n\r\n", 400, "malformed HTTP version"),
            ("GET / HTTP/2.0\r\n\r\n", 505, "not supported"),
            ("GET / HTTP/1.1\r\nbad\r\n\r\n", 400, "malformed header field 'bad'"),
            ("GET / HTTP/1.1\r\n: empty name\r\n\r\n", 400, "malformed header field"),
        ])
    func parse(_ request: String, _ status: Int, _ expected: String) {
        switch HTTPRequestHead.parse(Array(request.utf8)) {
        case .incomplete:
            #expect(status == 0)
        case .head(let head):
            #expect(status == 200)
            #expect(head.path == expected)
            #expect(head.method == "GET")
            if head.version == "HTTP/1.1" { #expect(head.headers["host"] == "a") }
            if let accept = head.headers["accept"] { #expect(accept == "text/plain") }
        case .refused(let refusedStatus, let reason):
            #expect(refusedStatus == status)
            #expect(reason.contains(expected), "\(reason)")
        }
    }

    @Test("a head that never ends is refused once it passes the limit, not held whole")
    func oversizedHead() {
        let endless = Array(("GET / HTTP/1.1\r\nX: " + String(repeating: "y", count: HTTPRequestHead.maxBytes)).utf8)
        #expect(HTTPRequestHead.parse(endless) == .refused(status: 431, reason: "request head larger than 16384 bytes"))
    }

    @Test("counters by skill and status, deduplications, executions and refusals come from the events")
    func recording() {
        var metrics = BusMetrics()
        for _ in 0..<5 {
            metrics.record(
                .requestDone(
                    round: "r", request: "q", skill: "echo", agent: "a", status: .ok, durationMicros: 2000, payload: []))
        }
        metrics.record(.requestDeduplicated(round: "r", request: "q2", skill: "echo", finished: true))
        metrics.record(
            .invocationDone(
                round: "r", invocation: "b", skill: "echo", agent: "", status: .ok, durationMicros: 0, deduplicated: true))
        metrics.record(.invocationDispatched(round: "r", invocation: "a", skill: "echo", agent: "alpha", dispatch: "i1"))
        metrics.record(.registrationRefused(agent: "x", error: SkillbusError(.nameTaken, "taken")))
        metrics.record(.securityRefused(socket: "bus", address: "", key: "", reason: "unknown key", refused: 7))
        metrics.refused("malformed_message")
        #expect(metrics.requests[.init("echo", "ok")] == 5)
        #expect(metrics.requestSeconds["echo"]?.count == 5)
        #expect(metrics.requestSeconds["echo"]?.counts[BusMetrics.latencyBuckets.firstIndex(of: 0.0025)!] == 5)
        #expect(metrics.deduplications["echo"] == 2)
        #expect(metrics.invocationSeconds["echo"] == nil, "a deduplicated invocation has no latency of its own")
        #expect(metrics.executions[.init("echo", "alpha")] == 1)
        #expect(metrics.registrationRefusals["name_taken"] == 1)
        #expect(metrics.refusals == ["handshake": 7, "malformed_message": 1])
        #expect(metrics.feedEvents["request.done"] == 5)
    }

    @Test("label values past the series limit are counted under _other")
    func boundedLabels() {
        var metrics = BusMetrics()
        for index in 0..<(BusMetrics.seriesLimit + 5) {
            metrics.record(.requestDeduplicated(round: "r", request: "q", skill: "skill\(index)", finished: true))
        }
        #expect(metrics.deduplications.count == BusMetrics.seriesLimit + 1)
        #expect(metrics.deduplications[BusMetrics.overflowLabel] == 5)
    }

    @Test("the exposition has HELP and TYPE, escaped labels, and cumulative buckets ending in +Inf")
    func exposition() {
        var snapshot = BusSnapshot()
        snapshot.metrics.record(
            .requestDone(
                round: "r", request: "q", skill: "say \"hi\"\n", agent: "a", status: .error, durationMicros: 700,
                payload: []))
        snapshot.metrics.record(
            .requestDone(
                round: "r", request: "q", skill: "say \"hi\"\n", agent: "a", status: .error, durationMicros: 90_000_000,
                payload: []))
        snapshot.agents = [.init(name: "alpha", capacity: 2, inFlight: 1, state: .executingSkill("echo"), skills: ["echo"])]
        let text = MetricsExposition.render(snapshot)
        #expect(text.contains("# HELP skillbus_requests_total REQUESTs answered by their own execution, by skill and status.\n"))
        #expect(text.contains("# TYPE skillbus_requests_total counter\n"))
        #expect(text.contains(#"skillbus_requests_total{skill="say \"hi\"\n",status="error"} 2"#))
        #expect(text.contains(#"skillbus_request_duration_seconds_bucket{skill="say \"hi\"\n",le="0.0005"} 0"#))
        #expect(text.contains(#"skillbus_request_duration_seconds_bucket{skill="say \"hi\"\n",le="0.001"} 1"#))
        #expect(text.contains(#"skillbus_request_duration_seconds_bucket{skill="say \"hi\"\n",le="60"} 1"#))
        #expect(text.contains(#"skillbus_request_duration_seconds_bucket{skill="say \"hi\"\n",le="+Inf"} 2"#))
        #expect(text.contains(#"skillbus_request_duration_seconds_count{skill="say \"hi\"\n"} 2"#))
        #expect(text.contains(#"skillbus_agent_state{agent="alpha",state="executingSkill"} 1"#))
        #expect(text.contains(#"skillbus_agents{state="executingSkill"} 1"#))
        #expect(text.contains(#"skillbus_agent_in_flight{agent="alpha"} 1"#))
    }

    @Test("recent rounds fold a plan with a deduplicated step, and REQUESTs into a round of their own")
    func recentRounds() {
        var rounds = RecentRounds(limit: 2)
        rounds.apply(.roundAccepted(round: "p", shape: "plan", invocations: ["a", "b"]))
        rounds.apply(.invocationDispatched(round: "p", invocation: "a", skill: "echo", agent: "alpha", dispatch: "i1"))
        rounds.apply(.invocationDeduplicated(round: "p", invocation: "b", reusing: "a"))
        rounds.apply(
            .invocationDone(
                round: "p", invocation: "a", skill: "echo", agent: "alpha", status: .ok, durationMicros: 1500,
                deduplicated: false))
        rounds.apply(
            .invocationDone(
                round: "p", invocation: "b", skill: "echo", agent: "", status: .ok, durationMicros: 0, deduplicated: true))
        var summary = RoundDocument.Summary()
        summary.totalMs = 2
        let done = rounds.apply(.roundDone(round: "p", status: .ok, summary: summary))
        #expect(done?.status == "ok")
        #expect(done?.invocations.map(\.status) == ["ok", "ok"])
        #expect(done?.invocations[1].deduplicated == true && done?.invocations[1].reusing == "a")
        #expect(done?.invocations[0].durationMs == 1.5)

        rounds.apply(.requestDispatched(round: "q", request: "1", skill: "echo", agent: "beta", invocation: "i2"))
        #expect(rounds.newestFirst.first?.status == "running")
        let finished = rounds.apply(
            .requestDone(round: "q", request: "1", skill: "echo", agent: "beta", status: .ok, durationMicros: 800, payload: []))
        #expect(finished?.shape == "request" && finished?.status == "ok")
        // Events of rounds the dashboard never saw accepted change nothing.
        #expect(rounds.apply(.invocationDeduplicated(round: "old", invocation: "x", reusing: "")) == nil)
        rounds.apply(.roundAccepted(round: "r", shape: "invoke", invocations: ["echo"]))
        #expect(rounds.newestFirst.map(\.id) == ["r", "q"], "the oldest went first past the limit")
    }

    @Test(
        "HTTP endpoints are HOST:PORT, loopback unless --insecure",
        arguments: [
            ("127.0.0.1:8080", true, ""), ("localhost:0", true, ""), ("0.0.0.0:9100", false, ""),
            ("127.0.0.1", false, "is not HOST:PORT"), ("127.0.0.1:99999", false, "port must be a number"),
            ("example.com:80", false, "must be an IPv4 address"),
        ])
    func addresses(_ text: String, _ loopback: Bool, _ problem: String) throws {
        guard problem.isEmpty else {
            #expect(throws: SkillbusError.self) { try HTTPAddress(parsing: text) }
            do { _ = try HTTPAddress(parsing: text) } catch { #expect(error.message.contains(problem), "\(error)") }
            return
        }
        var configuration = CoordinatorConfiguration()
        configuration.http = try HTTPAddress(parsing: text)
        #expect(configuration.http?.isLoopback == loopback)
        #expect((BindCheck.problem(configuration) == nil) == loopback)
        configuration.insecure = true
        #expect(BindCheck.problem(configuration) == nil)
    }

    @Test("the site answers 404 and 405 with what exists, and streams events with the rounds they change")
    func site() throws {
        let board = try OperatorBoard()
        defer { board.wakePipe.close() }
        let site = OperatorSite(board: board)
        func head(_ method: String, _ path: String) -> HTTPRequestHead {
            HTTPRequestHead(method: method, path: path, version: "HTTP/1.1", headers: [:])
        }
        #expect(site.respond(to: head("GET", "/x")).status == 404)
        let refused = site.respond(to: head("PUT", "/state"))
        #expect(refused.status == 405 && refused.headers.first?.1 == "GET, HEAD")
        #expect(site.respond(to: head("GET", "/events")).streams)
        // A group's member says so in /state (the dashboard's header shows it).
        var snapshot = BusSnapshot()
        let leader = GroupLeader(name: "a", bus: "tcp://10.0.0.1:5555", feed: "tcp://10.0.0.1:5556", epoch: 2, since: "")
        snapshot.group = GroupStatus(group: "g1", leader: leader, leading: false)
        board.publish(snapshot)
        let state = try JSONValue(parsing: site.respond(to: head("GET", "/state")).body)
        #expect(state["group"]?["leading"] == false && state["group"]?["leader"]?["name"] == "a", "\(state)")
        board.post(.roundAccepted(round: "r1", shape: "invoke", invocations: ["echo"]))
        #expect(site.collect(streaming: false).isEmpty, "with no stream open, nothing is made")
        board.post(.roundAccepted(round: "r2", shape: "invoke", invocations: ["echo"]))
        for index in 0..<(OperatorSite.feedEventsPerCollection + 3) {
            board.post(.requestDispatched(round: "q", request: "\(index)", skill: "echo", agent: "a", invocation: "i"))
        }
        board.post(.agentState(agent: "a", state: .executingSkill("echo")))
        let streamed = String(decoding: site.collect(streaming: true), as: UTF8.self)
        #expect(streamed.contains("event: round\ndata: {"))
        #expect(streamed.contains(#""type":"round.accepted""#))
        #expect(streamed.components(separatedBy: #""round":"q""#).count == 2 + OperatorSite.feedEventsPerCollection - 1,
            "a round changed many times in one collection is sent once (and its events up to the limit)")
        #expect(streamed.contains("event: skipped\ndata: {\"events\":4}"))
        #expect(streamed.contains(#""type":"agent.state""#), "agent events are never skipped")
        #expect(streamed.contains("event: agents\n"), "the first collect sends the agents")
        #expect(!String(decoding: site.collect(streaming: true), as: UTF8.self).contains("event: agents"), "only when they change")
    }
}

/// What a group's dashboards read from each other (PROTOCOL §13.7): `/state` names the leader's dashboard and the
/// members; `/group`, readable from any origin, says who leads and nothing more.
@Suite("Operator endpoint in a coordinator group")
struct OperatorGroupTests {
    @Test("a standby's /state and /group name the leader's dashboard; /group holds nothing else")
    func groupPages() throws {
        let board = try OperatorBoard()
        defer { board.wakePipe.close() }
        let site = OperatorSite(board: board)
        let get = { (path: String) in
            site.respond(to: HTTPRequestHead(method: "GET", path: path, version: "HTTP/1.1", headers: [:]))
        }
        let alone = get("/group")
        #expect(alone.status == 200 && alone.body == Array(#"{"group":null}"#.utf8))
        let leader = GroupLeader(
            name: "a", bus: "tcp://10.0.0.1:5555", feed: "tcp://10.0.0.1:5556", epoch: 3, since: "",
            http: "http://10.0.0.1:8080")
        let members = [
            GroupMember(name: "a", http: "http://10.0.0.1:8080", bus: leader.bus, feed: leader.feed),
            GroupMember(name: "b", http: nil, bus: "tcp://10.0.0.2:5555", feed: "tcp://10.0.0.2:5556"),
        ]
        var snapshot = BusSnapshot()
        snapshot.group = GroupStatus(group: "g1", leader: leader, leading: false, members: members)
        board.publish(snapshot)
        let state = try JSONValue(parsing: get("/state").body)
        #expect(state["group"]?["leader"]?["http"] == "http://10.0.0.1:8080", "\(state)")
        let listed = state["group"]?["members"]?.arrayValue ?? []
        #expect(listed.compactMap { $0["name"]?.stringValue } == ["a", "b"], "\(state)")
        #expect(listed.last?["http"] == .null && listed.last?["bus"] == "tcp://10.0.0.2:5555")
        let answer = get("/group")
        #expect(answer.status == 200 && answer.contentType == "application/json")
        #expect(answer.headers.contains { $0.0 == "Access-Control-Allow-Origin" && $0.1 == "*" })
        let group = try JSONValue(parsing: answer.body)
        #expect(
            group == ["group": "g1", "leading": false, "leader": ["name": "a", "epoch": 3, "http": "http://10.0.0.1:8080"]],
            "\(group)")
        #expect(get("/state").headers.allSatisfy { $0.0 != "Access-Control-Allow-Origin" }, "only /group is shared")
    }
}
