import Foundation
import Testing

@testable import Skillbus
@testable import SkillbusZMQ

@Suite("Keys and roles, without sockets")
struct SecurityTests {
    static func folder() -> String { NSTemporaryDirectory() + "skillbus-keys-\(UUID().uuidString)" }

    func key(_ name: String, _ role: AccessPolicy.Role, agents: [String] = []) throws -> AccessPolicy.Key {
        AccessPolicy.Key(name: name, role: role, publicKey: try CurveKeyPair.generate().publicKey, agents: agents)
    }

    @Test("key files: public 0644, secret 0600, never overwritten; the secret is refused when others may read it")
    func keyFiles() throws {
        let directory = Self.folder()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let written = try KeyFiles.generate(name: "w1", directory: directory)
        let mode = { (path: String) in
            (try FileManager.default.attributesOfItem(atPath: path)[.posixPermissions] as? Int) ?? -1
        }
        #expect(try mode(written.secretFile) == 0o600 && mode(written.publicFile) == 0o644)
        #expect(try KeyFiles.loadSecret(written.secretFile) == written.keys)
        #expect(try KeyFiles.loadPublic(written.publicFile) == written.keys.publicKey)
        #expect(try KeyFiles.loadPublic(written.keys.publicKey) == written.keys.publicKey)
        #expect(try KeyFiles.existingOrNew(name: "w1", directory: directory).keys == written.keys)
        func refusal(_ body: () throws -> Void) -> String {
            do {
                try body()
                return "accepted"
            } catch let error as SkillbusError {
                return error.code == .invalidConfiguration ? error.message : "\(error)"
            } catch {
                return "\(error)"
            }
        }
        #expect(refusal { _ = try KeyFiles.generate(name: "w1", directory: directory) }.contains("never overwritten"))
        #expect(refusal { _ = try KeyFiles.loadSecret(written.publicFile) }.contains("public key file"))
        chmod(written.secretFile, 0o640)
        #expect(refusal { _ = try KeyFiles.loadSecret(written.secretFile) }.contains("chmod 600"))
        chmod(written.secretFile, 0o600)
        // A secret key beside someone else's public key: the pair was mixed up.
        let other = try KeyFiles.generate(name: "w2", directory: directory)
        try FileManager.default.removeItem(atPath: written.publicFile)
        try FileManager.default.copyItem(atPath: other.publicFile, toPath: written.publicFile)
        #expect(refusal { _ = try KeyFiles.loadSecret(written.secretFile) }.contains("does not belong"))
        #expect(refusal { _ = try KeyFiles.loadPublic(directory + "/none.pub") }.contains("cannot read"))
        #expect(refusal { _ = try KeyFiles.generate(name: "a/b", directory: directory) }.contains("key name"))
    }

    @Test("a policy refuses what no lookup could repair: shared names, shared keys, a name on two keys")
    func policyChecks() throws {
        let w1 = try key("w1", .worker, agents: ["w1", "w1b"])
        _ = try AccessPolicy(keys: [w1, try key("alice", .client), try key("ops", .admin)])
        let cases: [([AccessPolicy.Key], String)] = [
            ([w1, try key("w1", .client)], "name is used twice"),
            ([w1, AccessPolicy.Key(name: "copy", role: .client, publicKey: w1.publicKey)], "same public key"),
            ([w1, try key("w2", .worker, agents: ["w1b"])], "already belongs to key 'w1'"),
            ([try key("w3", .worker)], "needs the agent names"),
            ([try key("alice", .client, agents: ["a"])], "only worker keys"),
            ([try key("w4", .worker, agents: ["bad name"])], "is invalid"),
            ([AccessPolicy.Key(name: "x", role: .client, publicKey: "not a key")], "no Z85 key"),
        ]
        for (keys, problem) in cases {
            #expect(throws: SkillbusError.self) { try AccessPolicy(keys: keys) }
            do {
                _ = try AccessPolicy(keys: keys)
            } catch {
                #expect(error.message.contains(problem), "\(error.message)")
            }
        }
    }

    @Test("ZAP: any known key on the bus; on the feed only the roles it admits; unknown keys nowhere")
    func authentication() throws {
        let (w1, alice) = (try key("w1", .worker, agents: ["w1"]), try key("alice", .client))
        let policy = try AccessPolicy(keys: [w1, alice], feedRoles: [.worker, .admin])
        func ask(_ domain: String, _ key: AccessPolicy.Key?, mechanism: String = "CURVE") -> ZAPVerdict {
            let credential = key.flatMap { Curve.decode($0.publicKey) } ?? Curve.decode(try! CurveKeyPair.generate().publicKey)!
            return policy.authenticate(
                ZAPRequest(domain: domain, address: "10.1.2.3", mechanism: mechanism, credentials: [credential]))
        }
        #expect(ask(AccessPolicy.busDomain, alice) == .accept(userID: "alice"))
        #expect(ask(AccessPolicy.busDomain, w1) == .accept(userID: "w1"))
        #expect(ask(AccessPolicy.feedDomain, w1) == .accept(userID: "w1"))
        #expect(ask(AccessPolicy.feedDomain, alice) == .refuse(reason: "key 'alice' (client) may not read the feed"))
        #expect(ask(AccessPolicy.busDomain, nil) == .refuse(reason: "unknown key"))
        #expect(ask("elsewhere", alice) == .refuse(reason: "unknown ZAP domain 'elsewhere'"))
        #expect(ask(AccessPolicy.busDomain, alice, mechanism: "NULL") == .refuse(reason: "not a CURVE connection (NULL)"))
    }

    @Test("worker messages only from worker keys, READY only with the key's own names")
    func workerMessages() throws {
        let policy = try AccessPolicy(keys: [
            try key("w1", .worker, agents: ["w1"]), try key("alice", .client), try key("ops", .admin),
        ])
        let ready = { (name: String) in WorkerMessage.ready(["name": .string(name), "capacity": 1, "skills": []]) }
        #expect(policy.refusal(of: ready("w1"), from: "w1") == nil)
        #expect(policy.refusal(of: .heartbeat(intervalMs: nil, registry: nil), from: "w1") == nil)
        #expect(policy.refusal(of: ready("w2"), from: "w1")?.code == .notAllowed)
        #expect(policy.refusal(of: ready("w1"), from: "alice")?.code == .notAllowed)
        #expect(policy.refusal(of: ready("w1"), from: "ops")?.code == .notAllowed)
        #expect(policy.refusal(of: .disconnect, from: "alice")?.message.contains("(client) may not send worker") == true)
        #expect(policy.refusal(of: ready("w1"), from: nil)?.code == .notAllowed)
        #expect(policy.refusal(of: ready("w1"), from: "nobody")?.code == .notAllowed)
    }

    @Test("client messages are every key's, but only an admin key cancels a round by id")
    func clientMessages() throws {
        let policy = try AccessPolicy(keys: [
            try key("w1", .worker, agents: ["w1"]), try key("alice", .client), try key("ops", .admin),
        ])
        for name in ["w1", "alice", "ops"] {
            #expect(policy.refusal(of: ClientMessage.listSkills(requestID: "r"), from: name) == nil)
            #expect(policy.refusal(of: ClientMessage.cancel(requestID: "r"), from: name) == nil)
        }
        #expect(policy.refusal(of: ClientMessage.cancelRound(requestID: "r", roundID: "x"), from: "ops") == nil)
        for name in ["w1", "alice"] {
            #expect(policy.refusal(of: ClientMessage.cancelRound(requestID: "r", roundID: "x"), from: name)?.code == .notAllowed)
        }
        #expect(policy.refusal(of: ClientMessage.listSkills(requestID: "r"), from: "nobody")?.code == .notAllowed)
    }

    @Test(
        "without keys only loopback binds",
        arguments: [
            ("tcp://127.0.0.1:5555", true), ("tcp://127.1.2.3:*", true), ("tcp://localhost:1", true),
            ("tcp://[::1]:5555", true), ("ipc:///tmp/bus", true), ("inproc://bus", true),
            ("tcp://0.0.0.0:5555", false), ("tcp://*:5555", false), ("tcp://10.0.0.5:5555", false),
            ("tcp://eth0:5555", false), ("tcp://[::]:5555", false), ("tcp://127.0.0.1.example.com:1", false),
            ("tcp://bus.example.com:5555", false),
        ])
    func loopback(endpoint: String, local: Bool) {
        #expect(BindCheck.isLoopback(endpoint) == local)
        var configuration = CoordinatorConfiguration()
        configuration.feed = endpoint
        #expect((BindCheck.problem(configuration) == nil) == local)
        configuration.insecure = true
        #expect(BindCheck.problem(configuration) == nil)
    }

    @Test("a coordinator config names its secret key and its keys, with files relative to the config")
    func configuration() throws {
        let directory = Self.folder()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let server = try KeyFiles.generate(name: "coordinator", directory: directory + "/keys")
        let worker = try KeyFiles.generate(name: "w1", directory: directory + "/keys")
        let alice = try CurveKeyPair.generate()
        func load(_ security: String) throws -> CoordinatorConfiguration {
            let path = directory + "/coordinator.json"
            try Data(#"{"version": 1, "bus": "tcp://0.0.0.0:5555", "security": \#(security)}"#.utf8)
                .write(to: URL(fileURLWithPath: path))
            return try CoordinatorConfiguration.load(path: path)
        }
        let loaded = try load(
            #"{"secretKey": "keys/coordinator.key", "feedRoles": ["worker"], "keys": ["#
                + #"{"name": "w1", "role": "worker", "agents": ["w1"], "publicKey": "keys/w1.pub"},"#
                + #"{"name": "alice", "role": "client", "publicKey": "\#(alice.publicKey)"}]}"#)
        let security = try #require(loaded.security)
        #expect(security.keys == server.keys && security.secretKeyFile == server.secretFile)
        #expect(security.policy.key(named: "w1")?.publicKey == worker.keys.publicKey)
        #expect(security.policy.key(named: "alice")?.role == .client)
        #expect(security.policy.feedRoles == [.worker])
        #expect(BindCheck.problem(loaded) == nil)
        // A key-shaped name of a file beside the config is that file, whatever the working directory.
        var named = try CurveKeyPair.generate()
        while named.publicKey.contains("/") { named = try CurveKeyPair.generate() }
        try Data((worker.keys.publicKey + "\n").utf8).write(to: URL(fileURLWithPath: directory + "/" + named.publicKey))
        let beside = try load(
            #"{"secretKey": "keys/coordinator.key", "keys": [{"name": "bob", "role": "client", "publicKey": "\#(named.publicKey)"}]}"#)
        #expect(beside.security?.policy.key(named: "bob")?.publicKey == worker.keys.publicKey)
        let cases = [
            (#"{"keys": []}"#, "security.secretKey: missing"),
            (#"{"secretKey": "keys/w1.pub"}"#, "public key file"),
            (#"{"secretKey": "keys/coordinator.key", "keys": [{"name": "a", "role": "root", "publicKey": "x"}]}"#, "no role"),
            (#"{"secretKey": "keys/coordinator.key", "keys": [{"name": "a", "role": "client", "publicKey": "keys/no.pub"}]}"#, "security.keys[0].publicKey"),
            (#"{"secretKey": "keys/coordinator.key", "feedRoles": ["everyone"]}"#, "security.feedRoles"),
            (#"{"secretKey": "keys/coordinator.key", "keys": [{"name": "a", "role": "worker", "publicKey": "keys/w1.pub"}]}"#, "needs the agent names"),
            (#"{"secretKey": "keys/coordinator.key", "users": []}"#, "unknown key"),
        ]
        for (section, problem) in cases {
            do {
                _ = try load(section)
                Issue.record("accepted \(section)")
            } catch let error as SkillbusError {
                #expect(error.code == .invalidConfiguration && error.message.contains(problem), "\(error.message)")
            }
        }
    }
}
