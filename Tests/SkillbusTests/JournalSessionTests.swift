import Foundation
import Testing

@testable import Skillbus

/// The session roster in the coordinator's journal, on a real SQLite file reopened as a restart would: what is
/// written, updated, forgotten and read back, and a state machine restored from it.
@Suite("Session roster in the journal")
struct JournalSessionTests {
    func row(_ session: String, _ agent: String, _ first: Int64, _ last: Int64, role: String = "") -> SessionMembership {
        SessionMembership(session: Array(session.utf8), agent: agent, role: role, firstMs: first, lastMs: last)
    }

    /// Opens the journal in `directory`, hands it `entries`, and closes it (which commits them).
    func write(_ entries: [JournalEntry], in directory: String) throws {
        let journal = try JournalTests.Opened(directory).journal
        journal.submit(entries)
        journal.close()
    }

    @Test("members written, brought up to date and forgotten are read back at the next open, oldest last first")
    func roundTrip() async throws {
        try await withTemporaryDirectory { directory in
            let now = RoundJournal.nowMs()
            try write(
                [
                    .member(row("s1", "alpha", now - 500, now - 500)),
                    .member(row("s1", "beta", now - 400, now - 400, role: "critic")),
                    .member(row("gone", "alpha", now - 300, now - 300)),
                    .member(row("s2", "alpha", now - 200, now - 200)),
                ], in: directory)
            // A second lifetime: alpha serves s1 again in a role (its first time stays), and `gone` is forgotten.
            try write(
                [.member(row("s1", "alpha", now - 500, now - 100, role: "writer")), .forgetSession(Array("gone".utf8))],
                in: directory)
            let reopened = try JournalTests.Opened(directory).journal
            defer { reopened.close() }
            #expect(
                reopened.takeSessionsAtOpen() == [
                    row("s1", "beta", now - 400, now - 400, role: "critic"), row("s2", "alpha", now - 200, now - 200),
                    row("s1", "alpha", now - 500, now - 100, role: "writer"),
                ])
            #expect(reopened.takeSessionsAtOpen().isEmpty)
        }
    }

    @Test("a session nobody served within the retention window is deleted at open, with all its members")
    func idleSessionsGo() async throws {
        try await withTemporaryDirectory { directory in
            let now = RoundJournal.nowMs()
            try write(
                [
                    .member(row("old", "alpha", now - 90_000, now - 90_000)),
                    .member(row("mixed", "alpha", now - 90_000, now - 90_000)),
                    .member(row("mixed", "beta", now - 1000, now - 1000)),
                ], in: directory)
            var limits = RoundJournal.Limits()
            limits.sessionRetentionMs = 60_000
            let reopened = try JournalTests.Opened(directory, limits: limits).journal
            #expect(reopened.takeSessionsAtOpen().map(\.agent) == ["alpha", "beta"])
            reopened.close()
            // Deleted, not only skipped: a longer window does not bring `old` back.
            let again = try JournalTests.Opened(directory).journal
            defer { again.close() }
            #expect(again.takeSessionsAtOpen().allSatisfy { $0.session == Array("mixed".utf8) })
        }
    }

    @Test("a coordinator's roster goes through the journal into the next coordinator, affinity and all")
    func stateAcrossRestart() async throws {
        try await withTemporaryDirectory { directory in
            var settings = CoordinatorState.Settings()
            settings.journaled = true
            settings.wallClockAtZeroMs = RoundJournal.nowMs()
            let (client, alpha, beta): (PeerID, PeerID, PeerID) = ([0xC1], [0xA1], [0xB1])
            func cluster() -> CoordinatorState {
                var state = CoordinatorState(settings: settings)
                for (name, peer) in [("alpha", alpha), ("beta", beta)] {
                    let body: JSONValue = ["name": .string(name), "capacity": 4, "skills": [["identifier": "echo"]]]
                    _ = state.handleWorker(.ready(body), from: peer, now: 0)
                }
                return state
            }
            func invoke(_ id: String, session: String = "s1") -> InvokeRequest {
                InvokeRequest(requestID: id, roundID: id, sessionID: session, skill: "echo", parameters: Array("{}".utf8))
            }
            func peer(_ actions: [CoordinatorAction]) -> PeerID? {
                actions.compactMap { if case .toWorker(let peer, .invoke) = $0 { peer } else { nil } }.first
            }
            var first = cluster()
            // The agent an idle cluster picks first is busy, so s1 goes to the other one.
            let picked = peer(first.handleInvoke(invoke("r0", session: ""), from: client, now: 1_000_000))
            let holder = peer(first.handleInvoke(invoke("r1"), from: client, now: 1_000_000))
            #expect(holder != nil && holder != picked)
            let entries = first.tick(now: 2_000_000).compactMap { if case .journal(let entry) = $0 { entry } else { nil } }
            #expect(entries.count == 1)
            try write(entries, in: directory)

            let reopened = try JournalTests.Opened(directory).journal
            defer { reopened.close() }
            var second = cluster()
            second.restoreSessions(reopened.takeSessionsAtOpen())
            #expect(second.roster.members(of: Array("s1".utf8)) == first.roster.members(of: Array("s1".utf8)))
            // Idle again, the cluster would pick `picked`: the session goes back to its holder instead.
            #expect(peer(second.handleInvoke(invoke("r2"), from: client, now: 3_000_000)) == holder)
        }
    }
}
