import Foundation
import Testing

@testable import Skillbus

/// The MCP client's protocol state, with no server: handshake, requests and answers, progress, cancel.
@Suite("MCP client state")
struct MCPClientStateTests {
    /// A session through its handshake, answered with `version`.
    func ready(version: String = "2025-11-25") throws -> MCPSessionState {
        var session = MCPSessionState()
        _ = session.initializeRequest(clientName: "skillbus", clientVersion: "1")
        _ = session.receive(.result(id: .number(1), result: ["protocolVersion": .string(version)]))
        _ = try session.acceptInitializeResult(["protocolVersion": .string(version)])
        return session
    }

    @Test("initialize offers the newest revision; the server's answer decides, within what we speak")
    func handshake() throws {
        var session = MCPSessionState()
        let request = session.initializeRequest(clientName: "skillbus", clientVersion: "0.1.0")
        guard case .request(.number(1), "initialize", let params?) = request else {
            Issue.record("not an initialize request: \(request)")
            return
        }
        #expect(params["protocolVersion"] == "2025-11-25" && params["clientInfo"]?["name"] == "skillbus")
        #expect(session.phase == .initializing(id: 1))
        #expect(
            session.receive(.result(id: .number(1), result: ["protocolVersion": "2025-03-26"]))
                == .answer(id: 1, .success(["protocolVersion": "2025-03-26"])))
        let initialized = try session.acceptInitializeResult(["protocolVersion": "2025-03-26"])
        #expect(initialized == .notification(method: "notifications/initialized", params: nil))
        #expect(session.phase == .ready(protocolVersion: "2025-03-26"))
    }

    @Test(
        "a revision we do not speak, or none, ends the session",
        arguments: [["protocolVersion": "1999-01-01"], [:]] as [JSONValue])
    func unsupported(answer: JSONValue) {
        var session = MCPSessionState()
        _ = session.initializeRequest(clientName: "skillbus", clientVersion: "1")
        #expect(throws: SkillbusError.self) { try session.acceptInitializeResult(answer) }
        if case .closed = session.phase {} else { Issue.record("still \(session.phase)") }
    }

    @Test("answers find their requests once; errors stay errors; strays are ignored")
    func answers() throws {
        var session = try ready()
        let (id, message) = session.request("tools/list", params: ["cursor": "c"])
        #expect(message == .request(id: .number(id), method: "tools/list", params: ["cursor": "c"]))
        #expect(
            session.receive(.result(id: .number(id), result: ["tools": []])) == .answer(id: id, .success(["tools": []]))
        )
        if case .ignored = session.receive(.result(id: .number(id), result: [:])) {
        } else {
            Issue.record("answered twice")
        }

        let (other, _) = session.request("tools/call", params: [:])
        let refusal = JSONRPCError.invalidParams("bad")
        #expect(session.receive(.error(id: .number(other), refusal)) == .answer(id: other, .failure(refusal)))
        if case .ignored = session.receive(.result(id: .string("x"), result: [:])) {} else { Issue.record("string id") }
    }

    @Test("progress carries the request's token and reaches only a request that asked for it")
    func progress() throws {
        var session = try ready()
        let (id, message) = session.request("tools/call", params: ["name": "t"], wantsProgress: true)
        guard case .request(_, _, let params?) = message else {
            Issue.record("no params")
            return
        }
        #expect(params["_meta"]?["progressToken"] == .number(Double(id)) && params["name"] == "t")
        let note = JSONRPCMessage.notification(
            method: "notifications/progress",
            params: ["progressToken": .number(Double(id)), "progress": 2, "total": 5, "message": "two"])
        #expect(session.receive(note) == .progress(id: id, .init(progress: 2, total: 5, message: "two")))

        let (quiet, _) = session.request("tools/call", params: [:])
        let stray = JSONRPCMessage.notification(
            method: "notifications/progress", params: ["progressToken": .number(Double(quiet)), "progress": 1])
        if case .ignored = session.receive(stray) {} else { Issue.record("progress for a request that did not ask") }
    }

    @Test("cancelling tells the server once; initialize cannot be cancelled")
    func cancel() throws {
        var session = try ready()
        let (id, _) = session.request("tools/call", params: [:])
        #expect(
            session.cancel(id: id, reason: "timeout")
                == .notification(
                    method: "notifications/cancelled", params: ["requestId": .number(Double(id)), "reason": "timeout"]))
        #expect(session.cancel(id: id, reason: "timeout") == nil)
        // A late answer to it is no answer.
        if case .ignored = session.receive(.result(id: .number(id), result: [:])) {
        } else {
            Issue.record("late answer")
        }

        var starting = MCPSessionState()
        _ = starting.initializeRequest(clientName: "skillbus", clientVersion: "1")
        #expect(starting.cancel(id: 1, reason: "timeout") == nil)
    }

    @Test("the server's ping is answered, other requests refused; list_changed only after the handshake")
    func serverMessages() throws {
        var fresh = MCPSessionState()
        _ = fresh.initializeRequest(clientName: "skillbus", clientVersion: "1")
        let changed = JSONRPCMessage.notification(method: "notifications/tools/list_changed", params: nil)
        if case .ignored = fresh.receive(changed) {} else { Issue.record("list_changed before ready") }

        var session = try ready()
        #expect(session.receive(changed) == .toolsChanged)
        #expect(
            session.receive(.request(id: .string("p"), method: "ping", params: nil))
                == .reply(.result(id: .string("p"), result: [:])))
        guard
            case .reply(.error(.number(9), let error)) = session.receive(
                .request(id: .number(9), method: "sampling/createMessage", params: [:]))
        else {
            Issue.record("sampling not refused")
            return
        }
        #expect(error.code == JSONRPCError.methodNotFoundCode)
    }

    @Test("closing fails every request still waiting")
    func close() throws {
        var session = try ready()
        let (a, _) = session.request("tools/list", params: [:])
        let (b, _) = session.request("tools/call", params: [:])
        #expect(session.close(reason: "gone") == [a, b])
        #expect(session.phase == .closed(reason: "gone") && session.pending.isEmpty)
    }
}
