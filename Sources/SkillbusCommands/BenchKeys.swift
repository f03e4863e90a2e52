import Foundation
import Skillbus
import SkillbusZMQ

/// The key set of the bench's CURVE cluster: a coordinator config with keys, a key per worker, a client key.
public struct BenchKeys: Sendable {
    public let coordinatorConfig: String
    public let serverKey: String
    public let workerKeys: [String]
    public let client: CurveCredentials

    public init(directory: String, workers: Int) throws {
        let keys = directory + "/keys"
        let server = try KeyFiles.generate(name: "coordinator", directory: keys)
        let client = try KeyFiles.generate(name: "client", directory: keys)
        var entries = [AccessPolicy.Key(name: "client", role: .client, publicKey: client.keys.publicKey)]
        var workerKeys: [String] = []
        for index in 0..<workers {
            let worker = try KeyFiles.generate(name: "bench-\(index)", directory: keys)
            entries.append(
                AccessPolicy.Key(name: "bench-\(index)", role: .worker, publicKey: worker.keys.publicKey, agents: ["bench-\(index)"]))
            workerKeys.append(worker.secretFile)
        }
        var configuration = CoordinatorConfiguration()
        configuration.security = CoordinatorSecurity(
            secretKeyFile: server.secretFile, keys: server.keys, policy: try AccessPolicy(keys: entries))
        coordinatorConfig = directory + "/curve-coordinator.json"
        try Data(configuration.json.prettyString().utf8).write(to: URL(fileURLWithPath: coordinatorConfig))
        serverKey = server.publicFile
        self.workerKeys = workerKeys
        self.client = CurveCredentials(serverKey: server.keys.publicKey, keys: client.keys)
    }

    public func workerArguments(_ index: Int) -> [String] { ["--server-key", serverKey, "--key", workerKeys[index]] }
}
