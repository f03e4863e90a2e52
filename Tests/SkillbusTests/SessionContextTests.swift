import Testing

@testable import Skillbus

/// Sessions through the bus without sockets: affinity routing, QUERY relayed to the agent that holds a
/// session and its ANSWER back, and CONTEXT reports.
@Suite("Sessions: affinity, queries and context reports")
struct SessionContextTests {
    static let ms: UInt64 = 1_000_000
    let client: PeerID = [0xC1]
    let alpha: PeerID = [0xA1]
    let beta: PeerID = [0xB1]

    func ready(_ name: String, capacity: Int = 2) -> WorkerMessage {
        .ready(["name": .string(name), "capacity": .number(Double(capacity)), "skills": [["identifier": "echo"]]])
    }

    func cluster() -> CoordinatorState {
        var state = CoordinatorState()
        _ = state.handleWorker(ready("alpha"), from: alpha, now: 0)
        _ = state.handleWorker(ready("beta"), from: beta, now: 0)
        return state
    }

    func request(_ id: String, session: String) -> InvokeRequest {
        InvokeRequest(requestID: id, roundID: "round-" + id, sessionID: session, skill: "echo", parameters: Array("{}".utf8))
    }

    func sentTo(_ actions: [CoordinatorAction]) -> [PeerID] {
        actions.compactMap { if case .toWorker(let peer, .invoke) = $0 { peer } else { nil } }
    }

    func answers(_ actions: [CoordinatorAction]) -> [(agent: String, AgentAnswer)] {
        actions.compactMap { if case .toClient(_, .answer(_, let agent, let answer)) = $0 { (agent, answer) } else { nil } }
    }

    @Test("a session's invocations go back to the agent that served it, even when another is less loaded")
    func affinity() throws {
        var state = cluster()
        let first = try #require(sentTo(state.handleInvoke(request("r1", session: "s"), from: client, now: 1)).first)
        let other = first == alpha ? beta : alpha
        // The first agent is busier now (one in flight), the other idle: the session still goes back.
        #expect(sentTo(state.handleInvoke(request("r2", session: "s"), from: client, now: 2)) == [first])
        #expect(state.workers[first]?.inFlight == 2 && state.workers[other]?.inFlight == 0)
        // At capacity it waits for its agent rather than move.
        #expect(sentTo(state.handleInvoke(request("r3", session: "s"), from: client, now: 3)).isEmpty)
        #expect(state.waitingCount == 1)
        // A request without a session is routed by load as before.
        #expect(sentTo(state.handleInvoke(request("r4", session: ""), from: client, now: 4)) == [other])
        // The agent leaves: the session moves on, and stays with its new agent.
        _ = state.handleWorker(.disconnect, from: first, now: 5)
        #expect(sentTo(state.handleInvoke(request("r5", session: "s"), from: client, now: 6)) == [other])
        // Back again and idle, the first agent does not take the session back: it waits for its new agent.
        _ = state.handleWorker(ready(first == alpha ? "alpha" : "beta"), from: first, now: 7)
        #expect(sentTo(state.handleInvoke(request("r6", session: "s"), from: client, now: 8)).isEmpty)
        #expect(state.workers[first]?.inFlight == 0 && state.workers[other]?.inFlight == 2 && state.waitingCount == 1)
    }

    @Test("the affinity table forgets the least recently used session beyond its limit")
    func affinityLimit() {
        var table = SessionAffinity(limit: 2)
        table.record(Array("a".utf8), agent: "alpha")
        table.record(Array("b".utf8), agent: "beta")
        table.record(Array("a".utf8), agent: "alpha")  // a is used again: b is now the oldest
        table.record(Array("c".utf8), agent: "gamma")
        #expect(table.agent(of: Array("a".utf8)) == "alpha" && table.agent(of: Array("b".utf8)) == nil)
        #expect(table.agent(of: Array("c".utf8)) == "gamma" && table.count == 2)
        for round in 0..<5000 { table.record(Array("a".utf8), agent: "alpha\(round % 2)") }
        #expect(table.count == 2 && table.agent(of: Array("a".utf8)) == "alpha1")
    }

    @Test("QUERY goes to the named agent and its ANSWER back to the client; a late or foreign ANSWER is dropped")
    func queryRelay() throws {
        var state = cluster()
        let asked = state.handleQuery(QueryRequest(requestID: "q", agent: "beta", query: .sessions), from: client, now: 1)
        guard case .toWorker(let peer, .query(let queryID, .sessions)) = try #require(asked.first) else {
            Issue.record("no QUERY to the worker: \(asked)")
            return
        }
        #expect(peer == beta)
        #expect(state.handleWorker(.answer(queryID: queryID, .ok(["sessions": []])), from: alpha, now: 2).isEmpty)
        let relayed = answers(state.handleWorker(.answer(queryID: queryID, .ok(["sessions": []])), from: beta, now: 3))
        #expect(relayed.count == 1 && relayed.first?.agent == "beta" && relayed.first?.1 == .ok(["sessions": []]))
        #expect(state.handleWorker(.answer(queryID: queryID, .ok([:])), from: beta, now: 4).isEmpty)
    }

    @Test("a query naming no agent goes where its session went; unknown agents and sessions are named")
    func queryRouting() throws {
        var state = cluster()
        let served = try #require(sentTo(state.handleInvoke(request("r1", session: "s1"), from: client, now: 1)).first)
        let asked = state.handleQuery(QueryRequest(requestID: "q", agent: "", query: .history(session: "s1")), from: client, now: 2)
        #expect(asked.contains { if case .toWorker(served, .query) = $0 { true } else { false } })
        let failures: [(QueryRequest, SkillbusError.Code, String)] = [
            (QueryRequest(requestID: "q", agent: "", query: .history(session: "nobody")), .unknownSession, "'nobody'"),
            (QueryRequest(requestID: "q", agent: "", query: .sessions), .unknownAgent, "needs an agent name"),
            (QueryRequest(requestID: "q", agent: "zeta", query: .sessions), .unknownAgent, "'zeta' (live: alpha, beta)"),
        ]
        for (query, code, words) in failures {
            let answer = answers(state.handleQuery(query, from: client, now: 3)).first?.1
            guard case .error(let error) = answer else {
                Issue.record("no error for \(query)")
                continue
            }
            #expect(error.code == code && error.message.contains(words), "\(error)")
        }
    }

    @Test("a query whose agent leaves or stays silent is answered agent_lost or timeout")
    func queryFailures() throws {
        var state = cluster()
        _ = state.handleQuery(QueryRequest(requestID: "lost", agent: "alpha", query: .sessions), from: client, now: 1)
        _ = state.handleQuery(
            QueryRequest(requestID: "slow", agent: "beta", timeoutMs: 50, query: .sessions), from: client, now: 1)
        let left = answers(state.handleWorker(.disconnect, from: alpha, now: 2))
        guard case .error(let lost) = try #require(left.first).1 else {
            Issue.record("no error")
            return
        }
        #expect(lost.code == .agentLost)
        // Keep beta alive through its own heartbeats.
        _ = state.handleWorker(.heartbeat(intervalMs: nil, registry: nil), from: beta, now: 40 * Self.ms)
        #expect(answers(state.tick(now: 49 * Self.ms)).isEmpty)
        let expired = answers(state.tick(now: 52 * Self.ms))
        guard case .error(let timeout) = try #require(expired.first).1 else {
            Issue.record("no error")
            return
        }
        #expect(timeout.code == .timeout && timeout.message.contains("'beta'"))
    }

    @Test("CONTEXT: sessions show in AGENTS; a store that stops or starts taking writes is announced once")
    func contextReports() {
        var state = cluster()
        let problem = SkillbusError(.storageUnavailable, "disk full")
        let first = state.handleWorker(.context(AgentContextStatus(sessions: 3)), from: alpha, now: 1)
        #expect(first.isEmpty)
        let failing = state.handleWorker(.context(AgentContextStatus(sessions: 3, storageProblem: problem)), from: alpha, now: 2)
        #expect(failing == [.publish(.agentStorage(agent: "alpha", problem: problem))])
        #expect(state.handleWorker(.context(AgentContextStatus(sessions: 4, storageProblem: problem)), from: alpha, now: 3).isEmpty)
        let listing = state.agentsListing(now: 4)["agents"]?.arrayValue ?? []
        #expect(listing.first?["sessions"] == 4 && listing.first?["storage"]?["code"] == "storage_unavailable")
        #expect(listing.last?["sessions"] == nil)
        let healed = state.handleWorker(.context(AgentContextStatus(sessions: 4)), from: alpha, now: 5)
        #expect(healed == [.publish(.agentStorage(agent: "alpha", problem: nil))])
    }
}
