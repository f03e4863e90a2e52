import Foundation
import Skillbus
import SkillbusZMQ
import Testing

/// A coordinator with keys on 127.0.0.1: worker keys w1 (agent w1) and w2 (agents w2, py), a client key
/// alice, an admin key ops; the feed admits workers and admins only.
final class KeyedCluster: Sendable {
    let directory: String
    let keySet: TestKeys
    let cluster: TestCluster
    var bus: String { cluster.bus }
    var feed: String { cluster.feed }
    var coordinator: SkillbusProcess { cluster.coordinator }

    init() async throws {
        directory = NSTemporaryDirectory() + "skillbus-keyed-\(UUID().uuidString.prefix(8))"
        keySet = try TestKeys(
            directory: directory,
            keys: [("w1", .worker, ["w1"]), ("w2", .worker, ["w2", "py"]), ("alice", .client, []), ("ops", .admin, [])],
            feedRoles: [.worker, .admin])
        var configuration = CoordinatorConfiguration()
        configuration.heartbeatMs = 200
        let config = directory + "/coordinator.json"
        try keySet.writeCoordinatorConfiguration(configuration, to: config)
        cluster = try await TestCluster(coordinatorArguments: ["--config", config])
    }

    deinit { try? FileManager.default.removeItem(atPath: directory) }

    /// `--server-key … --key NAME.key`, or nothing for a peer without keys.
    func keys(_ name: String?) -> [String] { name.map(keySet.arguments) ?? [] }

    func environment(_ name: String) -> [String: String] { keySet.environment(name) }

    /// A worker process named `agent`, connecting with the key `key` (none when nil); not awaited.
    func worker(_ agent: String, key: String?) throws -> SkillbusProcess {
        try SkillbusProcess(
            ["worker", "--name", agent, "--coordinator", bus, "--heartbeat-ms", "200", "--skills", "echo"] + keys(key),
            name: "\(agent) (key \(key ?? "none"))")
    }

    /// How many coordinator lines satisfy `predicate` so far.
    func count(_ predicate: (String) -> Bool) -> Int { coordinator.output.filter(predicate).count }

    func send(_ key: String?, _ arguments: [String]) async throws -> (code: Int32, document: JSONValue) {
        let (code, output) = try await runSkillbus(["send"] + arguments + ["--coordinator", bus, "--json"] + keys(key))
        return (code, (try? JSONValue(parsing: output.first { $0.hasPrefix("{") } ?? "")) ?? .null)
    }

    func terminate() { cluster.terminate() }
}

@Suite("Keys and roles with real processes", .serialized, .timeLimit(.minutes(3)))
struct KeysAndRolesTests {
    @Test("a keyed worker serves a keyed client; a client without keys gets nothing, and the feed counts it")
    func keyedRound() async throws {
        let keyed = try await KeyedCluster()
        defer { keyed.terminate() }
        let watcher = try SkillbusProcess(
            ["feed", "--feed", keyed.feed, "--topic", "security.", "--json", "--count", "1"] + keyed.keys("ops"),
            name: "feed (ops)")
        defer { watcher.signal(SIGKILL) }
        let worker = try keyed.worker("w1", key: "w1")
        defer { worker.signal(SIGTERM) }
        try await keyed.coordinator.waitForLine("w1 to join") { $0.contains("agent 'w1' joined") }
        // Both ends of the bus are the own ZMTP engine, speaking CURVE, and say so.
        #expect(keyed.count { $0.contains("bus on tcp://127.0.0.1:") && $0.contains("(own ZMTP engine, CURVE)") } == 1)
        _ = try await worker.waitForLine("the worker's engine", timeout: .seconds(5)) {
            $0.contains("bus at \(keyed.bus) (own ZMTP engine, CURVE)")
        }
        let (code, document) = try await keyed.send("alice", ["echo", "text=secret"])
        #expect(code == 0 && document["agent"] == "w1" && document["result"]?["text"] == "secret")
        // The worker's replica reads the feed with its worker key: AGENTS shows it in step.
        try await waitUntil("w1's replica in sync") {
            let (_, output) = try await runSkillbus(["agents", "--json", "--coordinator", keyed.bus] + keyed.keys("ops"))
            let listing = try JSONValue(parsing: output.first { $0.hasPrefix("{") } ?? "{}")
            return listing["agents"]?.arrayValue?.first?["registryInSync"] == true
        }
        // Without keys: no handshake, so no answer (exit 3), and the refusal is on the feed.
        let (plainCode, _) = try await keyed.send(nil, ["echo", "text=hi", "--timeout", "1"])
        #expect(plainCode == 3)
        #expect(try await watcher.waitForExit() == 0)
        await watcher.waitForOutputEnd()
        let event = try JSONValue(parsing: watcher.output.first { $0.hasPrefix("{") } ?? "")
        #expect(event["type"] == "security.refused" && event["socket"] == "bus" && event["key"] == "")
        #expect((event["refused"]?.intValue ?? 0) >= 1)
        #expect(keyed.count { $0.contains("refused a connection to the bus") } >= 1)
    }

    @Test("rogues without keys, with a client key and with another worker's key never take w1; w1 keeps its name")
    func rogues() async throws {
        let keyed = try await KeyedCluster()
        defer { keyed.terminate() }
        var real = try keyed.worker("w1", key: "w1")
        try await keyed.coordinator.waitForLine("w1 to join") { $0.contains("agent 'w1' joined") }

        @Sendable func refused(_ agent: String, _ code: String) -> @Sendable (String) -> Bool {
            { $0.contains("registration of '\(agent)' refused: \(code)") }
        }
        // A client key may not send worker messages at all; a worker key registers only its own names.
        for (agent, key, code) in [("w1", "alice", "not_allowed"), ("w1", "ops", "not_allowed"), ("w1", "w2", "not_allowed"),
                                   ("w3", "w1", "not_allowed"), ("w1", "w1", "name_taken")] {
            let before = keyed.count(refused(agent, code))
            let rogue = try keyed.worker(agent, key: key)
            try await waitUntil("\(agent) with key \(key) to be refused \(code)") { keyed.count(refused(agent, code)) > before }
            rogue.signal(SIGKILL)
            _ = try await rogue.waitForExit()
        }
        // Without keys a rogue gets no further than the handshake.
        let handshakes = keyed.count { $0.contains("refused a connection to the bus") }
        let keyless = try keyed.worker("w1", key: nil)
        try await waitUntil("the keyless rogue to be refused") {
            keyed.count { $0.contains("refused a connection to the bus") } > handshakes
        }
        keyless.signal(SIGKILL)

        // The real worker is killed; rogues with a client key and without keys wait for the name, in vain.
        real.signal(SIGKILL)
        let clientRogue = try keyed.worker("w1", key: "alice")
        defer { clientRogue.signal(SIGKILL) }
        let keylessRogue = try keyed.worker("w1", key: nil)
        defer { keylessRogue.signal(SIGKILL) }
        try await keyed.coordinator.waitForLine("w1 to be declared dead") { $0.contains("agent 'w1' left") }
        let afterDeath = keyed.count(refused("w1", "not_allowed"))
        try await waitUntil("the client-key rogue to be refused after w1 died") {
            keyed.count(refused("w1", "not_allowed")) > afterDeath
        }
        #expect(keyed.count { $0.contains("agent 'w1' joined") } == 1)
        real = try keyed.worker("w1", key: "w1")
        defer { real.signal(SIGTERM) }
        try await waitUntil("w1 to come back") { keyed.count { $0.contains("agent 'w1' joined") } == 2 }
        let (code, document) = try await keyed.send("alice", ["echo", "text=mine", "--all"])
        #expect(code == 0 && document["result"]?.arrayValue?.count == 1)
        #expect(document["invocations"]?.arrayValue?.first?["agent"] == "w1")
    }

    @Test("the feed refuses a client key when its roles exclude clients; only an admin key cancels a round by id")
    func feedRoles() async throws {
        let keyed = try await KeyedCluster()
        defer { keyed.terminate() }
        let client = try SkillbusProcess(
            ["feed", "--feed", keyed.feed, "--count", "1"] + keyed.keys("alice"), name: "feed (alice)")
        defer { client.signal(SIGKILL) }
        try await keyed.coordinator.waitForLine("alice's feed refused") {
            $0.contains("refused a connection to the feed from 127.0.0.1: key 'alice' (client) may not read the feed")
        }
        // The watcher says it was refused and stops, rather than print nothing for ever.
        #expect(try await client.waitForExit() == 3)
        #expect(client.output.contains { $0.contains("refused this key on the feed") })
        let admin = try SkillbusProcess(
            ["feed", "--feed", keyed.feed, "--topic", "registry.heartbeat", "--count", "1"], name: "feed (ops)",
            environment: keyed.environment("ops"))
        #expect(try await admin.waitForExit() == 0)
        #expect(client.output.allSatisfy { !$0.contains("registry.heartbeat") })
        // A round-wide cancel is an admin's: a client key is refused, the admin key is answered.
        let (refused, lines) = try await runSkillbus(["cancel", "some-round", "--coordinator", keyed.bus] + keyed.keys("alice"))
        #expect(refused == 2 && lines.contains { $0.contains("not_allowed") })
        let (answered, _) = try await runSkillbus(["cancel", "some-round", "--coordinator", keyed.bus] + keyed.keys("ops"))
        #expect(answered == 1)
    }

    @Test("without keys a non-loopback bind is refused; --insecure binds and says so loudly")
    func insecure() async throws {
        let (code, output) = try await runSkillbus(["coordinator", "--bus", "tcp://0.0.0.0:*", "--feed", "tcp://127.0.0.1:*"])
        #expect(code == 2)
        #expect(output.contains { $0.contains("refusing to bind tcp://0.0.0.0:* without keys") })
        let coordinator = try SkillbusProcess(
            ["coordinator", "--bus", "tcp://0.0.0.0:*", "--feed", "tcp://127.0.0.1:*", "--insecure"], name: "insecure")
        defer { coordinator.signal(SIGKILL) }
        try await coordinator.waitForLine("the ready line") { $0.hasPrefix("skillbus coordinator ready:") }
        // The warning goes to standard error, which may arrive after the ready line on standard output.
        try await coordinator.waitForLine("the loud warning") { $0.contains("error coordinator: INSECURE") }
        coordinator.signal(SIGTERM)
        #expect(try await coordinator.waitForExit() == 0)
    }

    @Test("a worker whose key the coordinator does not know logs why and tries again; a client says it was refused")
    func refusedWorker() async throws {
        let keyed = try await KeyedCluster()
        defer { keyed.terminate() }
        let (made, _) = try await runSkillbus(["keygen", "mallory", "--dir", keyed.directory])
        try #require(made == 0)
        let worker = try keyed.worker("w1", key: "mallory")
        defer { worker.signal(SIGKILL) }
        @Sendable func refusal(_ line: String) -> Bool {
            line.contains("the coordinator refused this worker's key (unknown key)")
        }
        try await worker.waitForLine("the refusal") { refusal($0) }
        try await waitUntil("a second attempt, refused again") { worker.output.count(where: refusal) >= 2 }
        try await keyed.coordinator.waitForLine("the refusal on the coordinator's side") {
            $0.contains("refused a connection to the bus from 127.0.0.1: unknown key")
        }
        #expect(!keyed.coordinator.output.contains { $0.contains("agent 'w1' joined") })
        // A client (libzmq's DEALER) with that key: its monitor heard the refusal, and it says so.
        let (code, lines) = try await runSkillbus(
            ["send", "echo", "text=hi", "--timeout", "2", "--coordinator", keyed.bus] + keyed.keys("mallory"))
        #expect(code == 3)
        #expect(lines.contains { $0.contains("the coordinator at \(keyed.bus) refused this client's key") }, "\(lines)")
        #expect(!lines.contains { $0.contains("is it running?") })
    }

    @Test("keygen writes a pair once, and a Python peer (pyzmq) with keys is a client and a worker of the own engine")
    func keygenAndPython() async throws {
        let keyed = try await KeyedCluster()
        defer { keyed.terminate() }
        let (first, lines) = try await runSkillbus(["keygen", "carol", "--dir", keyed.directory])
        #expect(first == 0 && lines.contains { $0.hasPrefix("public key ") })
        let mode = try FileManager.default.attributesOfItem(atPath: keyed.directory + "/carol.key")[.posixPermissions] as? Int
        #expect(mode == 0o600)
        let (again, refusal) = try await runSkillbus(["keygen", "carol", "--dir", keyed.directory])
        #expect(again == 2 && refusal.contains { $0.contains("never overwritten") })

        let script = InteropTests.peerScript
        func python(_ arguments: [String], key: String, name: String) throws -> SkillbusProcess {
            try SkillbusProcess(
                ["-u", script] + arguments, name: name, environment: keyed.environment(key),
                executable: "/usr/bin/env", prefix: ["python3"])
        }
        // The bus these pyzmq peers (libzmq's CURVE) talk to is the own engine's.
        #expect(keyed.count { $0.contains("(own ZMTP engine, CURVE)") } == 1)
        let worker = try python(["worker", "--coordinator", keyed.bus, "--name", "py"], key: "w2", name: "python worker")
        defer { worker.signal(SIGKILL) }
        try await worker.waitForLine("python worker ready") { $0 == "python worker ready" }
        let (code, reversed) = try await keyed.send("alice", ["py.reverse", "text=curve"])
        #expect(code == 0 && reversed["agent"] == "py" && reversed["result"]?["text"] == "evruc")
        let client = try python(
            ["client", "--coordinator", keyed.bus, "py.reverse", "text=abc", "--timeout", "10"], key: "alice",
            name: "python client")
        #expect(try await client.waitForExit() == 0)
        await client.waitForOutputEnd()
        #expect(try JSONValue(parsing: client.output.first { $0.hasPrefix("{") } ?? "")["result"]?["text"] == "cba")
    }

    @Test("up --keys makes a key set once, runs the cluster on it, and tells a client what to export")
    func upWithKeys() async throws {
        let data = NSTemporaryDirectory() + "skillbus-up-keys-\(UUID().uuidString.prefix(8))"
        defer { try? FileManager.default.removeItem(atPath: data) }
        try FileManager.default.createDirectory(atPath: data, withIntermediateDirectories: true)
        let config = data + "/local.json"
        let text = #"{"version": 1, "dataDir": "\#(data)", "coordinator": {"bus": "tcp://127.0.0.1:*", "feed": "tcp://127.0.0.1:*"}, "workers": [{"name": "alpha", "skills": ["echo"]}]}"#
        try Data(text.utf8).write(to: URL(fileURLWithPath: config))
        let up = try SkillbusProcess(["up", "--config", config, "--keys"], name: "up --keys")
        defer { up.signal(SIGKILL) }
        let banner = try await up.waitForLine("the banner") { $0.hasPrefix("skillbus up: coordinator on ") }
        let bus = String(banner.dropFirst("skillbus up: coordinator on ".count).prefix { $0 != " " })
        let hint = try await up.waitForLine("the keys line") { $0.contains("a client needs: export ") }
        var environment: [String: String] = [:]
        for pair in hint.components(separatedBy: "export ").last?.split(separator: " ") ?? [] {
            let parts = pair.split(separator: "=", maxSplits: 1).map(String.init)
            if parts.count == 2 { environment[parts[0]] = parts[1] }
        }
        #expect(environment["SKILLBUS_KEY"] == data + "/keys/admin.key")
        try await up.waitForLine("alpha to join") { $0.hasPrefix("[coordinator]") && $0.contains("agent 'alpha' joined") }
        let (code, _) = try await runSkillbus(["send", "echo", "text=hi", "--coordinator", bus], environment: environment)
        #expect(code == 0)
        let (plain, _) = try await runSkillbus(["send", "echo", "text=hi", "--coordinator", bus, "--timeout", "1"])
        #expect(plain == 3)
        for name in ["coordinator", "admin", "client", "worker-alpha"] {
            #expect(FileManager.default.fileExists(atPath: data + "/keys/\(name).key"), "\(name)")
        }
        up.signal(SIGTERM)
        #expect(try await up.waitForExit(timeout: .seconds(30)) == 0)
    }
}
