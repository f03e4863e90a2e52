import Foundation
import Testing

@testable import Skillbus
@testable import SkillbusCommands
@testable import SkillbusZMQ

@Suite("Keys on the command line and in configs")
struct KeyOptionsTests {
    @Test("a coordinator config with keys and a worker config with key files survive being written out again")
    func roundTrips() throws {
        let directory = SecurityTests.folder()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let local = try LocalKeys(directory: directory + "/keys")
        var cluster = ClusterConfiguration()
        var worker = WorkerConfiguration()
        worker.name = "alpha"
        cluster.workers = [worker]
        cluster = try local.apply(to: cluster)
        let coordinatorFile = directory + "/coordinator.json"
        try Data(cluster.coordinator.json.prettyString().utf8).write(to: URL(fileURLWithPath: coordinatorFile))
        #expect(try CoordinatorConfiguration.load(path: coordinatorFile) == cluster.coordinator)
        let policy = try #require(cluster.coordinator.security?.policy)
        #expect(policy.key(named: "worker-alpha")?.agents == ["alpha"] && policy.key(named: "admin")?.role == .admin)
        let workerFile = directory + "/worker.json"
        try Data(cluster.workers[0].json.prettyString().utf8).write(to: URL(fileURLWithPath: workerFile))
        let loaded = try WorkerConfiguration.load(path: workerFile)
        #expect(loaded == cluster.workers[0] && loaded.key == directory + "/keys/worker-alpha.key")
        // Made once, then the same keys every run: a name stays bound to its key.
        let again = try LocalKeys(directory: directory + "/keys").apply(to: cluster)
        #expect(again.coordinator.security == cluster.coordinator.security)
    }

    @Test("a worker config's key files are found beside it; a server key may be the key itself")
    func workerKeyPaths() throws {
        let directory = SecurityTests.folder()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        let server = try CurveKeyPair.generate().publicKey
        let path = directory + "/worker.json"
        let text = #"{"version": 1, "name": "w", "serverKey": "\#(server)", "key": "keys/w.key"}"#
        try Data(text.utf8).write(to: URL(fileURLWithPath: path))
        let loaded = try WorkerConfiguration.load(path: path)
        #expect(loaded.serverKey == server && loaded.key == directory + "/keys/w.key")
    }

    @Test("--server-key and --key come together, from flags, config or environment")
    func credentials() throws {
        let directory = SecurityTests.folder()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let server = try KeyFiles.generate(name: "server", directory: directory)
        let own = try KeyFiles.generate(name: "me", directory: directory)
        let spec = SendCommand.spec
        let both = try spec.parse(["echo", "--server-key", server.publicFile, "--key", own.secretFile])
        #expect(try Defaults.credentials(both, spec) == CurveCredentials(serverKey: server.keys.publicKey, keys: own.keys))
        let configured = try Defaults.credentials(
            try spec.parse(["echo"]), spec, serverKey: server.keys.publicKey, key: own.secretFile)
        #expect(configured?.keys == own.keys)
        #expect(throws: UsageError.self) { try Defaults.credentials(try spec.parse(["echo", "--key", own.secretFile]), spec) }
        #expect(throws: UsageError.self) {
            try Defaults.credentials(try spec.parse(["echo", "--server-key", server.publicFile]), spec)
        }
        #expect(throws: SkillbusError.self) {
            try Defaults.credentials(try spec.parse(["echo", "--server-key", server.publicFile, "--key", own.publicFile]), spec)
        }
        if ProcessInfo.processInfo.environment["SKILLBUS_SERVER_KEY"] == nil,
            ProcessInfo.processInfo.environment["SKILLBUS_KEY"] == nil
        {
            #expect(try Defaults.credentials(try spec.parse(["echo"]), spec) == nil)
        }
    }

    @Test("every command that connects takes --server-key and --key")
    func everyCommand() {
        for command in SkillbusCLI.commands
        where command.spec.options.contains(where: { $0.name == "--coordinator" || $0.name == "--feed" })
            && !["coordinator", "up", "bench"].contains(command.spec.name)
        {
            let names = Set(command.spec.options.map(\.name))
            #expect(names.isSuperset(of: ["--server-key", "--key"]), "\(command.spec.name)")
        }
    }
}
