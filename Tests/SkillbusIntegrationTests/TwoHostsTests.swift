import Foundation
import Skillbus
import Testing

/// Two hosts for real: two network namespaces joined by a veth pair, made for this run and deleted after it
/// (also when the test fails). The host's own interfaces are never touched: both ends of the pair are created
/// straight inside the namespaces.
final class TwoHosts: Sendable {
    static let ip = ["/usr/sbin/ip", "/sbin/ip", "/usr/bin/ip", "/bin/ip"].first {
        FileManager.default.isExecutableFile(atPath: $0)
    }

    /// Nil when this machine can make namespaces; else why not (printed as the skip reason).
    static let unavailable: String? = {
        guard getuid() == 0 else { return "needs root (ip netns add)" }
        guard let ip else { return "needs the ip command (Debian package iproute2)" }
        let probe = "skillbus-probe-\(getpid())"
        guard run(ip, ["netns", "add", probe]) == 0 else { return "cannot create a network namespace here" }
        _ = run(ip, ["netns", "del", probe])
        return nil
    }()

    let coordinatorSide: String
    let workerSide: String
    /// The veth ends: at most 15 characters each.
    let coordinatorLink: String
    let workerLink: String
    static let coordinatorAddress = "10.231.0.1"
    static let workerAddress = "10.231.0.2"

    init() throws {
        let tag = String(UUID().uuidString.replacingOccurrences(of: "-", with: "").prefix(8)).lowercased()
        coordinatorSide = "skillbus-\(getpid())-\(tag)-c"
        workerSide = "skillbus-\(getpid())-\(tag)-w"
        coordinatorLink = "skbc\(tag)"
        workerLink = "skbw\(tag)"
        try ip(["netns", "add", coordinatorSide])
        do {
            try ip(["netns", "add", workerSide])
            try ip([
                "link", "add", coordinatorLink, "netns", coordinatorSide, "type", "veth", "peer", "name", workerLink,
                "netns", workerSide,
            ])
            for (side, link, address) in [
                (coordinatorSide, coordinatorLink, Self.coordinatorAddress),
                (workerSide, workerLink, Self.workerAddress),
            ] {
                try ip(["-n", side, "addr", "add", address + "/24", "dev", link])
                try ip(["-n", side, "link", "set", link, "up"])
                try ip(["-n", side, "link", "set", "lo", "up"])
            }
        } catch {
            remove()
            throw error
        }
    }

    /// Deleting a namespace deletes its end of the pair, and with it the other end.
    func remove() {
        for side in [coordinatorSide, workerSide] { _ = Self.run(Self.ip ?? "ip", ["netns", "del", side]) }
    }

    func ip(_ arguments: [String]) throws {
        let status = Self.run(Self.ip ?? "ip", arguments)
        guard status == 0 else { throw IPFailed(arguments: arguments, status: status) }
    }

    /// `skillbus ARGS…` inside the namespace `side`.
    func skillbus(_ arguments: [String], in side: String, name: String) throws -> SkillbusProcess {
        try SkillbusProcess(
            arguments, name: name, executable: Self.ip ?? "ip", prefix: ["netns", "exec", side, skillbusBinary])
    }

    @discardableResult
    static func run(_ executable: String, _ arguments: [String]) -> Int32 {
        ChildProcess.run(executable, arguments)?.status ?? -1
    }
}

struct IPFailed: Error, CustomStringConvertible {
    let arguments: [String]
    let status: Int32
    var description: String { "ip \(arguments.joined(separator: " ")) exited \(status)" }
}

@Suite("Two hosts: network namespaces and a veth pair", .serialized, .timeLimit(.minutes(3)))
struct TwoHostsTests {
    @Test(
        "a worker on the other host serves a round over CURVE, loses the link, and comes back when it returns",
        .enabled(if: TwoHosts.unavailable == nil, Comment(rawValue: TwoHosts.unavailable ?? "")))
    func acrossTheLink() async throws {
        let hosts = try TwoHosts()
        defer { hosts.remove() }
        let keys = NSTemporaryDirectory() + "skillbus-two-hosts-\(getpid())-\(UUID().uuidString.prefix(8))"
        defer { try? FileManager.default.removeItem(atPath: keys) }
        // The keys as deploy/README.md makes them: one per side, the public ones handed over.
        for name in ["coordinator", "far", "me"] {
            #expect(try await runSkillbus(["keygen", name, "--dir", keys]).code == 0)
        }
        let bus = "tcp://\(TwoHosts.coordinatorAddress):5555"
        let config = """
            {"version": 1, "bus": "\(bus)", "feed": "tcp://\(TwoHosts.coordinatorAddress):5556", "heartbeatMs": 200,
             "security": {"secretKey": "coordinator.key", "feedRoles": ["worker", "admin"],
               "keys": [{"name": "far", "role": "worker", "agents": ["far"], "publicKey": "far.pub"},
                        {"name": "me", "role": "admin", "publicKey": "me.pub"}]}}
            """
        try config.write(toFile: keys + "/coordinator.json", atomically: true, encoding: .utf8)
        let coordinator = try hosts.skillbus(
            ["coordinator", "--config", keys + "/coordinator.json"], in: hosts.coordinatorSide, name: "coordinator")
        defer { coordinator.signal(SIGTERM) }
        try await coordinator.waitForLine("ready line") { $0.hasPrefix("skillbus coordinator ready:") }
        let worker = try hosts.skillbus(
            [
                "worker", "--name", "far", "--coordinator", bus, "--skills", "echo", "--heartbeat-ms", "200",
                "--server-key", keys + "/coordinator.pub", "--key", keys + "/far.key",
            ], in: hosts.workerSide, name: "far")
        defer { worker.signal(SIGTERM) }
        let joined: @Sendable (String) -> Bool = { $0.contains("agent 'far' joined") }
        try await coordinator.waitForLine("far to join across the link", where: joined)

        /// A round sent from the coordinator's host, run on the worker's.
        func round(_ text: String) async throws -> (code: Int32, document: JSONValue) {
            let client = try hosts.skillbus(
                [
                    "send", "echo", "text=\(text)", "--json", "--coordinator", bus, "--timeout", "5",
                    "--server-key", keys + "/coordinator.pub", "--key", keys + "/me.key",
                ], in: hosts.coordinatorSide, name: "send")
            let code = try await client.waitForExit()
            await client.waitForOutputEnd()
            return (code, (try? JSONValue(parsing: client.output.first { $0.hasPrefix("{") } ?? "")) ?? .null)
        }
        let (code, document) = try await round("across")
        #expect(code == 0 && document["agent"] == "far" && document["result"]?["text"] == "across", "\(document)")

        // Cut the link: the bus stops hearing the worker and drops it; a round finds nobody to run it.
        try hosts.ip(["-n", hosts.workerSide, "link", "set", hosts.workerLink, "down"])
        try await coordinator.waitForLine("far to be dropped", timeout: .seconds(20)) {
            $0.contains("agent 'far' left")
        }
        let (cutCode, cut) = try await round("nobody")
        #expect(cutCode != 0 && cut["error"]?["code"] == "unknown_skill", "\(cut)")

        // Restore it: the worker registers again by itself, and rounds cross again.
        try hosts.ip(["-n", hosts.workerSide, "link", "set", hosts.workerLink, "up"])
        try await waitUntil("far to register again", timeout: .seconds(40)) {
            coordinator.output.filter(joined).count >= 2
        }
        let (againCode, again) = try await round("again")
        #expect(againCode == 0 && again["agent"] == "far" && again["result"]?["text"] == "again", "\(again)")
    }
}
