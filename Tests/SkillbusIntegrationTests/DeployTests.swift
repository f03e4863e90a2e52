import Foundation
import Skillbus
import Testing

/// The systemd units in deploy/ as shipped, and what a worker takes from the unit's `StateDirectory=`.
@Suite("deploy/: systemd units", .serialized, .timeLimit(.minutes(2)))
struct DeployTests {
    static let deploy = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent().appendingPathComponent("deploy").path
    static let analyzer = ["/usr/bin/systemd-analyze", "/bin/systemd-analyze"].first {
        FileManager.default.isExecutableFile(atPath: $0)
    }

    /// `systemd-analyze verify` must say nothing at all: it exits 0 even for unknown keys, which it only
    /// warns about. The units are copied with one change: `ExecStart` names the binary under test instead of
    /// /usr/local/bin/skillbus (which verify checks is executable, and which this machine need not have).
    @Test(
        "systemd-analyze verify is clean for the coordinator and a worker instance",
        .enabled(if: DeployTests.analyzer != nil, "systemd-analyze is not installed (Debian package systemd)"))
    func verify() async throws {
        let analyzer = try #require(Self.analyzer)
        let directory = NSTemporaryDirectory() + "skillbus-units-\(getpid())-\(UUID().uuidString.prefix(8))"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let units = try FileManager.default.contentsOfDirectory(atPath: Self.deploy).filter { $0.hasSuffix(".service") }
        #expect(Set(units) == ["skillbus-coordinator.service", "skillbus-worker@.service"])
        for unit in units {
            let text = try String(contentsOfFile: Self.deploy + "/" + unit, encoding: .utf8)
            #expect(text.contains("ExecStart=/usr/local/bin/skillbus "))
            try text.replacingOccurrences(of: "/usr/local/bin/skillbus", with: skillbusBinary)
                .write(toFile: directory + "/" + unit, atomically: true, encoding: .utf8)
        }
        let worker = try String(contentsOfFile: Self.deploy + "/skillbus-worker@.service", encoding: .utf8)
        #expect(worker.contains("StateDirectory=skillbus/%i") && worker.contains("DynamicUser=yes"))
        let check = try SkillbusProcess(
            ["verify", "skillbus-coordinator.service", "skillbus-worker@alpha.service"], name: "systemd-analyze",
            environment: ["SYSTEMD_UNIT_PATH": directory + ":"], executable: analyzer)
        #expect(try await check.waitForExit() == 0)
        await check.waitForOutputEnd()
        #expect(check.output.isEmpty, "systemd-analyze verify: \(check.output)")
    }

    /// The coordinator does not set deployment tuning itself: its unit does.
    @Test("the coordinator's unit runs it with glibc's malloc on huge pages")
    func hugePages() throws {
        let unit = try String(contentsOfFile: Self.deploy + "/skillbus-coordinator.service", encoding: .utf8)
        let lines = unit.split(separator: "\n").filter { $0.hasPrefix("Environment=") }
        #expect(lines == ["Environment=GLIBC_TUNABLES=glibc.malloc.hugetlb=1:glibc.malloc.arena_max=1"])
    }

    @Test("under systemd ($STATE_DIRECTORY) a worker keeps its context in context/ and reads files in files/")
    func stateDirectory() async throws {
        let state = NSTemporaryDirectory() + "skillbus-state-\(getpid())-\(UUID().uuidString.prefix(8))"
        try FileManager.default.createDirectory(atPath: state, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: state) }
        let cluster = try await TestCluster()
        defer { cluster.terminate() }
        let worker = try SkillbusProcess(
            ["worker", "--name", "unit", "--coordinator", cluster.bus, "--skills", "file.read,memory.set"],
            name: "unit", environment: ["STATE_DIRECTORY": state], directory: "/")
        defer { worker.signal(SIGTERM) }
        try await cluster.coordinator.waitForLine("unit to join") { $0.contains("agent 'unit' joined") }
        try await worker.waitForLine("its data directory") { $0.contains("context in \(state)/context") }
        // files/ was made for it; the working directory (/) is not its sandbox.
        try "from the unit".write(toFile: state + "/files/note.txt", atomically: true, encoding: .utf8)
        let (code, read) = try await cluster.sendJSON(["file.read", "path=note.txt"])
        #expect(code == 0 && read["result"]?["text"] == "from the unit", "\(read)")
        let (outside, refused) = try await cluster.sendJSON(["file.read", "path=etc/hostname"])
        #expect(outside != 0, "\(refused)")
        #expect(try await cluster.send(["memory.set", "key=k", "value:=1"]).code == 0)
        #expect(FileManager.default.fileExists(atPath: state + "/context/context.sqlite"))
    }
}
