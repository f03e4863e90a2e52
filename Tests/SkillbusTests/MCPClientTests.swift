import Foundation
import Synchronization
import Testing

@testable import Skillbus

/// An MCP server played by the test, in memory: it records what the client sends and answers through
/// `deliver`, so the client's deadlines, cancels and closing are tested with no process and no socket.
final class ScriptedTransport: MCPTransport {
    private struct State {
        var sent: [JSONRPCMessage] = []
        var receive: (@Sendable (JSONRPCMessage) -> Void)?
        var closed: (@Sendable (String) -> Void)?
    }
    private let state = Mutex(State())
    /// Answers the client's requests as they are sent; nil leaves them unanswered.
    let answer: @Sendable (String, JSONValue?) -> JSONValue?

    init(answer: @escaping @Sendable (String, JSONValue?) -> JSONValue? = { _, _ in nil }) {
        self.answer = answer
    }

    var sent: [JSONRPCMessage] { state.withLock { $0.sent } }

    func start(
        receive: @escaping @Sendable (JSONRPCMessage) -> Void, closed: @escaping @Sendable (String) -> Void
    ) async throws(SkillbusError) {
        state.withLock {
            $0.receive = receive
            $0.closed = closed
        }
    }

    func send(_ message: JSONRPCMessage) async throws(SkillbusError) {
        state.withLock { $0.sent.append(message) }
        if case .request(let id, let method, let params) = message {
            if method == "initialize" {
                deliver(.result(id: id, result: ["protocolVersion": "2025-06-18", "capabilities": [:]]))
            } else if let result = answer(method, params) {
                deliver(.result(id: id, result: result))
            }
        }
    }

    func deliver(_ message: JSONRPCMessage) { state.withLock { $0.receive }?(message) }

    func close() { end("closed") }

    func end(_ reason: String) {
        let closed = state.withLock { state in
            defer { state.closed = nil }
            return state.closed
        }
        closed?(reason)
    }
}

@Suite("MCP client")
struct MCPClientTests {
    func connected(_ transport: ScriptedTransport) async throws -> MCPClient {
        let client = MCPClient(
            server: "fake", transport: transport, logger: Logger(label: "test", level: .error), clientVersion: "1")
        try await client.connect(timeout: .seconds(5))
        return client
    }

    /// The notifications/cancelled the client sent, by request id; it sends them from a task of its own.
    func cancellations(_ transport: ScriptedTransport) async throws -> [JSONValue] {
        try await waitUntil("notifications/cancelled") {
            transport.sent.contains { if case .notification("notifications/cancelled", _) = $0 { true } else { false } }
        }
        return transport.sent.compactMap { message in
            if case .notification("notifications/cancelled", let params) = message { params } else { nil }
        }
    }

    @Test("handshake: initialize, then initialized with the agreed version; a call gets its answer")
    func handshake() async throws {
        let transport = ScriptedTransport { method, params in
            method == "tools/call"
                ? ["content": [["type": "text", "text": .string("got \(params?["name"]?.stringValue ?? "")")]]] : nil
        }
        let client = try await connected(transport)
        #expect(client.protocolVersion == "2025-06-18")
        #expect(transport.sent.count == 2)
        #expect(transport.sent.last == .notification(method: "notifications/initialized", params: nil))
        let answer = try await client.callTool("t", arguments: [:], deadline: .now + .seconds(5), progress: nil)
        #expect(answer["content"]?.arrayValue?.first?["text"] == "got t")
    }

    @Test("a deadline ends the call with timeout and tells the server")
    func deadline() async throws {
        let transport = ScriptedTransport()
        let client = try await connected(transport)
        await #expect {
            _ = try await client.callTool("slow", arguments: [:], deadline: .now + .milliseconds(100), progress: nil)
        } throws: { error in
            (error as? SkillbusError)?.code == .timeout
        }
        let cancelled = try await cancellations(transport)
        #expect(cancelled == [["requestId": 2, "reason": "timeout"]])
        // The late answer is dropped, and the client goes on.
        transport.deliver(.result(id: .number(2), result: ["content": []]))
        #expect(client.isOpen)
    }

    @Test("cancelling the calling task ends the call with cancelled and tells the server")
    func cancel() async throws {
        let transport = ScriptedTransport()
        let client = try await connected(transport)
        let call = Task {
            try await client.callTool("slow", arguments: [:], deadline: .now + .seconds(30), progress: nil)
        }
        try await waitUntil("the call to be sent") { transport.sent.count == 3 }
        call.cancel()
        await #expect {
            _ = try await call.value
        } throws: { error in
            (error as? SkillbusError)?.code == .cancelled
        }
        #expect(try await cancellations(transport) == [["requestId": 2, "reason": "cancelled"]])
    }

    @Test("progress reaches the call that asked for it, before its answer")
    func progress() async throws {
        let transport = ScriptedTransport()
        let client = try await connected(transport)
        let seen = Mutex<[String]>([])
        let call = Task {
            try await client.callTool(
                "count", arguments: [:], deadline: .now + .seconds(5),
                progress: { progress in seen.withLock { $0.append(progress.message ?? "") } })
        }
        try await waitUntil("the call to be sent") { transport.sent.count == 3 }
        for step in ["one", "two"] {
            transport.deliver(
                .notification(
                    method: "notifications/progress",
                    params: ["progressToken": 2, "progress": 1, "message": .string(step)]))
        }
        transport.deliver(.result(id: .number(2), result: ["content": []]))
        _ = try await call.value
        #expect(seen.withLock { $0 } == ["one", "two"])
    }

    @Test("the connection ending fails the calls that wait, with the reason, and later calls at once")
    func closing() async throws {
        let transport = ScriptedTransport()
        let client = try await connected(transport)
        let call = Task {
            try await client.callTool("slow", arguments: [:], deadline: .now + .seconds(30), progress: nil)
        }
        try await waitUntil("the call to be sent") { transport.sent.count == 3 }
        transport.end("it exited with code 3")
        for attempt in [call] {
            await #expect {
                _ = try await attempt.value
            } throws: { error in
                (error as? SkillbusError).map { $0.code == .skillFailed && $0.message.contains("exited with code 3") }
                    ?? false
            }
        }
        #expect(!client.isOpen)
        #expect(await client.waitUntilClosed() == "it exited with code 3")
        await #expect(throws: SkillbusError.self) {
            _ = try await client.callTool("t", arguments: [:], deadline: .now + .seconds(5), progress: nil)
        }
    }

    @Test("a JSON-RPC error answer to a call is skill_failed, or invalid_parameters for -32602")
    func refusals() async throws {
        let transport = ScriptedTransport()
        let client = try await connected(transport)
        for (code, expected) in [(-32602, SkillbusError.Code.invalidParameters), (-32603, .skillFailed)] {
            let call = Task {
                try await client.callTool("t", arguments: [:], deadline: .now + .seconds(5), progress: nil)
            }
            let before = transport.sent.count
            try await waitUntil("the call to be sent") { transport.sent.count == before + 1 }
            guard case .request(let id, _, _) = transport.sent.last else { return }
            transport.deliver(.error(id: id, JSONRPCError(code: code, message: "nope")))
            await #expect {
                _ = try await call.value
            } throws: { error in
                (error as? SkillbusError).map { $0.code == expected && $0.message.contains("nope") } ?? false
            }
        }
    }

    @Test("the server's ping is answered")
    func ping() async throws {
        let transport = ScriptedTransport()
        let client = try await connected(transport)
        transport.deliver(.request(id: .string("p1"), method: "ping", params: nil))
        try await waitUntil("the pong") { transport.sent.contains(.result(id: .string("p1"), result: [:])) }
        #expect(client.isOpen)
    }
}

/// Waits until `condition` holds (`eventually`), failing the test after `timeout`.
private func waitUntil(_ what: String, timeout: Duration = .seconds(5), _ condition: () -> Bool) async throws {
    guard await eventually(within: timeout, condition) else {
        Issue.record("timed out waiting for \(what)")
        throw CancellationError()
    }
}
