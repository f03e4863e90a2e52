import Foundation
import Skillbus
import SkillbusZMQ

/// CURVE keys for a test coordinator (PROTOCOL §12), written to `directory`: the coordinator's pair, one pair
/// per named key, and the `security` section that admits them.
struct TestKeys: Sendable {
    let directory: String
    let security: CoordinatorSecurity

    init(
        directory: String, keys: [(name: String, role: AccessPolicy.Role, agents: [String])],
        feedRoles: Set<AccessPolicy.Role>
    ) throws {
        var admitted: [AccessPolicy.Key] = []
        for (name, role, agents) in keys {
            let written = try KeyFiles.generate(name: name, directory: directory)
            admitted.append(AccessPolicy.Key(name: name, role: role, publicKey: written.keys.publicKey, agents: agents))
        }
        let server = try KeyFiles.generate(name: "coordinator", directory: directory)
        self.directory = directory
        security = CoordinatorSecurity(
            secretKeyFile: server.secretFile, keys: server.keys,
            policy: try AccessPolicy(keys: admitted, feedRoles: feedRoles))
    }

    /// Writes `configuration` with these keys as a coordinator config file at `path`.
    func writeCoordinatorConfiguration(_ configuration: CoordinatorConfiguration, to path: String) throws {
        var configuration = configuration
        configuration.security = security
        try Data(configuration.json.prettyString().utf8).write(to: URL(fileURLWithPath: path))
    }

    /// `--server-key … --key NAME.key`: how a command of key `name` connects.
    func arguments(_ name: String) -> [String] {
        ["--server-key", directory + "/coordinator.pub", "--key", directory + "/\(name).key"]
    }

    func environment(_ name: String) -> [String: String] {
        ["SKILLBUS_SERVER_KEY": directory + "/coordinator.pub", "SKILLBUS_KEY": directory + "/\(name).key"]
    }

    /// What a `SkillbusClient` of key `name` connects with.
    func credentials(_ name: String) throws -> CurveCredentials {
        try KeyFiles.credentials(serverKey: directory + "/coordinator.pub", key: directory + "/\(name).key")
    }
}
