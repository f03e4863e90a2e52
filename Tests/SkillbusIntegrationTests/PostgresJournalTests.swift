import Foundation
@testable import Skillbus
import SkillbusTestSupport
import Synchronization
import Testing

/// A `RoundJournal` whose answers are collected, with `accept` that waits for its answer (no sockets).
final class CollectedJournal: Sendable {
    let journal: RoundJournal
    private let answers: Answers

    final class Answers: Sendable {
        let list = Mutex<[JournalAnswer]>([])
    }

    init(group: CoordinatorGroupSettings, limits: RoundJournal.Limits = .init()) throws {
        let answers = Answers()
        self.answers = answers
        journal = try RoundJournal(group: group, limits: limits, logger: Logger(label: "test")) { batch in
            answers.list.withLock { $0 += batch }
        }
    }

    func accept(_ id: String, body: String = "{}", idempotent: Bool = false) async throws -> JournalAnswer {
        journal.submit([.accept(roundID: Array(id.utf8), body: Array(body.utf8), idempotent: idempotent)])
        let deadline = ContinuousClock.now + .seconds(10)
        while ContinuousClock.now < deadline {
            let answer = answers.list.withLock { list in
                list.firstIndex { $0.roundID == Array(id.utf8) }.map { list.remove(at: $0) }
            }
            if let answer { return answer }
            try await Task.sleep(for: .milliseconds(5))
        }
        throw TimedOut(what: "the journal's answer to \(id)")
    }
}

extension ThrowawayPostgres {
    func group(_ name: String) -> CoordinatorGroupSettings {
        CoordinatorGroupSettings(database: url, group: name, password: Self.password)
    }
}

/// The round journal in PostgreSQL, without sockets: the same answers as the SQLite journal's (PROTOCOL §3.5.9).
@Suite(
    "Round journal in PostgreSQL", .serialized, .timeLimit(.minutes(2)),
    .enabled(if: ThrowawayPostgres.unavailable == nil, Comment(rawValue: ThrowawayPostgres.unavailable ?? "")))
struct PostgresJournalTests {
    @Test("a reopened journal keeps documents, answers running rounds interrupted, reruns idempotent ones")
    func recovery() async throws {
        let postgres = try ThrowawayPostgres()
        defer { postgres.remove() }
        do {
            let first = try CollectedJournal(group: postgres.group("g1"))
            #expect(try await first.accept("done") == .accepted(roundID: Array("done".utf8)))
            first.journal.submit([.finish(roundID: Array("done".utf8), document: Array(#"{"status":"ok"}"#.utf8))])
            #expect(try await first.accept("crashed") == .accepted(roundID: Array("crashed".utf8)))
            #expect(try await first.accept("again", idempotent: true) == .accepted(roundID: Array("again".utf8)))
            first.journal.submit([
                .member(SessionMembership(session: Array("s1".utf8), agent: "a1", role: "", firstMs: 1, lastMs: Int64.max / 2))
            ])
            first.journal.close()
        }
        // Another group on the same database sees none of it.
        let other = try CollectedJournal(group: postgres.group("g2"))
        #expect(other.journal.interruptedAtOpen.load(ordering: .relaxed) == 0)
        #expect(try await other.accept("done") == .accepted(roundID: Array("done".utf8)))
        other.journal.close()

        let second = try CollectedJournal(group: postgres.group("g1"))
        defer { second.journal.close() }
        #expect(second.journal.interruptedAtOpen.load(ordering: .relaxed) == 2)
        #expect(second.journal.takeSessionsAtOpen().map(\.agent) == ["a1"])
        #expect(
            try await second.accept("done")
                == .stored(roundID: Array("done".utf8), document: Array(#"{"status":"ok"}"#.utf8)))
        #expect(try await second.accept("done", body: #"{"other":1}"#) == .conflict(roundID: Array("done".utf8)))
        #expect(try await second.accept("crashed") == .interrupted(roundID: Array("crashed".utf8)))
        #expect(try await second.accept("again") == .accepted(roundID: Array("again".utf8)))
        second.journal.submit([.forget(roundID: Array("crashed".utf8))])
        #expect(try await second.accept("crashed") == .accepted(roundID: Array("crashed".utf8)))
    }

    @Test("the journal in PostgreSQL stays within its byte limit by dropping the oldest ended rounds")
    func retentionByBytes() async throws {
        let postgres = try ThrowawayPostgres()
        defer { postgres.remove() }
        let limits = RoundJournal.Limits(bytes: 20_000, retentionMs: 600_000, sweepMs: 0)
        let opened = try CollectedJournal(group: postgres.group("g"), limits: limits)
        defer { opened.journal.close() }
        let document = [UInt8](repeating: UInt8(ascii: "x"), count: 1000)
        for index in 0..<60 {
            _ = try await opened.accept("r\(index)")
            opened.journal.submit([.finish(roundID: Array("r\(index)".utf8), document: document)])
        }
        try await waitUntil("the journal to shrink") { opened.journal.storedBytes.load(ordering: .relaxed) <= 20_000 }
        #expect(try await opened.accept("r59") == .stored(roundID: Array("r59".utf8), document: document))
        #expect(try await opened.accept("r0") == .accepted(roundID: Array("r0".utf8)))
    }

    @Test("a database nobody listens on is refused at open, naming it")
    func unreachable() throws {
        let port = try ThrowawayPostgres.freePort()
        let settings = CoordinatorGroupSettings(database: "postgresql://skillbus@127.0.0.1:\(port)/x", group: "g")
        do {
            _ = try CollectedJournal(group: settings)
            Issue.record("a journal opened on a closed port")
        } catch let error as SkillbusError {
            #expect(error.code == .storageUnavailable)
            #expect(error.message.contains("127.0.0.1:\(port)"), "\(error.message)")
        }
    }
}
