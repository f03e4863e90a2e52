import Foundation
import Skillbus
import SkillbusZMQ
import Testing

/// What a new user meets first with `skillbus send`: a skill's own timeout, an absent coordinator, Ctrl-C.
@Suite("First contact with skillbus send", .serialized, .timeLimit(.minutes(2)))
struct FirstContactTests {
    /// Sleeps `ms`, and declares how long it may take when the client names no timeout.
    struct PatientSleep: AgentSkill {
        let identifier = "test.patient"
        let displayName = "Patient sleep"
        let description = "Sleeps; its own default timeout is 400 ms"
        let parameterSchema = ParameterSchema([ParameterField("ms", .integer, description: "Milliseconds")])
        var defaultTimeoutMs: Int? { 400 }

        func execute(parameters: [String: JSONValue], context: SkillExecutionContext) async throws -> SkillResult {
            try await Task.sleep(for: .milliseconds(parameters["ms"]?.intValue ?? 0))
            return .text("awake")
        }
    }

    @Test("send without --timeout sends none: the bus applies the skill's own default, not 15 s")
    func skillDefaultTimeout() async throws {
        let cluster = try await TestCluster()
        defer { cluster.terminate() }
        let context = try ZMQContext()
        let worker = try AgentWorker(
            options: .init(name: "patient", coordinator: cluster.bus), skills: [PatientSleep()], context: context,
            logger: Logger(label: "patient", level: .error))
        let running = Task { await worker.run() }
        defer { running.cancel() }
        try await cluster.coordinator.waitForLine("patient to join") { $0.contains("agent 'patient' joined") }

        let (quick, answer) = try await cluster.sendJSON(["test.patient", "ms:=50"])
        #expect(quick == 0, "\(answer)")
        // 2 s is within the 15 s the command used to send, and beyond the skill's 400 ms.
        let (slow, document) = try await cluster.sendJSON(["test.patient", "ms:=2000"])
        #expect(slow == 3)
        #expect(document["error"]?["code"] == "timeout")
        let message = document["error"]?["message"]?.stringValue ?? ""
        #expect(message.contains("within 400 ms"), "\(message)")
        // The user's own timeout still wins.
        let (given, _) = try await cluster.sendJSON(["test.patient", "ms:=800", "--timeout", "5"])
        #expect(given == 0)
    }

    @Test("an absent coordinator is reported within the connect timeout, or the user's, with the real figure")
    func unreachableFigures() async throws {
        let absent = "tcp://127.0.0.1:1"
        let (code, output) = try await runSkillbus(["send", "echo", "text=x", "--coordinator", absent])
        #expect(code == 3)
        #expect(output.contains { $0.contains("unreachable") && $0.contains("within 2.0 seconds") }, "\(output)")
        let (short, shortOutput) = try await runSkillbus([
            "send", "echo", "text=x", "--coordinator", absent, "--timeout", "0.5",
        ])
        #expect(short == 3)
        #expect(shortOutput.contains { $0.contains("within 0.5 seconds") }, "\(shortOutput)")
        let (given, givenOutput) = try await runSkillbus([
            "send", "echo", "text=x", "--coordinator", absent, "--connect-timeout", "0.3", "--json",
        ])
        #expect(given == 3)
        let document = try JSONValue(parsing: givenOutput.first { $0.hasPrefix("{") } ?? "null")
        #expect(document["error"]?["message"]?.stringValue?.contains("within 0.3 seconds") == true, "\(givenOutput)")
    }
}
