import Foundation
import SkillbusTestSupport
import SkillbusZMQ
import Synchronization
import Testing

@testable import Skillbus

/// A coordinator group across three hosts (network namespaces, `GroupNetwork`): the leader loses its link to
/// PostgreSQL, silently, while the standby keeps its own (issue 31). Rounds and requests go to both coordinators all
/// along, from raw DEALERs that follow nobody, so every answer is known to come from the coordinator it was sent to.
@Suite(
    "Coordinator group: the leader cut off from PostgreSQL", .serialized, .timeLimit(.minutes(3)),
    .enabled(
        if: TwoHosts.unavailable == nil && ThrowawayPostgres.unavailable == nil,
        Comment(rawValue: TwoHosts.unavailable ?? ThrowawayPostgres.unavailable ?? "")))
struct GroupNetworkCutTests {
    let context: ZMQContext

    init() throws { context = try ZMQContext() }

    /// One answer a coordinator gave to a round sent to it: when it came (this process's clock), and how.
    struct Answer: Sendable {
        let coordinator: String
        let round: String
        let at: ContinuousClock.Instant
        /// `ok`, an error code of the round document or REPLY (`storage_unavailable`, …), or the ERROR's
        /// (`not_leader`).
        let outcome: String
        var isRound: Bool { round.hasPrefix("cut-round-") }
    }

    /// Without `answerAfterCommit` the cut-off leader answers from memory until its lease runs out by its own clock;
    /// with it, nothing after its commits stall. Either way, not once the standby leads.
    @Test(
        "the cut-off leader answers nothing after the standby leads; the journal's epochs agree; back, it is a standby",
        arguments: [false, true])
    func cutOffLeader(answerAfterCommit: Bool) async throws {
        let network = try GroupNetwork()
        defer { network.remove() }
        let postgres = try ThrowawayPostgres(
            namespace: network.database, address: network.hosts.map(\.databaseAddress).joined(separator: ","))
        defer { postgres.remove() }
        let directory = NSTemporaryDirectory() + "skillbus-cut-\(UUID().uuidString.prefix(8))"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }

        // Each coordinator in its namespace, its bus and feed on Unix sockets (reachable from here), its journal
        // over its own link.
        let names = ["a", "b"]
        var buses: [String: String] = [:]
        func start(_ index: Int) throws -> SkillbusProcess {
            let (name, host) = (names[index], network.hosts[index])
            let config = directory + "/\(name).json"
            try Data(
                JSONValue.object([
                    "version": 1, "answerAfterCommit": .bool(answerAfterCommit),
                    "ha": [
                        "database": .string(
                            "postgresql://\(ThrowawayPostgres.user)@\(host.databaseAddress):\(postgres.port)/postgres"),
                        "group": "cut", "name": .string(name), "passwordEnv": "SKILLBUS_TEST_PG",
                    ],
                ]).serialized()
            ).write(to: URL(fileURLWithPath: config))
            let bus = "ipc://\(directory)/\(name).bus"
            buses[name] = bus
            return try SkillbusProcess(
                [
                    "coordinator", "--bus", bus, "--feed", "ipc://\(directory)/\(name).feed", "--config", config,
                    "--heartbeat-ms", "500",
                ],
                name: name, environment: ["SKILLBUS_TEST_PG": ThrowawayPostgres.password],
                executable: TwoHosts.ip ?? "ip", prefix: ["netns", "exec", host.namespace, skillbusBinary])
        }
        let leading: @Sendable (String) -> Bool = { $0.contains("leading group 'cut'") }
        var a = try start(0)
        defer { a.signal(SIGTERM) }
        try await a.waitForLine("a to lead", timeout: .seconds(20), where: leading)
        let b = try start(1)
        defer { b.signal(SIGTERM) }
        try await b.waitForLine("b's ready line") { $0.hasPrefix("skillbus coordinator ready:") }
        let worker = try SkillbusProcess(
            [
                "worker", "--name", "w1", "--coordinator", "\(buses["a"]!),\(buses["b"]!)", "--skills", "echo",
                "--heartbeat-ms", "200",
            ], name: "w1")
        defer { worker.signal(SIGTERM) }
        try await a.waitForLine("w1 to join a") { $0.contains("agent 'w1' joined") }

        // Rounds, and requests, to each coordinator, one at a time, until told to stop (at most 60 s).
        let answers = AnswerLog()
        func load(_ name: String, rounds: Bool) throws -> Task<Void, Never> {
            let peer = try RawPeer(buses[name]!, context: context)
            return Task {
                defer { peer.close() }
                let clock = ContinuousClock()
                let end = clock.now + .seconds(60)
                var index = 0
                while !answers.stopped.load(ordering: .relaxed), clock.now < end {
                    index += 1
                    let id = "cut-\(rounds ? "round" : "request")-\(name)-\(index)"
                    // ROUNDs are journaled before they run; REQUESTs are served from memory, as long as the
                    // coordinator's own gate lets it serve.
                    if rounds {
                        let body = RoundSpec.invoke(skill: "echo", parameters: ["text": .string(id)]).body(retries: nil)
                        let round = RoundRequest(requestID: id, roundID: id, timeoutMs: 1000, body: body.serialized())
                        peer.socket.send(ClientMessage.round(round).encoded())
                    } else {
                        let request = InvokeRequest(
                            requestID: id, roundID: id, skill: "echo", timeoutMs: 1000,
                            parameters: JSONValue.object(["text": .string(id)]).serialized())
                        peer.socket.send(ClientMessage.invoke(request).encoded())
                    }
                    let outcome = await Self.outcome(of: id, from: peer, until: clock.now + .seconds(2))
                    answers.list.withLock {
                        $0.append(Answer(coordinator: name, round: id, at: clock.now, outcome: outcome))
                    }
                    if outcome != "ok" { try? await Task.sleep(for: .milliseconds(20)) }
                }
            }
        }
        let loads = try ["a", "b"].flatMap { [try load($0, rounds: true), try load($0, rounds: false)] }
        let oks = answers.oks
        try await waitUntil("a to answer 20 rounds") { oks("a").count >= 20 }
        #expect(oks("b").isEmpty, "the standby answered a round before the cut")

        try network.cut(network.hosts[0])
        try await waitUntil("b to answer a round", timeout: .seconds(20)) { !oks("b").isEmpty }
        try await waitUntil("b to answer 10 rounds", timeout: .seconds(20)) { oks("b").count >= 10 }
        answers.stopped.store(true, ordering: .relaxed)
        for task in loads { await task.value }
        #expect(try await a.waitForExit(timeout: .seconds(20)) == 1, "\(a.output.suffix(6))")

        // The answers: a's last ok came before b's first.
        let lastA = try #require(oks("a").map(\.at).max())
        let firstB = try #require(oks("b").map(\.at).min())
        #expect(lastA < firstB, "a answered ok after b had begun to")
        let gap = firstB - lastA
        print(
            "a's last ok came \(gap.components.seconds * 1000 + gap.components.attoseconds / 1_000_000_000_000_000) ms before b's first"
        )

        // The journal: each round under the epoch of the coordinator that wrote it, the old leader's last write
        // before the new one's first, and every ok of the new leader there. Without answerAfterCommit the old
        // leader's oks of its last moments may be missing (PROTOCOL §3.5.9 says so); with it, none is.
        struct Row {
            let state: String
            let epoch: Int
            let accepted: Int64
            let finished: Int64
        }
        var journaled: [String: Row] = [:]
        for row in try query(
            postgres,
            "SELECT concat_ws(' ', id, state, epoch, accepted, finished) FROM skillbus_rounds "
                + "WHERE grp = 'cut' AND id LIKE 'cut-%'")
        {
            let parts = row.split(separator: " ").map(String.init)
            journaled[parts[0]] = Row(
                state: parts[1], epoch: Int(parts[2]) ?? 0, accepted: Int64(parts[3]) ?? 0,
                finished: Int64(parts[4]) ?? 0)
        }
        let oldRounds = oks("a").filter(\.isRound)
        let newRounds = oks("b").filter(\.isRound)
        let newEpochs = Set(newRounds.compactMap { journaled[$0.round]?.epoch })
        #expect(newEpochs.count == 1 && newRounds.allSatisfy { journaled[$0.round]?.state == "done" }, "\(newEpochs)")
        let newEpoch = newEpochs.first ?? 0
        // The old leader's oks were written by it, done; or, without answerAfterCommit, answered before their
        // documents were committed: left running at the cut, and made `interrupted` by the new leader, or (echo is
        // idempotent, and a round id the journal cannot hold starts without a row) not there at all. Sent again,
        // such a round runs again either way (PROTOCOL §3.5.9).
        let oldDone = oldRounds.compactMap { journaled[$0.round] }.filter { $0.state == "done" }
        let oldEpochs = Set(oldDone.map(\.epoch))
        #expect(oldEpochs.count == 1 && (oldEpochs.first ?? .max) < newEpoch, "\(oldEpochs) \(newEpoch)")
        for answer in oldRounds where journaled[answer.round]?.state != "done" {
            #expect(!answerAfterCommit, "\(answer.round) was answered ok after commit but is not done")
            if let row = journaled[answer.round] { #expect(row.state == "interrupted" && row.epoch == newEpoch) }
        }
        // Every write of the old epoch came before the first round the new leader accepted.
        let oldLast = journaled.values.filter { oldEpochs.contains($0.epoch) }.map { max($0.accepted, $0.finished) }
            .max()
        let newFirst = newRounds.compactMap { journaled[$0.round]?.accepted }.min()
        #expect((oldLast ?? 0) < (newFirst ?? .max), "the old leader wrote after the new one began")

        // Back on its link and started again, a is a standby naming b.
        try network.heal(network.hosts[0])
        // The link may take a moment to carry packets again, and a coordinator that cannot reach its database at
        // start exits (systemd starts it again, RestartSec=1): so does this test, a little faster.
        let restartDeadline = ContinuousClock.now + .seconds(30)
        while true {
            a = try start(0)
            let ready = try? await a.waitForLine("a's ready line") { $0.hasPrefix("skillbus coordinator ready:") }
            if ready != nil { break }
            guard ContinuousClock.now < restartDeadline else { throw TimedOut(what: "a to start again: \(a.output)") }
            try await Task.sleep(for: .milliseconds(200))
        }
        let peer = try RawPeer(buses["a"]!, context: context)
        defer { peer.close() }
        let body = RoundSpec.invoke(skill: "echo", parameters: ["text": "again"]).body(retries: nil)
        try await waitUntil("a to name b as the leader", timeout: .seconds(20)) {
            let round = RoundRequest(requestID: "again", roundID: "cut-again", timeoutMs: 1000, body: body.serialized())
            guard let reply = try? await peer.exchange(ClientMessage.round(round).encoded(), timeout: .seconds(2)),
                case .error(_, let error)? = try? BusToClientMessage.decode(fields: reply)
            else { return false }
            return error.code == .notLeader && error.leader?.name == "b"
        }
        #expect(!a.output.contains(where: leading))
    }

    final class AnswerLog: Sendable {
        let list = Mutex<[Answer]>([])
        let stopped = Atomic<Bool>(false)

        @Sendable func oks(_ name: String) -> [Answer] {
            list.withLock { $0.filter { $0.coordinator == name && $0.outcome == "ok" } }
        }
    }

    /// How the coordinator answered round or request `id` (an answer to an earlier round that came late is passed over):
    /// `ok`, the document's error code, the ERROR's code, or `no answer` by `deadline`.
    static func outcome(of id: String, from peer: RawPeer, until deadline: ContinuousClock.Instant) async -> String {
        while true {
            let left = deadline - .now
            guard left > .zero, let reply = try? await peer.next(timeout: left) else { return "no answer" }
            switch try? BusToClientMessage.decode(fields: reply) {
            case .round(let requestID, _, let document)? where requestID == Array(id.utf8):
                let parsed = try? RoundDocument(parsing: document)
                return parsed?.status == .ok ? "ok" : parsed?.error?.code.rawValue ?? "unreadable"
            case .reply(let reply)? where reply.requestID == id:
                return reply.status == .ok
                    ? "ok" : (try? JSONValue(parsing: reply.payload))?["code"]?.stringValue ?? "error"
            case .error(let requestID, let error)? where requestID == id: return error.code.rawValue
            default: continue
            }
        }
    }

    /// One SQL statement's rows, first column as text, over the database's own namespace's socket.
    func query(_ postgres: ThrowawayPostgres, _ sql: String) throws -> [String] {
        let connection = try PostgresConnection(
            url:
                "postgresql://\(ThrowawayPostgres.user)@/postgres?host=\(postgres.directory)/socket&port=\(postgres.port)",
            password: ThrowawayPostgres.password, applicationName: "test")
        defer { connection.close() }
        var rows: [String] = []
        try connection.run("q", sql) { rows.append($0.text(0)) }
        return rows
    }
}
