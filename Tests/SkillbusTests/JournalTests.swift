import Foundation
import Synchronization
import Testing

@testable import Skillbus

/// The coordinator's round journal without sockets: the retention rule, the journal on a real SQLite file
/// (reopened as a restart would), and the state machine's side of it and of the startup grace.
@Suite("Round journal")
struct JournalTests {
    static let ms: UInt64 = 1_000_000

    /// A journal in `directory` whose answers are collected.
    final class Opened: Sendable {
        let journal: RoundJournal
        let collector = Collector()

        init(_ directory: String, limits: RoundJournal.Limits = .init()) throws {
            let collector = self.collector
            journal = try RoundJournal(directory: directory, limits: limits, logger: Logger(label: "test")) {
                collector.add($0)
            }
        }

        /// Submits `accept` and waits for its answer.
        func accept(
            _ id: String, body: String = "{}", idempotent: Bool = false, within limit: Duration = .seconds(10)
        ) async throws -> JournalAnswer {
            journal.submit([.accept(roundID: Array(id.utf8), body: Array(body.utf8), idempotent: idempotent)])
            var answer: JournalAnswer?
            let came = await eventually(within: limit) { () -> Bool in
                answer = collector.take(Array(id.utf8))
                return answer != nil
            }
            guard came, let answer else { throw TimedOutAnswer(id: id) }
            return answer
        }
    }

    final class Collector: Sendable {
        private let answers = Mutex<[JournalAnswer]>([])
        func add(_ batch: [JournalAnswer]) { answers.withLock { $0 += batch } }
        func take(_ id: [UInt8]) -> JournalAnswer? {
            answers.withLock { list in
                guard let index = list.firstIndex(where: { $0.roundID == id }) else { return nil }
                return list.remove(at: index)
            }
        }
    }

    struct TimedOutAnswer: Error { let id: String }

    @Test("retention drops rounds past the window, then the oldest while over the byte limit, and no more")
    func retentionRule() {
        let rule = JournalRetention(limitBytes: 250, retentionMs: 1000)
        let rows = (0..<5).map { JournalRetention.Row(id: "r\($0)", bytes: 100, finished: Int64(10_000 + $0 * 100)) }
        // At 10 250 every row is within the window: only the byte limit drops them, oldest first.
        let (byBytes, total) = rule.expired(rows, totalBytes: 500, nowMs: 10_250)
        #expect(byBytes.map(\.id) == ["r0", "r1", "r2"])
        #expect(total == 200)
        // Under the limit, only what is past the window goes: r0..r2 ended before 11 250 - 1000.
        let (byTime, left) = rule.expired(rows, totalBytes: 200, nowMs: 11_250)
        #expect(byTime.map(\.id) == ["r0", "r1", "r2"])
        #expect(left == -100)
        #expect(rule.expired(rows, totalBytes: 200, nowMs: 10_500).drop.isEmpty)
    }

    @Test("a restart keeps finished documents, answers a running round interrupted, and reruns an idempotent one")
    func recovery() async throws {
        try await withTemporaryDirectory { directory in
            do {
                let first = try Opened(directory)
                #expect(try await first.accept("done") == .accepted(roundID: Array("done".utf8)))
                first.journal.submit([.finish(roundID: Array("done".utf8), body: Array("{}".utf8), document: Array(#"{"status":"ok"}"#.utf8))])
                #expect(try await first.accept("crashed") == .accepted(roundID: Array("crashed".utf8)))
                #expect(try await first.accept("again", idempotent: true) == .accepted(roundID: Array("again".utf8)))
                first.journal.close()
            }
            let second = try Opened(directory)
            defer { second.journal.close() }
            #expect(second.journal.interruptedAtOpen.load(ordering: .relaxed) == 2)
            #expect(
                try await second.accept("done")
                    == .stored(roundID: Array("done".utf8), document: Array(#"{"status":"ok"}"#.utf8)))
            #expect(try await second.accept("done", body: #"{"other":1}"#) == .conflict(roundID: Array("done".utf8)))
            #expect(try await second.accept("crashed") == .interrupted(roundID: Array("crashed".utf8)))
            #expect(try await second.accept("again") == .accepted(roundID: Array("again".utf8)))
            // A forgotten round is new again.
            second.journal.submit([.forget(roundID: Array("crashed".utf8))])
            #expect(try await second.accept("crashed") == .accepted(roundID: Array("crashed".utf8)))
        }
    }

    @Test("a round that ran without a row gets it whole at its end: stored for its body, a conflict for another")
    func finishWithoutRow() async throws {
        try await withTemporaryDirectory { directory in
            let opened = try Opened(directory)
            defer { opened.journal.close() }
            let body = #"{"invoke":{"skill":"echo"}}"#
            opened.journal.submit([.finish(roundID: Array("fresh".utf8), body: Array(body.utf8), document: Array("{}".utf8))])
            #expect(try await opened.accept("fresh", body: body) == .stored(roundID: Array("fresh".utf8), document: Array("{}".utf8)))
            #expect(try await opened.accept("fresh", body: "{}") == .conflict(roundID: Array("fresh".utf8)))
        }
    }

    @Test("a finish alone is committed once it lingered; an accept is committed at once, with what lingers")
    func lingeringEntries() async throws {
        let document = Array(#"{"status":"ok"}"#.utf8)
        func finish(_ id: String) -> JournalEntry {
            .finish(roundID: Array(id.utf8), body: Array("{}".utf8), document: document)
        }
        try await withTemporaryDirectory { directory in
            let opened = try Opened(directory)
            defer { opened.journal.close() }
            opened.journal.submit([finish("alone")])
            #expect(await eventually { opened.journal.storedBytes.load(ordering: .relaxed) == document.count })
        }
        try await withTemporaryDirectory { directory in
            // A linger longer than the test: only the accept can bring the finish's commit.
            let opened = try Opened(directory, limits: RoundJournal.Limits(lingerMs: 600_000))
            defer { opened.journal.close() }
            opened.journal.submit([finish("early")])
            #expect(try await opened.accept("new") == .accepted(roundID: Array("new".utf8)))
            #expect(opened.journal.storedBytes.load(ordering: .relaxed) == document.count + 2)
        }
    }

    @Test("the journal stays within its byte limit by dropping the oldest ended rounds")
    func retentionByBytes() async throws {
        try await withTemporaryDirectory { directory in
            let limits = RoundJournal.Limits(bytes: 20_000, retentionMs: 600_000, sweepMs: 0)
            let opened = try Opened(directory, limits: limits)
            defer { opened.journal.close() }
            let document = [UInt8](repeating: UInt8(ascii: "x"), count: 1000)
            for index in 0..<100 {
                _ = try await opened.accept("r\(index)")
                opened.journal.submit([.finish(roundID: Array("r\(index)".utf8), body: Array("{}".utf8), document: document)])
            }
            let within = await eventually { opened.journal.storedBytes.load(ordering: .relaxed) <= 20_000 }
            #expect(within)
            // The newest is kept; the oldest is gone, so its id is new again.
            #expect(try await opened.accept("r99") == .stored(roundID: Array("r99".utf8), document: document))
            #expect(try await opened.accept("r0") == .accepted(roundID: Array("r0".utf8)))
        }
    }

    @Test("a round id is still answered from the journal after 100,000 other rounds (memory kept 10,000)")
    func manyRounds() async throws {
        try await withTemporaryDirectory { directory in
            let opened = try Opened(directory)
            defer { opened.journal.close() }
            let document = Array(#"{"status":"ok","result":{"text":"first"}}"#.utf8)
            _ = try await opened.accept("first")
            opened.journal.submit([.finish(roundID: Array("first".utf8), body: Array("{}".utf8), document: document)])
            for batch in 0..<100 {
                var entries: [JournalEntry] = []
                for index in 0..<1000 {
                    let id = Array("other-\(batch)-\(index)".utf8)
                    entries += [
                        .accept(roundID: id, body: Array("{}".utf8), idempotent: false),
                        .finish(roundID: id, body: Array("{}".utf8), document: document),
                    ]
                }
                opened.journal.submit(entries)
            }
            // Behind 200,000 entries: on a loaded machine that takes a while.
            let again = try await opened.accept("first", within: .seconds(120))
            #expect(again == .stored(roundID: Array("first".utf8), document: document))
            #expect(opened.journal.storedBytes.load(ordering: .relaxed) > 100_000 * document.count)
        }
    }

    @Test("a second coordinator on the same data directory is refused, naming the holder")
    func lockedDirectory() async throws {
        try await withTemporaryDirectory { directory in
            let first = try Opened(directory)
            defer { first.journal.close() }
            #expect(throws: SkillbusError.self) { _ = try Opened(directory) }
        }
    }

    // MARK: - The state machine's side

    func registration(_ name: String, skills: [String]) -> WorkerMessage {
        .ready([
            "name": .string(name), "capacity": 2, "heartbeatMs": 1000,
            "skills": .array(skills.map { ["identifier": .string($0), "parameters": []] }),
        ])
    }

    /// A coordinator's state at its start, with a startup grace of one second.
    func stateInGrace() -> CoordinatorState {
        var settings = CoordinatorState.Settings()
        settings.startupGraceMs = 1000
        var state = CoordinatorState(settings: settings)
        state.beginStartupGrace(now: 0)
        return state
    }

    func round(_ id: String, skill: String = "echo") -> RoundRequest {
        RoundRequest(
            requestID: "q-" + id, roundID: id, timeoutMs: 10_000,
            body: Array(#"{"invoke":{"skill":"\#(skill)","params":{}}}"#.utf8))
    }

    func documents(_ actions: [CoordinatorAction]) -> [JSONValue] {
        actions.compactMap {
            if case .toClient(_, .round(_, _, let document)) = $0 { return try? JSONValue(parsing: document) }
            return nil
        }
    }

    @Test("with a journal, a round starts only once the journal accepted it; interrupted is answered as such")
    func journaledRounds() {
        var settings = CoordinatorState.Settings()
        settings.journaled = true
        var state = CoordinatorState(settings: settings)
        let worker: PeerID = [0xA1]
        let client: PeerID = [0xC1]
        _ = state.handleWorker(registration("alpha", skills: ["echo"]), from: worker, now: 0)
        let sent = state.handleRound(round("r1"), from: client, now: 1)
        #expect(sent.count == 1)
        guard case .journal(.accept(let id, _, let idempotent)) = sent.first else {
            Issue.record("expected a journal accept, got \(sent)")
            return
        }
        #expect(id == Array("r1".utf8) && !idempotent)
        // The same round again while the journal writes is answered once, with the first.
        #expect(state.handleRound(round("r1"), from: client, now: 2).isEmpty)
        let started = state.journalAnswered([.accepted(roundID: Array("r1".utf8))], now: 3)
        #expect(started.contains { if case .toWorker(worker, .invoke) = $0 { true } else { false } })

        _ = state.handleRound(round("r2"), from: client, now: 4)
        let answered = state.journalAnswered([.interrupted(roundID: Array("r2".utf8))], now: 5)
        let document = documents(answered).first
        #expect(document?["status"]?.stringValue == "error")
        #expect(document?["error"]?["code"]?.stringValue == "interrupted")
    }

    @Test("in the startup grace a request for a skill nobody offers waits for it; after the grace it fails at once")
    func startupGrace() {
        var state = stateInGrace()
        let worker: PeerID = [0xA1]
        let client: PeerID = [0xC1]
        let request = InvokeRequest(
            requestID: "q1", roundID: "r1", skill: "echo", timeoutMs: 5000, parameters: Array("{}".utf8))
        #expect(state.handleInvoke(request, from: client, now: 10 * Self.ms).isEmpty)
        #expect(state.handleRound(round("r2"), from: client, now: 20 * Self.ms).isEmpty)
        // The same round resent while it waits joins it: answered once.
        #expect(state.handleRound(round("r2"), from: client, now: 30 * Self.ms).isEmpty)
        let joined = state.handleWorker(registration("alpha", skills: ["echo"]), from: worker, now: 500 * Self.ms)
        let invoked = joined.filter { if case .toWorker(worker, .invoke) = $0 { true } else { false } }
        #expect(invoked.count == 2)

        // After the grace: a skill nobody offers is refused at once.
        let late = InvokeRequest(
            requestID: "q3", roundID: "r3", skill: "nobody", timeoutMs: 5000, parameters: Array("{}".utf8))
        let refused = state.handleInvoke(late, from: client, now: 1500 * Self.ms)
        let payload = refused.compactMap { action -> String? in
            guard case .toClient(_, .reply(let reply)) = action else { return nil }
            return (try? JSONValue(parsing: reply.payload))?["code"]?.stringValue
        }
        #expect(payload == ["unknown_skill"])
    }

    @Test("a skill still missing when the grace ends fails unknown_skill at that tick")
    func graceEnds() {
        var state = stateInGrace()
        let client: PeerID = [0xC1]
        let request = InvokeRequest(
            requestID: "q1", roundID: "r1", skill: "nobody", timeoutMs: 60_000, parameters: Array("{}".utf8))
        #expect(state.handleInvoke(request, from: client, now: 0).isEmpty)
        #expect(state.tick(now: 500 * Self.ms).allSatisfy { if case .toClient = $0 { false } else { true } })
        let ended = state.tick(now: 1001 * Self.ms)
        let codes = ended.compactMap { action -> String? in
            guard case .toClient(_, .reply(let reply)) = action else { return nil }
            return (try? JSONValue(parsing: reply.payload))?["code"]?.stringValue
        }
        #expect(codes == ["unknown_skill"])
    }
}

@Suite("Round journal in PostgreSQL: a batch's text arrays")
struct PostgresTextArrayTests {
    @Test("each element is quoted, its quotes and backslashes escaped, anything else as it is")
    func escaping() {
        let elements = [#"{"text":"a \"b\" c\\d"}"#, "", "é,}{", "plain"].map { Array($0.utf8) }
        let array = String(decoding: PostgresJournalStore.textArray(elements), as: UTF8.self)
        #expect(array == #"{"{\"text\":\"a \\\"b\\\" c\\\\d\"}","","é,}{","plain"}"#)
        #expect(String(decoding: PostgresJournalStore.textArray([]), as: UTF8.self) == "{}")
    }
}
