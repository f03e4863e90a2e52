import Foundation
import SkillbusTestSupport
import SkillbusZMQ
import Synchronization
import Testing

@testable import Skillbus

/// Two or more coordinators of one group (`ha`) on one throwaway PostgreSQL, as processes, and workers whose
/// command skill `t.mark` appends its tag to one file per execution (as in RestartableCluster). Each coordinator
/// is reached directly: following a refusal to the leader is the clients' and workers' side.
final class GroupCluster: Sendable {
    struct Member: Sendable {
        let bus: String
        let feed: String
        let config: String
    }

    let postgres: ThrowawayPostgres
    let directory: String
    /// Each member's endpoints: picked free before it starts, and picked again should another process take a port
    /// meanwhile (the tests of the suite run beside others).
    var members: [String: Member] { memberTable.withLock { $0 } }
    private let memberTable: Mutex<[String: Member]>
    private let context: ZMQContext
    private let running = Mutex<[String: SkillbusProcess]>([:])
    private let httpPorts = Mutex<[String: UInt16]>([:])

    func httpPort(_ name: String) -> UInt16 { httpPorts.withLock { $0[name] } ?? 0 }

    /// `/metrics` of coordinator `name`: the value of each sample without labels.
    func metrics(_ name: String) async -> [String: Double] {
        let port = httpPorts.withLock { $0[name] } ?? 0
        let text = await HTTPProbe.get(port, "/metrics")
        var values: [String: Double] = [:]
        for line in text.split(separator: "\n") where !line.hasPrefix("#") {
            let parts = line.split(separator: " ")
            if parts.count == 2, let value = Double(parts[1]) { values[String(parts[0])] = value }
        }
        return values
    }
    private let workers = Mutex<[SkillbusProcess]>([])

    /// The members that reach the database through a proxy the test can cut (`SilentProxy`).
    let proxies: [String: SilentProxy]

    /// `durable`: commits reach the disk, so a server stopped at once keeps every commit that was answered.
    init(
        _ names: [String], context: ZMQContext, answerAfterCommit: Bool = false, proxied: Set<String> = [],
        durable: Bool = false
    ) throws {
        postgres = try ThrowawayPostgres(durable: durable)
        var proxies: [String: SilentProxy] = [:]
        for name in proxied { proxies[name] = try SilentProxy(to: postgres.port) }
        self.proxies = proxies
        let (url, port) = (postgres.url, postgres.port)
        func database(_ name: String) -> String {
            proxies[name].map { url.replacingOccurrences(of: ":\(port)/", with: ":\($0.port)/") } ?? url
        }
        directory = NSTemporaryDirectory() + "skillbus-group-\(UUID().uuidString.prefix(8))"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        try Data("#!/bin/sh\necho \"$1\" >> '\(directory)/marks'\nsleep \"$2\"\necho \"marked $1\"\n".utf8)
            .write(to: URL(fileURLWithPath: directory + "/mark.sh"))
        try FileManager.default.setAttributes([.posixPermissions: 0o755], ofItemAtPath: directory + "/mark.sh")
        var members: [String: Member] = [:]
        for name in names {
            let endpoints = try freeEndpoints(2)
            let config = directory + "/\(name).json"
            try Data(
                JSONValue.object([
                    "version": 1, "answerAfterCommit": .bool(answerAfterCommit),
                    "ha": [
                        "database": .string(database(name)),
                        "group": "g1", "passwordEnv": "SKILLBUS_TEST_PG",
                        "name": .string(name),
                    ],
                ]).serialized()
            ).write(to: URL(fileURLWithPath: config))
            members[name] = Member(bus: endpoints[0], feed: endpoints[1], config: config)
        }
        memberTable = Mutex(members)
        self.context = context
    }

    func process(_ name: String) -> SkillbusProcess? { running.withLock { $0[name] } }

    /// Starts coordinator `name`; waits for its ready line, and with `leading` for it to take the lead.
    @discardableResult
    func start(_ name: String, leading: Bool = false) async throws -> SkillbusProcess {
        var attempts = 0
        while true {
            guard let member = members[name] else { throw TimedOut(what: "no member \(name)") }
            let process = try SkillbusProcess(
                [
                    "coordinator", "--bus", member.bus, "--feed", member.feed, "--heartbeat-ms", "500",
                    "--startup-grace-ms", "15000", "--config", member.config, "--http", "127.0.0.1:0",
                ],
                name: name, environment: ["SKILLBUS_TEST_PG": ThrowawayPostgres.password])
            running.withLock { $0[name] = process }
            let ready = try? await process.waitForLine("ready line") { $0.hasPrefix("skillbus coordinator ready:") }
            if let ready { return try await started(name, process, ready: ready, leading: leading) }
            await process.waitForOutputEnd()
            attempts += 1
            guard attempts < 3, process.output.contains(where: { $0.contains("Address already in use") }) else {
                throw TimedOut(what: "\(name)'s ready line; output: \(process.output)")
            }
            let endpoints = try freeEndpoints(2)
            memberTable.withLock { $0[name] = Member(bus: endpoints[0], feed: endpoints[1], config: member.config) }
        }
    }

    private func started(_ name: String, _ process: SkillbusProcess, ready: String, leading: Bool) async throws
        -> SkillbusProcess
    {
        let port = UInt16(ready.split(separator: ":").last ?? "") ?? 0
        httpPorts.withLock { $0[name] = port }
        if leading { try await waitForLead(name, timeout: .seconds(15)) }
        return process
    }

    func waitForLead(_ name: String, timeout: Duration) async throws {
        try await process(name)?.waitForLine("\(name) to lead", timeout: timeout) { $0.contains("leading group 'g1'") }
    }

    func leads(_ name: String) -> Bool { process(name)?.output.contains { $0.contains("leading group 'g1'") } ?? false }

    @discardableResult
    func startWorker(_ name: String, on coordinator: String, capacity: Int = 8) async throws -> SkillbusProcess {
        let parameters: JSONValue = [["name": "tag", "type": "string"], ["name": "secs", "type": "string"]]
        let command: JSONValue = [.string(directory + "/mark.sh"), "{tag}", "{secs}"]
        let config = directory + "/worker-\(name).json"
        try Data(
            JSONValue.object([
                "version": 1, "name": .string(name), "skills": ["echo"], "capacity": .number(Double(capacity)),
                "commands": [["identifier": "t.mark", "parameters": parameters, "command": command]],
            ]).serialized()
        ).write(to: URL(fileURLWithPath: config))
        let worker = try SkillbusProcess(
            [
                "worker", "--name", name, "--coordinator", members[coordinator]!.bus, "--heartbeat-ms", "500",
                "--config", config,
            ], name: name)
        workers.withLock { $0.append(worker) }
        try await process(coordinator)?.waitForLine("\(name) to join", timeout: .seconds(20)) {
            $0.contains("agent '\(name)' joined")
        }
        return worker
    }

    func client(_ name: String, _ context: ZMQContext) async throws -> SkillbusClient {
        try await SkillbusClient.connect(endpoint: members[name]!.bus, context: context)
    }

    /// What coordinator `name` answers an AGENTS sent from a raw DEALER (the reference client would follow a
    /// refusal to the leader): its `not_leader` refusal, or nil when it answered.
    func refusal(from name: String, _ context: ZMQContext) async throws -> SkillbusError? {
        let peer = try RawPeer(members[name]!.bus, context: context)
        defer { peer.close() }
        let answer = try await peer.exchange(
            ClientMessage.listAgents(requestID: "probe").encoded(), timeout: .seconds(2))
        guard case .error(_, let error) = try BusToClientMessage.decode(fields: answer) else { return nil }
        return error
    }

    func executions(_ tag: String) -> Int {
        let text = (try? String(contentsOfFile: directory + "/marks", encoding: .utf8)) ?? ""
        return text.split(separator: "\n").filter { $0 == tag }.count
    }

    /// One SQL statement's rows, first column as text, on a connection of the test's own.
    func query(_ sql: String) throws -> [String] {
        let connection = try PostgresConnection(
            url: postgres.url, password: ThrowawayPostgres.password, applicationName: "test")
        defer { connection.close() }
        var rows: [String] = []
        try connection.run("q", sql) { rows.append($0.text(0)) }
        return rows
    }

    /// When coordinator `name` logged the line that contains `text` (its log's own timestamp).
    func loggedAt(_ name: String, _ text: String) -> Date? {
        guard let line = process(name)?.output.first(where: { $0.contains(text) }) else { return nil }
        let formatter = ISO8601DateFormatter()
        formatter.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        return line.split(separator: " ").first.flatMap { formatter.date(from: String($0)) }
    }

    func terminate() {
        for proxy in proxies.values { proxy.close() }
        for worker in workers.withLock({ $0 }) { worker.signal(SIGTERM) }
        for process in running.withLock({ Array($0.values) }) { process.signal(SIGTERM) }
        postgres.remove()
        try? FileManager.default.removeItem(atPath: directory)
    }
}

final class Counter: Sendable {
    let value = Atomic<Int>(0)
}

/// Sends the rounds `ids` (each with the body `spec` makes for it) from `client`, 16 in flight, each id once, until
/// `next` passes the last id; every answer and every failure goes to `tally`.
func sendRounds(
    _ ids: [String], _ spec: @escaping @Sendable (String) -> RoundSpec, from client: SkillbusClient, timeout: Duration,
    next: Counter, into tally: Tally
) -> Task<Void, Never> {
    Task {
        await withTaskGroup(of: Void.self) { group in
            for _ in 0..<16 {
                group.addTask {
                    while true {
                        let index = next.value.add(1, ordering: .relaxed).oldValue
                        guard index < ids.count else { return }
                        do {
                            let document = try await client.round(
                                spec(ids[index]), roundID: ids[index], timeout: timeout)
                            tally.answers.withLock { $0[ids[index], default: []].append(document) }
                        } catch {
                            tally.failures.withLock { $0.append(ids[index]) }
                        }
                    }
                }
            }
        }
    }
}

/// Leader election, standbys, fencing and failover of a coordinator group (PROTOCOL §3.11, issue 31), with real
/// processes and a real PostgreSQL.
@Suite(
    "Coordinator group: leader and standbys", .serialized, .timeLimit(.minutes(4)),
    .enabled(if: ThrowawayPostgres.unavailable == nil, Comment(rawValue: ThrowawayPostgres.unavailable ?? "")))
struct LeaderElectionTests {
    let context: ZMQContext

    init() throws { context = try ZMQContext() }

    @Test("one of two coordinators leads; the other answers not_leader naming it, to clients and workers")
    func standbyRefuses() async throws {
        let cluster = try GroupCluster(["a", "b"], context: context)
        defer { cluster.terminate() }
        try await cluster.start("a", leading: true)
        try await cluster.start("b")
        let standby = try RawPeer(cluster.members["b"]!.bus, context: context)
        defer { standby.close() }
        let body = RoundSpec.invoke(skill: "echo", parameters: ["text": "hi"]).body(retries: nil).serialized()
        let refused = try await standby.exchange(
            ClientMessage.round(RoundRequest(requestID: "r1", roundID: "standby-1", body: body)).encoded())
        guard case .error(let requestID, let error) = try BusToClientMessage.decode(fields: refused) else {
            Issue.record("a standby answered a round: \(refused.map(text))")
            return
        }
        #expect(requestID == "r1" && error.code == .notLeader, "\(error)")
        #expect(error.leader?.name == "a" && error.leader?.bus == cluster.members["a"]!.bus, "\(error)")
        #expect(error.leader?.epoch == 1)
        // A batch (§2.2): each of its messages refused as if it had come alone, with its own request id.
        let listings = ["s1", "s2"].map { ClientMessage.listSkills(requestID: $0).encoded()[0] }
        standby.socket.send([Wire.batched(listings)])
        var refusals: [String] = []
        while refusals.count < 2 {
            let message = try await standby.next()
            let answers = text(message[1]) == "BATCH" ? message.dropFirst(2).map { busFields([$0]) } : [message]
            for answer in answers {
                guard case .error(let id, let error) = try BusToClientMessage.decode(fields: answer) else {
                    Issue.record("a standby answered a batched listing: \(answer.map(text))")
                    return
                }
                #expect(error.code == .notLeader)
                refusals.append(id)
            }
        }
        #expect(refusals == ["s1", "s2"])
        // The reference client, given the standby alone, follows the refusal to the leader (PROTOCOL §3.3).
        let following = try await cluster.client("b", context)
        defer { following.close() }
        let answered = try await following.round(
            .invoke(skill: "echo", parameters: ["text": "hi"]), timeout: .seconds(5))
        #expect(answered.error?.code != .notLeader && following.currentEndpoint == cluster.members["a"]!.bus)
        let worker = try RawPeer(cluster.members["b"]!.bus, context: context)
        defer { worker.close() }
        let answer = try await worker.exchange(
            WorkerMessage.ready(["name": "raw", "capacity": 1, "skills": []]).encoded())
        #expect(text(answer[1]) == "ERROR")
        let refusal = SkillbusError(json: try JSONValue(parsing: answer[2]))
        #expect(refusal.code == .notLeader && refusal.leader?.name == "a", "\(refusal)")
        #expect(!cluster.leads("b"))

        let leader = try await cluster.client("a", context)
        defer { leader.close() }
        let group = try await leader.agents()["group"]
        #expect(group?["leading"] == .bool(true) && group?["leader"]?["name"] == "a", "\(String(describing: group))")
        #expect(group?["leader"]?["epoch"] == 1 && group?["journalBacklog"] == 0)
        try await waitUntil("a's metrics to say it leads") { await cluster.metrics("a")["skillbus_group_leader"] == 1 }
        let leading = await cluster.metrics("a")
        #expect(leading["skillbus_group_leader"] == 1 && leading["skillbus_group_epoch"] == 1, "\(leading)")
        #expect(leading["skillbus_journal_backlog_rounds"] == 0)
        try await waitUntil("b's metrics to name epoch 1") { await cluster.metrics("b")["skillbus_group_epoch"] == 1 }
        #expect(await cluster.metrics("b")["skillbus_group_leader"] == 0)

        // A standby's feed stays silent (watchers subscribe to every feed of a group, PROTOCOL §7): while the
        // leader's publishes two registry heartbeats, the standby's publishes nothing.
        let feeds = [
            try await FeedSubscriber.connect(endpoint: cluster.members["a"]!.feed, topics: [], context: context),
            try await FeedSubscriber.connect(endpoint: cluster.members["b"]!.feed, topics: [], context: context),
        ]
        defer { for feed in feeds { feed.close() } }
        let heard = Counter()
        let standbyHeard = Mutex<[String]>([])
        let listening = [
            Task {
                for await event in feeds[0].events where event.topic == "registry.heartbeat" {
                    heard.value.add(1, ordering: .relaxed)
                }
            },
            Task { for await event in feeds[1].events { standbyHeard.withLock { $0.append(event.topic) } } },
        ]
        defer { for task in listening { task.cancel() } }
        try await waitUntil("two registry heartbeats on the leader's feed") {
            heard.value.load(ordering: .relaxed) >= 2
        }
        #expect(standbyHeard.withLock { $0 }.isEmpty, "the standby published \(standbyHeard.withLock { $0 })")

        // A leader stopped cleanly gives the lead up: the standby takes it at its next read, not a lease later.
        let stopped = ContinuousClock.now
        cluster.process("a")?.signal(SIGTERM)
        #expect(try await cluster.process("a")?.waitForExit() == 0)
        try await cluster.waitForLead("b", timeout: .seconds(5))
        let handover = ContinuousClock.now - stopped
        print("handover after SIGTERM of the leader: \(handover)")
        #expect(handover < .seconds(2), "\(handover)")
        #expect(cluster.process("a")?.output.contains { $0.contains("gave up the lead of group 'g1'") } == true)
        cluster.process("b")?.signal(SIGTERM)
        #expect(try await cluster.process("b")?.waitForExit() == 0)
    }

    @Test("kill -9 of the leader under load: the standby leads within 3 s; every ok is in the journal")
    func failoverUnderLoad() async throws {
        let cluster = try GroupCluster(["a", "b"], context: context, answerAfterCommit: true)
        defer { cluster.terminate() }
        try await cluster.start("a", leading: true)
        try await cluster.start("b")
        // b's feed is silent while b is a standby; its subscription is in place long before b takes over.
        let feed = try await FeedRecorder.start(
            feed: cluster.members["b"]!.feed, topics: ["coordinator."], silent: true)
        defer { feed.close() }
        for name in ["w1", "w2", "w3"] { try await cluster.startWorker(name, on: "a") }
        let client = try await cluster.client("a", context)
        defer { client.close() }
        let tally = Tally()
        let ids = (0..<600).map { "fo-\($0)" }
        let next = Counter()
        @Sendable func spec(_ id: String) -> RoundSpec {
            .invoke(skill: "t.mark", parameters: ["tag": .string(id), "secs": "0.05"])
        }
        let load = sendRounds(ids, spec, from: client, timeout: .seconds(4), next: next, into: tally)
        try await waitUntil("60 rounds answered") { tally.answers.withLock { $0.count } >= 60 }
        let killed = ContinuousClock.now
        cluster.process("a")?.signal(SIGKILL)
        // No round starts after the kill; those in flight fail (unreachable) and are resent below.
        next.value.store(ids.count, ordering: .relaxed)
        try await cluster.waitForLead("b", timeout: .seconds(10))
        let failover = ContinuousClock.now - killed
        print("failover after kill -9 of the leader: \(failover) (lease 2000 ms)")
        #expect(failover < .seconds(3), "failover took \(failover)")
        var cursor = 0
        let leader = try await feed.first(after: &cursor, within: .seconds(5)) { $0.topic == "coordinator.leader" }
        #expect(leader["epoch"] == 2 && leader["leader"]?["name"] == "b" && leader["group"] == "g1", "\(leader.body)")
        await load.value
        for name in ["w4", "w5", "w6"] { try await cluster.startWorker(name, on: "b") }
        let again = try await cluster.client("b", context)
        defer { again.close() }
        let answered = tally.answers.withLock { $0 }.compactMapValues(\.first)
        let oks = answered.filter { $0.value.status == .ok }
        let others = Set(answered.keys).union(tally.failures.withLock { $0 }).subtracting(oks.keys)
        #expect(oks.count >= 60)
        for (id, first) in oks {
            var resent = try await again.round(spec(id), roundID: id, timeout: .seconds(10))
            #expect(resent.stored, "\(id) was answered ok by the old leader but is not in the journal")
            resent.stored = false
            #expect(resent == first, "\(id) answered twice with different documents")
        }
        var interrupted = 0
        var ranAgain = 0
        // The old leader committed these, but its answer (sent after the commit) did not reach the client.
        var storedByOld: Set<String> = []
        for id in others.sorted() {
            let document = try await again.round(spec(id), roundID: id, timeout: .seconds(10))
            if document.stored { storedByOld.insert(id) }
            if document.error?.code == .interrupted {
                interrupted += 1
            } else {
                #expect(document.status == .ok, "\(id): \(String(describing: document.error))")
                ranAgain += 1
            }
        }
        // A round that ran was journaled as running first: never twice, whatever its answer.
        for id in ids { #expect(cluster.executions(id) <= 1, "\(id) ran \(cluster.executions(id)) times") }
        #expect(interrupted + ranAgain == others.count)
        print(
            "failover: \(oks.count) ok before the kill, all stored; \(interrupted) interrupted, \(ranAgain) run after it"
        )
        let epochs = try cluster.query("SELECT epoch || ' ' || name FROM skillbus_leaders WHERE grp = 'g1'")
        #expect(epochs == ["2 b"])
        // Which leader wrote each round last: the old one every round it answered ok or committed, the new one the
        // others (interrupted at its takeover, or run by it).
        var written: [String: String] = [:]
        for row in try cluster.query("SELECT id || ' ' || epoch FROM skillbus_rounds WHERE grp = 'g1'") {
            let parts = row.split(separator: " ")
            written[String(parts[0])] = String(parts[1])
        }
        for id in oks.keys {
            #expect(written[id] == "1", "\(id) answered ok by epoch 1, written by \(written[id] ?? "none")")
        }
        for id in others {
            let writer = storedByOld.contains(id) ? "1" : "2"
            #expect(written[id] == writer, "\(id) written by \(written[id] ?? "none"), not epoch \(writer)")
        }
    }

    @Test("two standbys race for a dead leader's lead: exactly one wins, and the other names it")
    func twoStandbysRace() async throws {
        let cluster = try GroupCluster(["a", "b", "c"], context: context)
        defer { cluster.terminate() }
        try await cluster.start("a", leading: true)
        try await cluster.start("b")
        try await cluster.start("c")
        cluster.process("a")?.signal(SIGKILL)
        _ = try await cluster.process("a")?.waitForExit()
        try await waitUntil("b or c to lead") { cluster.leads("b") || cluster.leads("c") }
        let (winner, loser) = cluster.leads("b") ? ("b", "c") : ("c", "b")
        try await waitUntil("\(loser) to name \(winner)") {
            try await cluster.refusal(from: loser, context)?.leader?.name == winner
        }
        // That something does not happen takes the time it would take: a lease on, the loser still does not lead,
        // and the row says the winner at epoch 2.
        try await Task.sleep(for: .milliseconds(2500))
        #expect(!cluster.leads(loser))
        #expect(
            try cluster.query("SELECT epoch || ' ' || name FROM skillbus_leaders WHERE grp = 'g1'") == ["2 \(winner)"])
    }

    @Test("fencing: a leader stopped past its lease never writes again and exits 1; started again it is a standby")
    func fencedLeaderExits() async throws {
        let cluster = try GroupCluster(["a", "b"], context: context)
        defer { cluster.terminate() }
        let old = try await cluster.start("a", leading: true)
        try await cluster.start("b")
        try await cluster.startWorker("w1", on: "a")
        let client = try await cluster.client("a", context)
        defer { client.close() }
        let before = try await client.round(
            .invoke(skill: "t.mark", parameters: ["tag": "f-1", "secs": "0"]), roundID: "f-1")
        #expect(before.status == .ok)
        old.signal(SIGSTOP)
        try await cluster.waitForLead("b", timeout: .seconds(10))
        let rowsAtTakeover = try cluster.query("SELECT count(*) FROM skillbus_rounds WHERE grp = 'g1'")
        old.signal(SIGCONT)
        let code = try await old.waitForExit(timeout: .seconds(10))
        #expect(code == 1, "\(old.output.suffix(40).joined(separator: "\n"))")
        #expect(old.output.contains { $0.contains("lost the lead") }, "\(old.output.suffix(10))")
        #expect(try cluster.query("SELECT count(*) FROM skillbus_rounds WHERE grp = 'g1'") == rowsAtTakeover)

        try await cluster.start("a")
        try await waitUntil("a to name b as the leader") {
            try await cluster.refusal(from: "a", context)?.leader?.name == "b"
        }
        #expect(!cluster.leads("a"))
    }

    @Test("a leader cut off from the database stops serving before the standby leads, and exits 1")
    func cutOffLeader() async throws {
        let cluster = try GroupCluster(["a", "b"], context: context, proxied: ["a"])
        defer { cluster.terminate() }
        let old = try await cluster.start("a", leading: true)
        try await cluster.start("b")
        try await cluster.startWorker("w1", on: "a")
        let client = try await cluster.client("a", context)
        defer { client.close() }
        let lastOK = Mutex<Date?>(nil)
        let oks = Counter()
        let stop = Counter()
        let load = Task {
            for index in 0..<5000 where stop.value.load(ordering: .relaxed) == 0 {
                let spec = RoundSpec.invoke(skill: "t.mark", parameters: ["tag": .string("cut-\(index)"), "secs": "0"])
                if (try? await client.round(spec, roundID: "cut-\(index)", timeout: .seconds(1)))?.status == .ok {
                    lastOK.withLock { $0 = Date() }
                    oks.value.add(1, ordering: .relaxed)
                } else {
                    try? await Task.sleep(for: .milliseconds(20))
                }
            }
        }
        try await waitUntil("20 rounds answered") { oks.value.load(ordering: .relaxed) >= 20 }
        cluster.proxies["a"]?.cut()
        try await cluster.waitForLead("b", timeout: .seconds(10))
        #expect(try await old.waitForExit(timeout: .seconds(15)) == 1)
        stop.value.store(1, ordering: .relaxed)
        await load.value
        #expect(old.output.contains { $0.contains("ran out: the database did not answer") }, "\(old.output.suffix(8))")
        let leading = try #require(cluster.loggedAt("b", "leading group 'g1'"))
        let last = try #require(lastOK.withLock { $0 })
        print(
            "the cut-off leader's last ok came \(Int(leading.timeIntervalSince(last) * 1000)) ms before the standby led"
        )
        #expect(last < leading, "the old leader answered ok after the new one led")
    }

    @Test("an epoch bumped behind the leader's back: it stops at its next renewal, exit 1")
    func epochBumped() async throws {
        let cluster = try GroupCluster(["a"], context: context)
        defer { cluster.terminate() }
        let leader = try await cluster.start("a", leading: true)
        _ = try cluster.query("UPDATE skillbus_leaders SET epoch = epoch + 1 WHERE grp = 'g1' RETURNING epoch")
        #expect(try await leader.waitForExit(timeout: .seconds(10)) == 1)
        #expect(
            leader.output.contains { $0.contains("another coordinator leads group 'g1'") },
            "\(leader.output.suffix(10))")
    }

    @Test("PostgreSQL restarted under load: the leader serves on, the journal catches up, nobody fails over")
    func databaseRestart() async throws {
        // Synchronous commits: the server is stopped at once (SIGQUIT), and what it answered must survive it.
        let cluster = try GroupCluster(["a", "b"], context: context, durable: true)
        defer { cluster.terminate() }
        try await cluster.start("a", leading: true)
        try await cluster.start("b")
        try await cluster.startWorker("w1", on: "a")
        let feed = try await FeedRecorder.start(feed: cluster.members["a"]!.feed, topics: ["coordinator."])
        defer { feed.close() }
        let client = try await cluster.client("a", context)
        defer { client.close() }
        func send(_ id: String) async throws -> RoundDocument {
            try await client.round(
                .invoke(skill: "t.mark", parameters: ["tag": .string(id), "secs": "0"]), roundID: id,
                timeout: .seconds(5))
        }
        // Eight rounds in flight all along: before the stop, while the server is down, and after it is back.
        let tally = Tally()
        let next = Counter()
        let stop = Counter()
        let load = Task {
            await withTaskGroup(of: Void.self) { group in
                for _ in 0..<8 {
                    group.addTask {
                        while stop.value.load(ordering: .relaxed) == 0 {
                            let index = next.value.add(1, ordering: .relaxed).oldValue
                            guard index < 3000 else { return }
                            let id = "pg-\(index)"
                            do {
                                let document = try await send(id)
                                tally.answers.withLock { $0[id] = [document] }
                            } catch {
                                tally.failures.withLock { $0.append("\(id): \(error)") }
                            }
                        }
                    }
                }
            }
        }
        try await waitUntil("40 rounds answered") { tally.answers.withLock { $0.count } >= 40 }
        cluster.postgres.stop()
        let answeredAtStop = tally.answers.withLock { $0.count }
        let backlog = Counter()
        try await waitUntil("40 more rounds answered while PostgreSQL is down") {
            if let rounds = try? await client.agents()["group"]?["journalBacklog"]?.intValue, rounds > 0 {
                backlog.value.store(rounds, ordering: .relaxed)
            }
            return tally.answers.withLock { $0.count } >= answeredAtStop + 40
        }
        #expect(backlog.value.load(ordering: .relaxed) > 0, "agents never said the journal was behind")
        try cluster.postgres.start()
        try await cluster.process("a")?.waitForLine("the journal to catch up", timeout: .seconds(15)) {
            $0.contains("the journal caught up")
        }
        let answeredAtCatchUp = tally.answers.withLock { $0.count }
        try await waitUntil("40 more rounds answered after it") {
            tally.answers.withLock { $0.count } >= answeredAtCatchUp + 40
        }
        stop.value.store(1, ordering: .relaxed)
        await load.value
        #expect(tally.failures.withLock { $0 }.isEmpty, "\(tally.failures.withLock { $0.prefix(5) })")
        let answered = tally.answers.withLock { $0 }
        #expect(answered.values.allSatisfy { $0.first?.status == .ok })
        print(
            "PostgreSQL restarted under load: \(answered.count) rounds ok, \(answeredAtCatchUp - answeredAtStop) while it was away"
        )
        var cursor = 0
        let behind = try await feed.first(after: &cursor, within: .seconds(5)) { $0.topic == "coordinator.journal" }
        #expect(behind["behind"] == true && (behind["rounds"]?.intValue ?? 0) > 0, "\(behind.body)")
        let caughtUp = try await feed.first(after: &cursor, within: .seconds(5)) { $0.topic == "coordinator.journal" }
        #expect(caughtUp["behind"] == false && caughtUp["rounds"] == 0, "\(caughtUp.body)")
        do {
            try await waitUntil("every round to be journaled as done") {
                (try? cluster.query("SELECT count(*) FROM skillbus_rounds WHERE grp = 'g1' AND state = 'done'"))
                    == ["\(answered.count)"]
            }
        } catch {
            let rows = try cluster.query(
                "SELECT id || ' ' || state FROM skillbus_rounds WHERE grp = 'g1' AND state <> 'done'")
            Issue.record("journal: \(rows)\n\(cluster.process("a")?.output.suffix(20).joined(separator: "\n") ?? "")")
        }
        for id in answered.keys { #expect(cluster.executions(id) == 1, "\(id) ran \(cluster.executions(id)) times") }
        #expect(try await client.agents()["group"]?["journalBacklog"] == 0)
        #expect(cluster.leads("a") && !cluster.leads("b"))
        #expect(try cluster.query("SELECT epoch FROM skillbus_leaders WHERE grp = 'g1'") == ["1"])
    }
}
