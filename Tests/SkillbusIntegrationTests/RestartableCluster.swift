import Foundation
@testable import Skillbus
import SkillbusTestSupport
import SkillbusZMQ
import Synchronization
import Testing

/// What the load of `fiveRestartsUnderLoad` got: every document by round id, and the calls that threw.
final class Tally: Sendable {
    let answers = Mutex<[String: [RoundDocument]]>([:])
    let failures = Mutex<[String]>([])
}

/// A coordinator that is killed and started again on the same endpoints and data directory, and workers whose
/// command skills `t.mark` and `t.idem` (the same, declared idempotent) append their `tag` to one file per
/// execution and then sleep `secs` seconds. Keyed, it runs with CURVE keys: worker keys w1 and w2 (their agents)
/// and a client key alice.
final class RestartableCluster: Sendable {
    let directory: String
    let bus: String
    let feed: String
    let journal: Bool
    let keys: TestKeys?
    /// With a database, the coordinator keeps its journal there (`ha`, group "restartable") instead of a data
    /// directory.
    let postgres: ThrowawayPostgres?
    private let current: Mutex<SkillbusProcess?>
    private let workers = Mutex<[SkillbusProcess]>([])

    init(context: ZMQContext, journal: Bool = true, keyed: Bool = false, postgres: ThrowawayPostgres? = nil) async throws {
        directory = NSTemporaryDirectory() + "skillbus-journal-\(UUID().uuidString.prefix(8))"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        let script = directory + "/mark.sh"
        try Data("#!/bin/sh\necho \"$1\" >> '\(directory)/marks'\nsleep \"$2\"\necho \"marked $1\"\n".utf8)
            .write(to: URL(fileURLWithPath: script))
        try FileManager.default.setAttributes([.posixPermissions: 0o755], ofItemAtPath: script)
        let endpoints = try freeEndpoints(2)
        (bus, feed) = (endpoints[0], endpoints[1])
        self.journal = journal
        self.postgres = postgres
        if let postgres {
            try Data(
                JSONValue.object([
                    "version": 1,
                    "ha": ["database": .string(postgres.url), "group": "restartable", "passwordEnv": "SKILLBUS_TEST_PG"],
                ]).serialized()
            ).write(to: URL(fileURLWithPath: directory + "/coordinator-ha.json"))
        }
        if keyed {
            let keys = try TestKeys(
                directory: directory + "/keys",
                keys: [("w1", .worker, ["w1"]), ("w2", .worker, ["w2"]), ("alice", .client, [])], feedRoles: [.worker])
            try keys.writeCoordinatorConfiguration(CoordinatorConfiguration(), to: directory + "/coordinator.json")
            self.keys = keys
        } else {
            keys = nil
        }
        current = Mutex(nil)
        try await startCoordinator()
    }

    var coordinator: SkillbusProcess? { current.withLock { $0 } }

    /// A cluster whose worker w1 was killed (-9) and whose coordinator was then restarted: nobody offers
    /// `t.mark` or `t.idem` now, and the new coordinator is in its startup grace.
    static func restartedWithoutWorkers(context: ZMQContext) async throws -> RestartableCluster {
        let cluster = try await RestartableCluster(context: context)
        do {
            let worker = try await cluster.startWorker("w1")
            worker.signal(SIGKILL)
            _ = try await worker.waitForExit()
            try await cluster.restart()
        } catch {
            cluster.terminate()
            throw error
        }
        return cluster
    }

    /// How many times `tag` was executed.
    func executions(_ tag: String) -> Int {
        let text = (try? String(contentsOfFile: directory + "/marks", encoding: .utf8)) ?? ""
        return text.split(separator: "\n").filter { $0 == tag }.count
    }

    /// Where the journal has `roundID` now (`running`, `done`, `interrupted`), read as a second connection
    /// beside the running coordinator (WAL lets a reader in while it writes); nil when it holds no such row.
    func journalState(_ roundID: String) -> String? {
        if let postgres {
            guard
                let connection = try? PostgresConnection(
                    url: postgres.url, password: ThrowawayPostgres.password, applicationName: "test")
            else { return nil }
            defer { connection.close() }
            var state: String?
            _ = try? connection.run(
                "state", "SELECT state FROM skillbus_rounds WHERE grp = 'restartable' AND id = $1", [.text(roundID)]
            ) { state = $0.text(0) }
            return state
        }
        let path = directory + "/data/" + JournalSchema.databaseName
        guard let database = try? SQLiteDatabase.open(path: path, migrations: JournalSchema.migrations) else {
            return nil
        }
        defer { database.close() }
        var state: String?
        try? database.rows("SELECT state FROM rounds WHERE id = ?", [.text(roundID)]) { state = $0.text(0) }
        return state
    }

    func startCoordinator() async throws {
        // Heartbeats of 500 ms and a 15 s grace: on a loaded machine a starved worker is not declared dead, and
        // one that takes long to come back still finds the requests that wait for it.
        var arguments = [
            "coordinator", "--bus", bus, "--feed", feed, "--heartbeat-ms", "500", "--startup-grace-ms", "15000",
        ]
        if postgres != nil {
            arguments += ["--config", directory + "/coordinator-ha.json"]
        } else if journal {
            arguments += ["--data-dir", directory + "/data"]
        }
        if keys != nil { arguments += ["--config", directory + "/coordinator.json"] }
        let process = try SkillbusProcess(
            arguments, name: "coordinator", environment: ["SKILLBUS_TEST_PG": ThrowawayPostgres.password])
        current.withLock { $0 = process }
        try await process.waitForLine("ready line") { $0.hasPrefix("skillbus coordinator ready:") }
        if postgres != nil {
            // A group's coordinator serves once it leads: after one lease when a killed leader's row is there.
            try await process.waitForLine("the lead", timeout: .seconds(15)) { $0.contains("leading group 'restartable'") }
        }
        if keys != nil {
            try await process.waitForLine("the keys line") { $0.contains("keys: CURVE on bus and feed") }
        }
    }

    /// kill -9 of the coordinator, waiting until it is gone.
    func kill() async throws {
        guard let process = coordinator else { return }
        process.signal(SIGKILL)
        _ = try await process.waitForExit(timeout: .seconds(10))
    }

    func restart() async throws {
        try await kill()
        try await startCoordinator()
    }

    /// Waits until the running coordinator has welcomed every one of `names`.
    func waitForWorkers(_ names: [String], timeout: Duration) async throws {
        guard let process = coordinator else { return }
        for name in names {
            try await process.waitForLine("\(name) to join", timeout: timeout) { $0.contains("agent '\(name)' joined") }
        }
    }

    @discardableResult
    func startWorker(_ name: String, capacity: Int = 4) async throws -> SkillbusProcess {
        let parameters: JSONValue = [["name": "tag", "type": "string"], ["name": "secs", "type": "string"]]
        let command: JSONValue = [.string(directory + "/mark.sh"), "{tag}", "{secs}"]
        let config = directory + "/\(name).json"
        try Data(
            JSONValue.object([
                "version": 1, "name": .string(name), "skills": ["echo"], "capacity": .number(Double(capacity)),
                "commands": [
                    ["identifier": "t.mark", "parameters": parameters, "command": command],
                    ["identifier": "t.idem", "parameters": parameters, "command": command],
                ],
            ]).serialized()
        ).write(to: URL(fileURLWithPath: config))
        let worker = try SkillbusProcess(
            ["worker", "--name", name, "--coordinator", bus, "--heartbeat-ms", "500", "--config", config,
             "--policy", #"t.idem={"idempotent":true}"#] + (keys?.arguments(name) ?? []), name: name)
        workers.withLock { $0.append(worker) }
        try await waitForWorkers([name], timeout: .seconds(20))
        return worker
    }

    /// A client on the bus, with the client key alice when keyed.
    func client(_ context: ZMQContext) async throws -> SkillbusClient {
        try await SkillbusClient.connect(endpoint: bus, context: context, credentials: try keys?.credentials("alice"))
    }

    /// Stops every process (SIGTERM) and removes the directory.
    func terminate() {
        for worker in workers.withLock({ $0 }) { worker.signal(SIGTERM) }
        coordinator?.signal(SIGTERM)
        try? FileManager.default.removeItem(atPath: directory)
    }
}
