import Foundation
import SkillbusTestSupport
import Synchronization
import Testing

@testable import Skillbus

/// A `RoundJournal` whose answers are collected, with `accept` that waits for its answer (no sockets).
final class CollectedJournal: Sendable {
    let journal: RoundJournal
    private let answers: Answers

    final class Answers: Sendable {
        let list = Mutex<[JournalAnswer]>([])
    }

    /// The journal of the group's leader: the group's row is made (epoch 1) when it has none.
    init(group: CoordinatorGroupSettings, limits: RoundJournal.Limits = .init()) throws {
        let answers = Answers()
        self.answers = answers
        let epoch = try Self.lead(group)
        journal = try RoundJournal(group: group, epoch: epoch, limits: limits, logger: Logger(label: "test")) { batch in
            answers.list.withLock { $0 += batch }
        }
    }

    /// The group's epoch, its row made when missing, as an election's first leader makes it.
    static func lead(_ group: CoordinatorGroupSettings) throws -> Int {
        let connection = try PostgresConnection(url: group.database, password: group.password, applicationName: "test")
        defer { connection.close() }
        try PostgresJournalSchema.prepare(connection)
        try connection.run(
            "lead",
            "INSERT INTO skillbus_leaders (grp, epoch, name, bus, feed, since, lease_until, lease_ms, renewals) "
                + "VALUES ($1, 1, 'test', 'tcp://x:1', 'tcp://x:2', 0, now(), 2000, 0) "
                + "ON CONFLICT (grp) DO NOTHING", [.text(group.group)])
        return Int(
            try connection.integer("epoch", "SELECT epoch FROM skillbus_leaders WHERE grp = $1", [.text(group.group)])
                ?? 0)
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
            first.journal.submit([.finish(roundID: Array("done".utf8), body: Array("{}".utf8), document: Array(#"{"status":"ok"}"#.utf8))])
            #expect(try await first.accept("crashed") == .accepted(roundID: Array("crashed".utf8)))
            #expect(try await first.accept("again", idempotent: true) == .accepted(roundID: Array("again".utf8)))
            first.journal.submit([
                .member(
                    SessionMembership(
                        session: Array("s1".utf8), agent: "a1", role: "", firstMs: 1, lastMs: Int64.max / 2))
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
            opened.journal.submit([.finish(roundID: Array("r\(index)".utf8), body: Array("{}".utf8), document: document)])
        }
        try await waitUntil("the journal to shrink") { opened.journal.storedBytes.load(ordering: .relaxed) <= 20_000 }
        #expect(try await opened.accept("r59") == .stored(roundID: Array("r59".utf8), document: document))
        #expect(try await opened.accept("r0") == .accepted(roundID: Array("r0".utf8)))
    }

    @Test("a round that ran without a row gets it whole at its end: stored for its body, a conflict for another")
    func finishWithoutRow() async throws {
        let postgres = try ThrowawayPostgres()
        defer { postgres.remove() }
        let opened = try CollectedJournal(group: postgres.group("g"))
        defer { opened.journal.close() }
        let body = #"{"invoke":{"skill":"echo"}}"#
        opened.journal.submit([.finish(roundID: Array("fresh".utf8), body: Array(body.utf8), document: Array("{}".utf8))])
        #expect(try await opened.accept("fresh", body: body) == .stored(roundID: Array("fresh".utf8), document: Array("{}".utf8)))
        #expect(try await opened.accept("fresh", body: "{}") == .conflict(roundID: Array("fresh".utf8)))
    }

    @Test("fencing: once the group's epoch moved on, the journal writes nothing more and says so once")
    func fencing() async throws {
        let postgres = try ThrowawayPostgres()
        defer { postgres.remove() }
        let fenced = Mutex<[String]>([])
        let group = postgres.group("g")
        let epoch = try CollectedJournal.lead(group)
        var hooks = RoundJournal.Hooks()
        hooks.onFenced = { error in fenced.withLock { $0.append(error.message) } }
        let answers = CollectedJournal.Answers()
        let journal = try RoundJournal(
            group: group, epoch: epoch, limits: .init(), logger: Logger(label: "test"), hooks: hooks
        ) {
            batch in answers.list.withLock { $0 += batch }
        }
        defer { journal.close() }
        journal.submit([.accept(roundID: Array("before".utf8), body: Array("{}".utf8), idempotent: false)])
        try await waitUntil("the first accept's answer") { answers.list.withLock { $0.count } == 1 }
        let connection = try PostgresConnection(
            url: postgres.url, password: ThrowawayPostgres.password, applicationName: "test")
        defer { connection.close() }
        try connection.execute("UPDATE skillbus_leaders SET epoch = epoch + 1 WHERE grp = 'g'")
        journal.submit([.accept(roundID: Array("after".utf8), body: Array("{}".utf8), idempotent: false)])
        try await waitUntil("the second accept's answer") { answers.list.withLock { $0.count } == 2 }
        let second = answers.list.withLock { $0[1] }
        guard case .failed(_, let error) = second else {
            Issue.record("a fenced journal accepted a round: \(second)")
            return
        }
        #expect(error.code == .notLeader && error.message.contains("epoch \(epoch)"), "\(error.message)")
        #expect(fenced.withLock { $0.count } == 1)
        var rows = 0
        try connection.run("rows", "SELECT id FROM skillbus_rounds WHERE grp = 'g'") { _ in rows += 1 }
        #expect(rows == 1)
    }

    @Test("a group that began with an empty table finishes rounds by key once the table grew, not by scanning it")
    func finishFindsRoundsByKey() async throws {
        let postgres = try ThrowawayPostgres()
        defer { postgres.remove() }
        let group = postgres.group("g")
        let store = try PostgresJournalStore(settings: group, epoch: try CollectedJournal.lead(group))
        defer { store.close() }
        let ids = (0..<64).map { Array("r\($0)".utf8) }
        // The server plans a prepared statement's first runs for their parameters, then keeps one plan: these
        // runs, on an empty table, are where a kept plan would come from (rounds of their own: nothing they write
        // counts as an update below).
        for run in 0..<8 {
            try store.transaction { () throws(SkillbusError) in
                try store.finish(
                    (0..<64).map { FinishedRow(id: Array("early\(run)-\($0)".utf8), body: Array("{}".utf8), document: Array("{}".utf8)) },
                    nowMs: 1)
            }
        }
        let connection = try PostgresConnection(
            url: postgres.url, password: ThrowawayPostgres.password, applicationName: "test")
        defer { connection.close() }
        try connection.execute(
            """
            INSERT INTO skillbus_rounds (grp, id, body, state, idempotent, accepted, finished, bytes)
                SELECT 'g', 'r' || i, '{}', 'running', false, 1, 0, 2 FROM generate_series(0, 19999) AS i
                ON CONFLICT DO NOTHING
            """)
        // Rows the server read from the table (the runs above read none: it was empty), and rows it updated.
        func counters() throws -> (read: Int64, updated: Int64) {
            var counts: (Int64, Int64) = (0, 0)
            try connection.run(
                "counters",
                "SELECT seq_tup_read + coalesce(idx_tup_fetch, 0), n_tup_upd FROM pg_stat_user_tables "
                    + "WHERE relname = 'skillbus_rounds'"
            ) { row in counts = (row.int64(0), row.int64(1)) }
            return counts
        }
        let before = try counters()
        try store.transaction { () throws(SkillbusError) in
            try store.finish(ids.map { FinishedRow(id: $0, body: Array("{}".utf8), document: Array(#"{"status":"ok"}"#.utf8)) }, nowMs: 2)
        }
        // Otherwise an idle backend may keep its counters for up to 10 s.
        try store.connection.execute("SELECT pg_stat_force_next_flush()")
        let deadline = ContinuousClock.now + .seconds(10)
        var after = before
        while after.updated < before.updated + 64 && ContinuousClock.now < deadline {
            try await Task.sleep(for: .milliseconds(50))
            after = try counters()
        }
        #expect(after.updated - before.updated == 64, "the finish did not show in the server's counters within 10 s")
        let read = after.read - before.read
        #expect(read < 1000, "finishing 64 rounds read \(read) of the table's 20,000 rows")
        #expect(
            try connection.integer(
                "done", "SELECT count(*) FROM skillbus_rounds WHERE grp = 'g' AND id LIKE 'r%' AND state = 'done'")
                == 64)
    }

    @Test("a journal of schema 1 (one coordinator per group) gains the leaders table and each round's epoch")
    func migratesFromSchema1() async throws {
        let postgres = try ThrowawayPostgres()
        defer { postgres.remove() }
        let connection = try PostgresConnection(
            url: postgres.url, password: ThrowawayPostgres.password, applicationName: "test")
        defer { connection.close() }
        // What the first build with `ha` made.
        try connection.execute(
            """
            CREATE TABLE skillbus_schema (version bigint NOT NULL);
            INSERT INTO skillbus_schema (version) VALUES (1);
            CREATE TABLE skillbus_rounds (grp text NOT NULL, id text NOT NULL, seq bigserial, body text NOT NULL,
                state text NOT NULL, idempotent boolean NOT NULL, document text, accepted bigint NOT NULL,
                finished bigint NOT NULL, bytes bigint NOT NULL, PRIMARY KEY (grp, id));
            CREATE TABLE skillbus_session_members (grp text NOT NULL, session text NOT NULL, agent text NOT NULL,
                role text NOT NULL, first bigint NOT NULL, last bigint NOT NULL, PRIMARY KEY (grp, session, agent));
            INSERT INTO skillbus_rounds VALUES ('g', 'old', DEFAULT, '{}', 'done', false, '{"status":"ok"}',
                (extract(epoch FROM now()) * 1000)::bigint, (extract(epoch FROM now()) * 1000)::bigint, 17);
            """)
        let opened = try CollectedJournal(group: postgres.group("g"))
        #expect(
            try await opened.accept("old")
                == .stored(roundID: Array("old".utf8), document: Array(#"{"status":"ok"}"#.utf8)))
        #expect(try await opened.accept("new") == .accepted(roundID: Array("new".utf8)))
        opened.journal.close()
        var rows: [String] = []
        try connection.run("epochs", "SELECT id || ' ' || epoch FROM skillbus_rounds ORDER BY id") {
            rows.append($0.text(0))
        }
        #expect(rows == ["new 1", "old 0"])
        #expect(try connection.integer("version", "SELECT max(version) FROM skillbus_schema") == 3)
    }

    @Test("a database of schema 2 gains the leader's dashboard (http) and the members table, its row kept")
    func migratesFromSchema2() async throws {
        let postgres = try ThrowawayPostgres()
        defer { postgres.remove() }
        let connection = try PostgresConnection(
            url: postgres.url, password: ThrowawayPostgres.password, applicationName: "test")
        defer { connection.close() }
        // The leaders table as schema 2 made it, with a leader in it.
        try connection.execute(
            """
            CREATE TABLE skillbus_schema (version bigint NOT NULL);
            INSERT INTO skillbus_schema (version) VALUES (1), (2);
            CREATE TABLE skillbus_leaders (grp text PRIMARY KEY, epoch bigint NOT NULL, name text NOT NULL,
                bus text NOT NULL, feed text NOT NULL, since bigint NOT NULL, lease_until timestamptz NOT NULL,
                lease_ms bigint NOT NULL, released boolean NOT NULL DEFAULT false, renewals bigint NOT NULL);
            INSERT INTO skillbus_leaders VALUES ('g', 7, 'a', 'tcp://a:1', 'tcp://a:2', 0, now(), 2000, false, 3);
            """)
        try PostgresJournalSchema.prepare(connection)
        #expect(try connection.integer("version", "SELECT max(version) FROM skillbus_schema") == 3)
        var rows: [String] = []
        try connection.run("leaders", "SELECT name || ' ' || epoch || ' ' || coalesce(http, 'none') FROM skillbus_leaders") {
            rows.append($0.text(0))
        }
        #expect(rows == ["a 7 none"])
        #expect(try connection.integer("members", "SELECT count(*) FROM skillbus_members") == 0)
        // A second coordinator preparing the same database changes nothing.
        try PostgresJournalSchema.prepare(connection)
        #expect(try connection.integer("version", "SELECT max(version) FROM skillbus_schema") == 3)
    }

    @Test("a database nobody listens on is refused at open, naming it")
    func unreachable() throws {
        let port = try unusedLoopbackPort()
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
