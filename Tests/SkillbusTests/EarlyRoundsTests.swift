import Testing

@testable import Skillbus

/// Journaled rounds whose skills are all idempotent start with their accept, not after its commit; what the journal
/// answers still decides what the clients get (PROTOCOL §3.5.9). No sockets: the state machine's actions.
@Suite("Journal: idempotent rounds start before their accept is committed")
struct EarlyRoundsTests {
    static let worker: PeerID = [0xA1]
    static let client: PeerID = [0xC1]
    static let other: PeerID = [0xC2]

    /// A journaled bus with one agent offering `echo` (idempotent) and `write` (not), whose journal held the
    /// round ids `held` when it opened.
    func bus(held: [String] = ["r1", "r2", "r3"]) -> CoordinatorState {
        var settings = CoordinatorState.Settings()
        settings.journaled = true
        var state = CoordinatorState(settings: settings)
        state.journalOpened(holding: held.map { Array($0.utf8) })
        _ = state.handleWorker(
            .ready([
                "name": "alpha", "capacity": 8, "heartbeatMs": 100_000,
                "skills": [["identifier": "echo", "idempotent": true], ["identifier": "write"]],
            ]),
            from: Self.worker, now: 0)
        return state
    }

    func round(_ id: String, skill: String = "echo", text: String = "hi") -> RoundRequest {
        RoundRequest(
            requestID: "q-" + id, roundID: id, timeoutMs: 10_000,
            body: Array(#"{"invoke":{"skill":"\#(skill)","params":{"text":"\#(text)"}}}"#.utf8))
    }

    func invocations(_ actions: [CoordinatorAction]) -> [Invocation] {
        actions.compactMap { if case .toWorker(_, .invoke(let invocation)) = $0 { invocation } else { nil } }
    }

    func entries(_ actions: [CoordinatorAction]) -> [JournalEntry] {
        actions.compactMap { if case .journal(let entry) = $0 { entry } else { nil } }
    }

    /// Each client's document as "client|other:status or error code[ stored]".
    func answers(_ actions: [CoordinatorAction]) -> [String] {
        actions.compactMap { action -> String? in
            guard case .toClient(let peer, .round(_, _, let bytes)) = action,
                let document = try? JSONValue(parsing: bytes)
            else { return nil }
            let outcome = document["error"]?["code"]?.stringValue ?? document["status"]?.stringValue ?? "?"
            return
                "\(peer == Self.client ? "client" : "other"):\(outcome)\(document["stored"] == true ? " stored" : "")"
        }
    }

    func result(_ invocation: Invocation, _ state: inout CoordinatorState) -> [CoordinatorAction] {
        state.handleWorker(
            .result(
                invocationID: invocation.invocationID, status: .ok, payload: Array(#"{"text":"hi","type":"text"}"#.utf8)
            ),
            from: Self.worker, now: 2)
    }

    @Test("an idempotent round whose id the journal cannot hold runs without a row and is written whole at its end")
    func freshIDNeedsNoAccept() throws {
        var state = bus(held: [])
        let sent = state.handleRound(round("n1"), from: Self.client, now: 1)
        #expect(entries(sent).isEmpty)
        let invoked = try #require(invocations(sent).first)
        let ended = result(invoked, &state)
        #expect(answers(ended) == ["client:ok"])
        guard case .finish(_, let body, _)? = entries(ended).first else {
            Issue.record("no finish in \(ended)")
            return
        }
        #expect(body == Array(#"{"invoke":{"params":{"text":"hi"},"skill":"echo"}}"#.utf8))  // canonical
        // Once handed to the journal, the id is one it may hold: the journal is asked again after a restart
        // would have lost the coordinator's memory of it.
        var restarted = bus(held: ["n1"])
        let again = restarted.handleRound(round("n1"), from: Self.client, now: 2)
        guard case .accept(_, _, true)? = entries(again).first else {
            Issue.record("no accept in \(again)")
            return
        }
    }

    @Test("an idempotent round is dispatched with its accept; it is answered and journaled once the journal accepts")
    func endsBeforeTheAccept() throws {
        var state = bus()
        let sent = state.handleRound(round("r1"), from: Self.client, now: 1)
        guard case .accept(_, _, true)? = entries(sent).first else {
            Issue.record("no idempotent accept in \(sent)")
            return
        }
        let invoked = try #require(invocations(sent).first)
        // Ended before the journal answered: nothing goes to the client, nothing more to the journal.
        let ended = result(invoked, &state)
        #expect(answers(ended).isEmpty && entries(ended).isEmpty)
        // The same round sent again meanwhile is answered with it.
        #expect(state.handleRound(round("r1"), from: Self.other, now: 3).isEmpty)
        let accepted = state.journalAnswered([.accepted(roundID: Array("r1".utf8))], now: 4)
        #expect(answers(accepted) == ["client:ok", "other:ok"])
        guard case .finish? = entries(accepted).first else {
            Issue.record("no finish in \(accepted)")
            return
        }
        #expect(answers(state.handleRound(round("r1"), from: Self.client, now: 5)) == ["client:ok stored"])
    }

    @Test("an idempotent round the journal accepted while it ran is answered when it ends, as any round")
    func acceptedWhileRunning() throws {
        var state = bus()
        let invoked = try #require(invocations(state.handleRound(round("r1"), from: Self.client, now: 1)).first)
        #expect(state.journalAnswered([.accepted(roundID: Array("r1".utf8))], now: 2).isEmpty)
        let ended = result(invoked, &state)
        #expect(answers(ended) == ["client:ok"])
        guard case .finish? = entries(ended).first else {
            Issue.record("no finish in \(ended)")
            return
        }
    }

    @Test("a round id the journal holds: its clients get the stored document, a conflict or the error, never its own")
    func journalKnowsTheId() throws {
        var state = bus()
        // Stored, answered while the round still ran.
        let first = try #require(invocations(state.handleRound(round("r1"), from: Self.client, now: 1)).first)
        let stored = Array(#"{"round":"r1","status":"ok","from":"before"}"#.utf8)
        #expect(state.journalAnswered([.stored(roundID: Array("r1".utf8), document: stored)], now: 2).isEmpty)
        let ended = result(first, &state)
        #expect(answers(ended) == ["client:ok stored"] && entries(ended).isEmpty)
        let again = state.handleRound(round("r1"), from: Self.client, now: 3)
        #expect(answers(again) == ["client:ok stored"])
        // A conflict, answered after the round ended: the round's document is not kept.
        let second = try #require(invocations(state.handleRound(round("r2"), from: Self.client, now: 4)).first)
        _ = result(second, &state)
        let conflict = state.journalAnswered([.conflict(roundID: Array("r2".utf8))], now: 5)
        #expect(answers(conflict) == ["client:round_conflict"] && entries(conflict).isEmpty)
        // A journal that failed to commit: the error.
        let third = try #require(invocations(state.handleRound(round("r3"), from: Self.client, now: 6)).first)
        let failed = state.journalAnswered(
            [.failed(roundID: Array("r3".utf8), SkillbusError(.storageUnavailable, "disk full"))], now: 7)
        #expect(failed.isEmpty)
        #expect(answers(result(third, &state)) == ["client:storage_unavailable"])
    }

    @Test("a round with a skill that is not idempotent waits for its accept's commit before anything runs")
    func notIdempotentWaits() {
        var state = bus()
        let sent = state.handleRound(round("w1", skill: "write"), from: Self.client, now: 1)
        #expect(invocations(sent).isEmpty)
        guard case .accept(_, _, false)? = entries(sent).first else {
            Issue.record("no accept in \(sent)")
            return
        }
        let started = state.journalAnswered([.accepted(roundID: Array("w1".utf8))], now: 2)
        #expect(invocations(started).count == 1)
    }
}
