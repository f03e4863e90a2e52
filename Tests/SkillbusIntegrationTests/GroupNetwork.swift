import Foundation
import Testing

/// Three hosts for a coordinator group's network-cut test: the database's and two coordinators' network namespaces,
/// each coordinator joined to the database's by a veth pair of its own. Clients and workers stay in this process's
/// namespace and reach the coordinators over `ipc://` endpoints (Unix sockets cross network namespaces), so a cut
/// link separates exactly one coordinator from the database and nothing else. Made for one test and deleted after
/// it; the host's own interfaces are never touched.
final class GroupNetwork: Sendable {
    /// A coordinator's host: its namespace, its end of the link and the database's, and both addresses.
    struct Host: Sendable {
        let namespace: String
        let link: String
        let databaseLink: String
        let address: String
        let databaseAddress: String
    }

    let database: String
    let hosts: [Host]

    init() throws {
        let tag = String(UUID().uuidString.replacingOccurrences(of: "-", with: "").prefix(6)).lowercased()
        database = "skillbus-\(getpid())-\(tag)-db"
        hosts = (1...2).map { index in
            Host(
                namespace: "skillbus-\(getpid())-\(tag)-c\(index)", link: "skc\(index)\(tag)",
                databaseLink: "skd\(index)\(tag)", address: "10.233.\(index).1", databaseAddress: "10.233.\(index).2")
        }
        try ip(["netns", "add", database])
        do {
            try ip(["-n", database, "link", "set", "lo", "up"])
            for host in hosts {
                try ip(["netns", "add", host.namespace])
                try ip([
                    "link", "add", host.link, "netns", host.namespace, "type", "veth", "peer", "name",
                    host.databaseLink,
                    "netns", database,
                ])
                for (side, link, address) in [
                    (host.namespace, host.link, host.address), (database, host.databaseLink, host.databaseAddress),
                ] {
                    try ip(["-n", side, "addr", "add", address + "/24", "dev", link])
                    try ip(["-n", side, "link", "set", link, "up"])
                }
                try ip(["-n", host.namespace, "link", "set", "lo", "up"])
            }
        } catch {
            remove()
            throw error
        }
    }

    /// Takes the database's end of `host`'s link down: from then on neither side hears the other, and nothing
    /// says so (no reset, no refusal), as when a switch or a cable fails.
    func cut(_ host: Host) throws { try ip(["-n", database, "link", "set", host.databaseLink, "down"]) }

    func heal(_ host: Host) throws { try ip(["-n", database, "link", "set", host.databaseLink, "up"]) }

    func remove() {
        for namespace in [database] + hosts.map(\.namespace) {
            _ = TwoHosts.run(TwoHosts.ip ?? "ip", ["netns", "del", namespace])
        }
    }

    func ip(_ arguments: [String]) throws {
        let status = TwoHosts.run(TwoHosts.ip ?? "ip", arguments)
        guard status == 0 else { throw IPFailed(arguments: arguments, status: status) }
    }

    /// `skillbus ARGS…` inside `host`'s namespace.
    func skillbus(_ arguments: [String], on host: Host, name: String) throws -> SkillbusProcess {
        try SkillbusProcess(
            arguments, name: name, executable: TwoHosts.ip ?? "ip",
            prefix: ["netns", "exec", host.namespace, skillbusBinary])
    }
}
