import Foundation
import Synchronization

/// One MCP session with one server, over a transport: the handshake, requests matched with their answers,
/// progress handed to whoever asked, cancellation told to the server, and a notice when the server's tool
/// list changed. The protocol's state is `MCPSessionState`; this class does its I/O.
final class MCPClient: Sendable {
    typealias ProgressHandler = @Sendable (MCPSessionState.Progress) -> Void

    /// An answer, or why none will come.
    private enum Waiter {
        case waiting(CheckedContinuation<JSONValue, any Error>?, progress: ProgressHandler?)
        case answered(Result<JSONValue, any Error>)
    }

    private struct State {
        var session = MCPSessionState()
        var waiters: [Int: Waiter] = [:]
        var closedReason: String?
        var closeWatchers: [CheckedContinuation<String, Never>] = []
    }

    let server: String
    /// What `initialize` says we are (`clientInfo.version`).
    private let clientVersion: String
    private let transport: any MCPTransport
    private let logger: Logger
    private let state = Mutex(State())
    private let onToolsChanged: @Sendable () -> Void

    init(
        server: String, transport: any MCPTransport, logger: Logger, clientVersion: String,
        onToolsChanged: @escaping @Sendable () -> Void = {}
    ) {
        self.server = server
        self.clientVersion = clientVersion
        self.transport = transport
        self.logger = logger
        self.onToolsChanged = onToolsChanged
    }

    /// The protocol version agreed; nil before the handshake ends.
    var protocolVersion: String? {
        state.withLock { if case .ready(let version) = $0.session.phase { version } else { nil } }
    }

    /// Starts the transport and does the handshake: `initialize`, its answer checked, `initialized`.
    func connect(timeout: Duration) async throws {
        do {
            try await transport.start(
                receive: { [weak self] message in self?.receive(message) },
                closed: { [weak self] reason in self?.closed(reason) })
        } catch {
            closed(error.message)  // it never ran: nobody else will say it ended
            throw error
        }
        let request = state.withLock {
            $0.session.initializeRequest(clientName: "skillbus", clientVersion: clientVersion)
        }
        guard case .request(.number(let id), _, _) = request else { preconditionFailure("initialize is a request") }
        let answer: JSONValue
        let done: JSONRPCMessage
        do {
            answer = try await perform(id, request, progress: nil, deadline: .now + timeout, what: "initialize")
            done = try state.withLock { state throws(SkillbusError) in try state.session.acceptInitializeResult(answer)
            }
        } catch {
            // A stdio server is reaped before the error goes on: nothing of it outlives a stopping worker.
            transport.close()
            _ = await waitUntilClosed()
            throw error
        }
        if let version = protocolVersion { transport.negotiated(protocolVersion: version) }
        try await transport.send(done)
    }

    /// Sends a request and waits for its answer until `deadline`. Cancelling the calling task, or reaching
    /// the deadline, tells the server (`notifications/cancelled`) and throws `cancelled` or `timeout`.
    func request(
        _ method: String, params: JSONValue = [:], deadline: ContinuousClock.Instant,
        progress: ProgressHandler? = nil
    ) async throws -> JSONValue {
        let request = try state.withLock { state throws(SkillbusError) in
            if let reason = state.closedReason { throw closedError(reason) }
            let (id, message) = state.session.request(method, params: params, wantsProgress: progress != nil)
            // Registered with the request, so that a close in between still finds it.
            state.waiters[id] = .waiting(nil, progress: progress)
            return message
        }
        guard case .request(.number(let id), _, _) = request else { preconditionFailure("a request has an id") }
        return try await perform(id, request, progress: progress, deadline: deadline, what: method)
    }

    private func perform(
        _ id: Int, _ request: JSONRPCMessage, progress: ProgressHandler?, deadline: ContinuousClock.Instant,
        what: String
    ) async throws -> JSONValue {
        state.withLock { state in
            if state.waiters[id] == nil { state.waiters[id] = .waiting(nil, progress: progress) }
        }
        let expiry = Task { [weak self] in
            try await Task.sleep(until: deadline)
            self?.giveUp(
                id, SkillbusError(.timeout, "MCP server '\(self?.server ?? "")' did not answer \(what) in time"))
        }
        defer { expiry.cancel() }
        return try await withTaskCancellationHandler {
            do {
                try await transport.send(request)
            } catch {
                giveUp(id, error)
            }
            return try await withCheckedThrowingContinuation { continuation in
                let ready: Result<JSONValue, any Error>? = state.withLock { state in
                    switch state.waiters[id] {
                    case .answered(let result)?:
                        state.waiters[id] = nil
                        return result
                    case .waiting(_, let progress)?:
                        state.waiters[id] = .waiting(continuation, progress: progress)
                        return nil
                    case nil:
                        return .failure(SkillbusError(.internalError, "request \(id) has no waiter"))
                    }
                }
                if let ready { continuation.resume(with: ready) }
            }
        } onCancel: {
            giveUp(id, SkillbusError(.cancelled, "the call to MCP server '\(server)' was cancelled"))
        }
    }

    /// Ends the wait for request `id` with `error`, and tells the server when it still works on it.
    private func giveUp(_ id: Int, _ error: any Error) {
        let reason = (error as? SkillbusError)?.code == .timeout ? "timeout" : "cancelled"
        let (notice, continuation) = state.withLock { state in
            let notice = state.session.cancel(id: id, reason: reason)
            return (notice, settle(&state, id, .failure(error)))
        }
        continuation?()
        if let notice, state.withLock({ $0.closedReason == nil }) {
            Task { try? await transport.send(notice) }
        }
    }

    /// Records the end of request `id`; the resumption to run once the lock is let go.
    private func settle(_ state: inout State, _ id: Int, _ result: Result<JSONValue, any Error>) -> (() -> Void)? {
        switch state.waiters[id] {
        case .waiting(let continuation?, _)?:
            state.waiters[id] = nil
            return { continuation.resume(with: result) }
        case .waiting(nil, _)?:
            state.waiters[id] = .answered(result)
            return nil
        case .answered?, nil:
            return nil
        }
    }

    private func receive(_ message: JSONRPCMessage) {
        let (inbound, resume, progress) = state.withLock { state in
            let inbound = state.session.receive(message)
            switch inbound {
            case .answer(let id, let result):
                let mapped = result.mapError { error -> any Error in error }
                return (inbound, settle(&state, id, mapped), ProgressHandler?.none)
            case .progress(let id, _):
                if case .waiting(_, let handler)? = state.waiters[id] { return (inbound, nil, handler) }
                return (inbound, nil, nil)
            default:
                return (inbound, nil, nil)
            }
        }
        resume?()
        switch inbound {
        case .progress(_, let value): progress?(value)
        case .toolsChanged: onToolsChanged()
        case .reply(let answer): Task { try? await transport.send(answer) }
        case .ignored(let why): logger.debug("MCP server '\(server)': ignored \(why)")
        case .answer: break
        }
    }

    private func closed(_ reason: String) {
        let (resumes, watchers) = state.withLock { state in
            guard state.closedReason == nil else { return ([() -> Void](), [CheckedContinuation<String, Never>]()) }
            state.closedReason = reason
            let error = closedError(reason)
            _ = state.session.close(reason: reason)
            let resumes = Array(state.waiters.keys).compactMap { settle(&state, $0, .failure(error)) }
            defer { state.closeWatchers = [] }
            return (resumes, state.closeWatchers)
        }
        for resume in resumes { resume() }
        for watcher in watchers { watcher.resume(returning: reason) }
    }

    private func closedError(_ reason: String) -> SkillbusError {
        SkillbusError(.skillFailed, "MCP server '\(server)' is gone: \(reason)")
    }

    /// Whether the connection still works (its end may not have reached the mount yet).
    var isOpen: Bool { state.withLock { $0.closedReason == nil } }

    /// Returns, with why, once the connection has ended.
    func waitUntilClosed() async -> String {
        await withCheckedContinuation { continuation in
            let reason: String? = state.withLock { state in
                if let reason = state.closedReason { return reason }
                state.closeWatchers.append(continuation)
                return nil
            }
            if let reason { continuation.resume(returning: reason) }
        }
    }

    func close() { transport.close() }

    // MARK: Tools

    /// Every tool the server lists, following `nextCursor` (at most 100 pages).
    func listTools(deadline: ContinuousClock.Instant) async throws -> [MCPListedTool] {
        var tools: [MCPListedTool] = []
        var cursor: String?
        for _ in 0..<100 {
            let params: JSONValue = cursor.map { ["cursor": .string($0)] } ?? [:]
            let page = try await request("tools/list", params: params, deadline: deadline)
            guard let listed = page["tools"]?.arrayValue else {
                throw SkillbusError(
                    .malformedMessage, "MCP server '\(server)': its tools/list answer has no 'tools' array")
            }
            for item in listed {
                do {
                    tools.append(try MCPListedTool(json: item))
                } catch {
                    logger.warning("MCP server '\(server)': a tool is skipped: \(error)")
                }
            }
            guard let next = page["nextCursor"]?.stringValue, !next.isEmpty else { return tools }
            cursor = next
        }
        throw SkillbusError(.malformedMessage, "MCP server '\(server)': tools/list went on for more than 100 pages")
    }

    /// Calls a tool: its answer as the server sent it (`MCPListedTool.result` reads it). A JSON-RPC error answer
    /// (an unknown tool, arguments the server refused) is thrown as a SkillbusError.
    func callTool(
        _ name: String, arguments: [String: JSONValue], deadline: ContinuousClock.Instant, progress: ProgressHandler?
    ) async throws -> JSONValue {
        do {
            return try await request(
                "tools/call", params: ["name": .string(name), "arguments": .object(arguments)], deadline: deadline,
                progress: progress)
        } catch let error as JSONRPCError {
            let code: SkillbusError.Code =
                error.code == JSONRPCError.invalidParamsCode ? .invalidParameters : .skillFailed
            throw SkillbusError(
                code, "MCP server '\(server)' refused the call to '\(name)': \(error.message) (code \(error.code))")
        }
    }
}
