import Testing

@testable import Skillbus

/// OUTPUT through the bus, without sockets: to the client that asked, to identical requests that joined,
/// to a round's clients and into its document (within its budget), and never after the caller was answered.
@Suite("Partial output through the bus")
struct OutputRelayTests {
    static let ms: UInt64 = 1_000_000
    let client: PeerID = [0xC1]
    let other: PeerID = [0xC2]
    let alpha: PeerID = [0xA1]
    let beta: PeerID = [0xB1]

    func state(_ settings: CoordinatorState.Settings = .init()) -> CoordinatorState {
        var state = CoordinatorState(settings: settings, epoch: "e1")
        for (name, peer) in [("alpha", alpha), ("beta", beta)] {
            _ = state.handleWorker(
                .ready([
                    "name": .string(name), "capacity": 4,
                    "skills": [["identifier": "lines", "parameters": [["name": "text", "type": "string"]]]],
                ]), from: peer, now: 0)
        }
        return state
    }

    func request(_ id: String, round: String = "r1", text: String = "a") -> InvokeRequest {
        InvokeRequest(
            requestID: id, roundID: round, skill: "lines", timeoutMs: 1000,
            parameters: JSONValue.object(["text": .string(text)]).serialized())
    }

    func dispatched(_ actions: [CoordinatorAction]) -> [(PeerID, Invocation)] {
        actions.compactMap {
            if case .toWorker(let peer, .invoke(let invocation)) = $0 { (peer, invocation) } else { nil }
        }
    }

    /// Every OUTPUT sent to a client: (client, request id, round invocation id, batch).
    func outputs(_ actions: [CoordinatorAction]) -> [(PeerID, String, String, OutputBatch)] {
        actions.compactMap {
            guard case .toClient(let peer, .output(let requestID, let invocation, let batch)) = $0 else { return nil }
            return (peer, String(decoding: requestID, as: UTF8.self), invocation, batch)
        }
    }

    func batch(_ first: Int, _ texts: String...) -> OutputBatch {
        OutputBatch(first: first, parts: texts.map { OutputPart.text($0) })
    }

    @Test("a REQUEST's output reaches its client and the feed, until its RESULT")
    func toTheClient() throws {
        var state = state()
        let (peer, invocation) = try #require(dispatched(state.handleInvoke(request("q1"), from: client, now: 0)).first)
        let actions = state.handleWorker(
            .output(invocationID: invocation.invocationID, batch(0, "3", "2")), from: peer, now: Self.ms)
        let sent = outputs(actions)
        #expect(sent.count == 1 && sent[0].0 == client && sent[0].1 == "q1" && sent[0].2 == "")
        #expect(sent[0].3 == batch(0, "3", "2"))
        #expect(
            actions.contains(
                .publish(
                    .invocationOutput(
                        round: "r1", skill: "lines", agent: peer == alpha ? "alpha" : "beta",
                        dispatch: invocation.invocationID, batch(0, "3", "2")))))
        // From another worker than the one running it: dropped.
        let foreign = peer == alpha ? beta : alpha
        #expect(state.handleWorker(.output(invocationID: invocation.invocationID, batch(2, "x")), from: foreign, now: 2)
            .isEmpty)
        _ = state.handleWorker(
            .result(invocationID: invocation.invocationID, status: .ok, payload: SkillResult.text("1").serialized()),
            from: peer, now: 3 * Self.ms)
        #expect(state.handleWorker(.output(invocationID: invocation.invocationID, batch(2, "1")), from: peer, now: 4)
            .isEmpty)
    }

    @Test("an identical REQUEST that joined the execution gets its output too")
    func toJoiners() throws {
        var state = state()
        let (peer, invocation) = try #require(dispatched(state.handleInvoke(request("q1"), from: client, now: 0)).first)
        #expect(dispatched(state.handleInvoke(request("q2"), from: other, now: 1)).isEmpty)
        let sent = outputs(state.handleWorker(.output(invocationID: invocation.invocationID, batch(0, "x")), from: peer, now: 2))
        #expect(sent.map(\.0) == [client, other] && sent.map(\.1) == ["q1", "q2"])
    }

    @Test("output after the deadline answered the caller is dropped; beyond the bus's limit too")
    func dropped() throws {
        var settings = CoordinatorState.Settings()
        settings.maxOutputBytes = 40
        var state = state(settings)
        let (peer, invocation) = try #require(dispatched(state.handleInvoke(request("q1"), from: client, now: 0)).first)
        let id = invocation.invocationID
        #expect(outputs(state.handleWorker(.output(invocationID: id, batch(0, "ok")), from: peer, now: 1)).count == 1)
        // 2 + 26 bytes a part: the next one would pass 40.
        #expect(state.handleWorker(.output(invocationID: id, batch(1, "too much")), from: peer, now: 2).isEmpty)
        _ = state.tick(now: 2000 * Self.ms)
        #expect(state.handleWorker(.output(invocationID: id, batch(2, "a")), from: peer, now: 2001 * Self.ms).isEmpty)
    }

    @Test("a round's invocation: OUTPUT to the round's clients with its id, and the parts in its document")
    func inARound() throws {
        var state = state()
        let body: JSONValue = ["invoke": ["skill": "lines", "params": ["text": "a"]]]
        let round = RoundRequest(requestID: "q", roundID: "R", timeoutMs: 5000, body: body.serialized())
        let (peer, invocation) = try #require(dispatched(state.handleRound(round, from: client, now: 0)).first)
        // The same round sent again while it runs joins it, and hears the output as well.
        let again = RoundRequest(requestID: "q-again", roundID: "R", timeoutMs: 5000, body: body.serialized())
        #expect(state.handleRound(again, from: other, now: 1).isEmpty)
        let sent = outputs(
            state.handleWorker(.output(invocationID: invocation.invocationID, batch(0, "one", "two")), from: peer, now: 2))
        #expect(sent.map(\.1) == ["q", "q-again"] && sent.allSatisfy { $0.2 == "lines" })
        let done = state.handleWorker(
            .result(invocationID: invocation.invocationID, status: .ok, payload: SkillResult.text("2").serialized()),
            from: peer, now: 3)
        let document = try #require(
            done.compactMap { action -> RoundDocument? in
                guard case .toClient(_, .round(_, _, let bytes)) = action else { return nil }
                return try? RoundDocument(parsing: bytes)
            }.first)
        #expect(document.invocations[0].output == [.text("one"), .text("two")])
        #expect(!document.invocations[0].outputTruncated)
        #expect(document.invocations[0].json["output"] == [["text": "one", "type": "text"], ["text": "two", "type": "text"]])
    }

    @Test("a round keeps output only within its budget, as a whole prefix")
    func roundBudget() throws {
        var settings = CoordinatorState.Settings()
        settings.maxRoundOutputBytes = 60
        var state = state(settings)
        let body: JSONValue = ["invoke": ["skill": "lines", "params": ["text": "a"]]]
        let round = RoundRequest(requestID: "q", roundID: "R", timeoutMs: 5000, body: body.serialized())
        let (peer, invocation) = try #require(dispatched(state.handleRound(round, from: client, now: 0)).first)
        let id = invocation.invocationID
        // Each part is 27 bytes of the budget: two fit, the third does not, and nothing after it is kept.
        let sent = outputs(state.handleWorker(.output(invocationID: id, batch(0, "1", "2", "3")), from: peer, now: 1))
        #expect(sent.count == 1 && sent[0].3.parts.count == 3)  // forwarded whole all the same
        _ = state.handleWorker(.output(invocationID: id, batch(3, "4")), from: peer, now: 2)
        let done = state.handleWorker(
            .result(invocationID: id, status: .ok, payload: SkillResult.text("x").serialized()), from: peer, now: 3)
        let bytes = try #require(
            done.compactMap { action -> [UInt8]? in
                if case .toClient(_, .round(_, _, let bytes)) = action { bytes } else { nil }
            }.first)
        let document = try RoundDocument(parsing: bytes)
        #expect(document.invocations[0].output == [.text("1"), .text("2")] && document.invocations[0].outputTruncated)
    }

    @Test("a plan step that reused another of the document gets no output of its own")
    func deduplicatedStep() throws {
        var state = state()
        let body: JSONValue = [
            "plan": [
                "steps": [
                    ["id": "a", "skill": "lines", "params": ["text": "x"]],
                    ["id": "b", "skill": "lines", "params": ["text": "x"]],
                ]
            ]
        ]
        let round = RoundRequest(requestID: "q", roundID: "R", timeoutMs: 5000, body: body.serialized())
        let started = dispatched(state.handleRound(round, from: client, now: 0))
        #expect(started.count == 1)
        let (peer, invocation) = try #require(started.first)
        let sent = outputs(state.handleWorker(.output(invocationID: invocation.invocationID, batch(0, "p")), from: peer, now: 1))
        #expect(sent.map(\.2) == ["a"])
        let done = state.handleWorker(
            .result(invocationID: invocation.invocationID, status: .ok, payload: SkillResult.text("x").serialized()),
            from: peer, now: 2)
        let bytes = try #require(
            done.compactMap { action -> [UInt8]? in
                if case .toClient(_, .round(_, _, let bytes)) = action { bytes } else { nil }
            }.first)
        let document = try RoundDocument(parsing: bytes)
        #expect(document.invocations.map(\.output) == [[.text("p")], []])
        #expect(document.invocations[1].deduplicated && document.invocations[1].reusedFrom == "a")
    }
}
