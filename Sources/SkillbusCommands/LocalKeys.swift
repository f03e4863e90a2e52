import Foundation
import Skillbus
import SkillbusZMQ

/// `skillbus up --keys`: a key set for one machine, kept in the data folder so that every run uses the same
/// keys (a name stays bound to its key): the coordinator's, one per worker, one client and one admin key.
struct LocalKeys {
    let directory: String
    let server: KeyFiles.Written
    let client: KeyFiles.Written
    let admin: KeyFiles.Written

    init(directory: String) throws {
        self.directory = directory
        server = try KeyFiles.existingOrNew(name: "coordinator", directory: directory)
        client = try KeyFiles.existingOrNew(name: "client", directory: directory)
        admin = try KeyFiles.existingOrNew(name: "admin", directory: directory)
    }

    /// `cluster` with keys everywhere: the coordinator's policy knows each worker's key (named
    /// `worker-NAME`, owning the agent name NAME), the client and the admin key; each worker connects with
    /// its own. A worker added by a later reload gets a key the running coordinator does not know: it is
    /// refused until `up` starts again.
    func apply(to cluster: ClusterConfiguration) throws -> ClusterConfiguration {
        var cluster = cluster
        var keys = [
            AccessPolicy.Key(name: "client", role: .client, publicKey: client.keys.publicKey),
            AccessPolicy.Key(name: "admin", role: .admin, publicKey: admin.keys.publicKey),
        ]
        for index in cluster.workers.indices {
            let name = cluster.workers[index].name
            let worker = try KeyFiles.existingOrNew(name: "worker-\(name)", directory: directory)
            keys.append(AccessPolicy.Key(name: "worker-\(name)", role: .worker, publicKey: worker.keys.publicKey, agents: [name]))
            cluster.workers[index].serverKey = server.publicFile
            cluster.workers[index].key = worker.secretFile
        }
        cluster.coordinator.security = CoordinatorSecurity(
            secretKeyFile: server.secretFile, keys: server.keys, policy: try AccessPolicy(keys: keys))
        return cluster
    }

    /// How a person reaches this cluster from a shell.
    var environment: String {
        "SKILLBUS_SERVER_KEY=\(server.publicFile) SKILLBUS_KEY=\(admin.secretFile)"
    }
}
