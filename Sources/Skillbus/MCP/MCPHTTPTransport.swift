import Foundation
import Synchronization

/// MCP over Streamable HTTP (the 2025-03-26 revision on): every message we send is a POST to the one
/// endpoint; the server answers a notification with 202, a request with one JSON message or with an SSE
/// stream that carries the answer (and progress before it). The session id the server gives in its answer
/// to `initialize` goes on every later request, with the negotiated version; a 404 then means the session
/// is gone, and the connection ends (the mount connects again). A GET stream, when the server offers one,
/// brings what it sends unasked (`list_changed`). Bodies are read with libcurl (`HTTPStreamingCall`).
final class MCPHTTPTransport: MCPTransport {
    static let maxBodyBytes = 16 << 20
    /// How long a server may stay silent inside an answer; a call's own deadline is usually shorter.
    static let idleTimeout: Duration = .seconds(300)

    private struct State {
        var receive: (@Sendable (JSONRPCMessage) -> Void)?
        var closed: (@Sendable (String) -> Void)?
        var sessionID: String?
        var protocolVersion: String?
        var isClosed = false
        /// Answer streams being read, by the request's id: cancelled with the request, or at close.
        var calls: [JSONRPCID: HTTPStreamingCall] = [:]
        var listener: Task<Void, Never>?
    }

    private let server: String
    private let url: String
    private let bearerToken: String?
    private let logger: Logger
    private let state = Mutex(State())

    init(server: String, url: String, bearerToken: String?, logger: Logger) {
        self.server = server
        self.url = url
        self.bearerToken = bearerToken
        self.logger = logger
    }

    func start(
        receive: @escaping @Sendable (JSONRPCMessage) -> Void, closed: @escaping @Sendable (String) -> Void
    ) async throws(SkillbusError) {
        state.withLock { state in
            state.receive = receive
            state.closed = closed
        }
    }

    func negotiated(protocolVersion: String) {
        state.withLock { state in
            state.protocolVersion = protocolVersion
            state.listener = Task { [weak self] in await self?.listen() }
        }
    }

    private func request(method: String?, body: [UInt8]?, accept: String) -> HTTPStreamingCall.Request {
        var request = HTTPStreamingCall.Request(url: url, method: method, body: body)
        request.setValue(accept, forHTTPHeaderField: "Accept")
        if body != nil { request.setValue("application/json", forHTTPHeaderField: "Content-Type") }
        let (session, version) = state.withLock { ($0.sessionID, $0.protocolVersion) }
        if let session { request.setValue(session, forHTTPHeaderField: "Mcp-Session-Id") }
        if let version { request.setValue(version, forHTTPHeaderField: "MCP-Protocol-Version") }
        if let bearerToken { request.setValue("Bearer \(bearerToken)", forHTTPHeaderField: "Authorization") }
        return request
    }

    func send(_ message: JSONRPCMessage) async throws(SkillbusError) {
        guard state.withLock({ !$0.isClosed }) else {
            throw SkillbusError(.skillFailed, "MCP server '\(server)': the connection is closed")
        }
        if case .notification("notifications/cancelled", let params) = message,
            let id = params?["requestId"].flatMap(JSONRPCID.init(json:))
        {
            state.withLock { $0.calls.removeValue(forKey: id) }?.cancel()
        }
        let call: HTTPStreamingCall
        do {
            call = try await HTTPStreamingCall.start(
                request(method: "POST", body: message.encoded(), accept: "application/json, text/event-stream"),
                timeout: Self.idleTimeout, maxBodyBytes: Self.maxBodyBytes)
        } catch {
            let problem = "cannot reach \(url): \(error)"
            if case .request = message { fail(problem) }
            throw SkillbusError(.skillFailed, "MCP server '\(server)': \(problem)")
        }
        let status = call.response.statusCode
        if status == 404, state.withLock({ $0.sessionID != nil }) {
            call.cancel()
            fail("the server no longer knows our session (404)")
            throw SkillbusError(.skillFailed, "MCP server '\(server)': the session ended")
        }
        guard (200..<300).contains(status) else {
            let words = String(decoding: (try? await call.body(limit: 300)) ?? [], as: UTF8.self)
            throw SkillbusError(.skillFailed, "MCP server '\(server)' answered HTTP \(status): \(words)")
        }
        if case .request(_, "initialize", _) = message,
            let session = call.response.value(forHTTPHeaderField: "Mcp-Session-Id")
        {
            state.withLock { $0.sessionID = session }
        }
        guard status != 202, let id = message.id, case .request = message else {
            call.cancel()
            return
        }
        let type = call.response.value(forHTTPHeaderField: "Content-Type")?.lowercased() ?? ""
        state.withLock { $0.calls[id] = call }
        // The answer is read on: `send` returns once it is under way, as it does on a pipe.
        Task { [self] in
            defer { _ = state.withLock { $0.calls.removeValue(forKey: id) } }
            if type.hasPrefix("text/event-stream") {
                await readEvents(call, answering: id)
            } else {
                await readJSON(call, answering: id)
            }
        }
    }

    /// A JSON answer: the body, whole, is one message.
    private func readJSON(_ call: HTTPStreamingCall, answering id: JSONRPCID) async {
        do {
            let body = try await call.body(limit: Self.maxBodyBytes)
            deliver(try JSONRPCMessage(parsing: body))
        } catch let error as JSONRPCError {
            deliver(
                .error(
                    id: id, JSONRPCError(code: error.code, message: "its answer is no MCP message: \(error.message)")))
        } catch {
            deliver(.error(id: id, .internalError("its answer broke off: \(error)")))
        }
    }

    /// An SSE answer: each event's data is one message; the stream ends after the answer.
    private func readEvents(_ call: HTTPStreamingCall, answering id: JSONRPCID?) async {
        var events = ServerSentEvents()
        do {
            while let piece = try await call.next() {
                for event in events.receive(piece) { deliverEvent(event, answering: id) }
            }
            if let event = events.finish() { deliverEvent(event, answering: id) }
            if let id {
                // Ended without the answer: the call would otherwise wait for its deadline.
                deliver(
                    .error(id: id, .internalError("the server ended its answer stream without an answer"))
                )
            }
        } catch {
            if let id, error != .cancelled {
                deliver(.error(id: id, .internalError("its answer stream broke off: \(error)")))
            }
        }
    }

    private func deliverEvent(_ event: ServerSentEvents.Event, answering id: JSONRPCID?) {
        guard event.type == "message", !event.data.isEmpty else { return }
        do throws(JSONRPCError) {
            deliver(try JSONRPCMessage(parsing: Array(event.data.utf8)))
        } catch {
            guard let id else { return logger.warning("MCP server '\(server)': an event is no MCP message: \(error)") }
            deliver(
                .error(
                    id: id, JSONRPCError(code: error.code, message: "its answer is no MCP message: \(error.message)")))
        }
    }

    private func deliver(_ message: JSONRPCMessage) {
        state.withLock { $0.receive }?(message)
    }

    /// The server's own stream (GET): what it sends unasked. A server that offers none answers 405.
    private func listen() async {
        while !Task.isCancelled, state.withLock({ !$0.isClosed }) {
            do {
                let call = try await HTTPStreamingCall.start(
                    request(method: "GET", body: nil, accept: "text/event-stream"), timeout: .seconds(3600),
                    maxBodyBytes: Int.max)
                guard call.response.statusCode == 200 else {
                    call.cancel()
                    return logger.debug(
                        "MCP server '\(server)': no stream of its own (HTTP \(call.response.statusCode))")
                }
                await withTaskCancellationHandler {
                    await readEvents(call, answering: nil)
                } onCancel: {
                    call.cancel()
                }
            } catch {
                logger.debug("MCP server '\(server)': its stream broke off: \(error)")
            }
            try? await Task.sleep(for: .seconds(1))
        }
    }

    private func fail(_ reason: String) {
        let (closed, calls, listener) = state.withLock { state in
            guard !state.isClosed else {
                return ((@Sendable (String) -> Void)?.none, [HTTPStreamingCall](), Task<Void, Never>?.none)
            }
            state.isClosed = true
            defer { state.calls = [:] }
            return (state.closed, Array(state.calls.values), state.listener)
        }
        for call in calls { call.cancel() }
        listener?.cancel()
        closed?(reason)
    }

    /// Ends the session: the server hears a DELETE (it may refuse it; nothing depends on it).
    func close() {
        let session = state.withLock { $0.isClosed ? nil : $0.sessionID }
        fail("closed")
        guard session != nil else { return }
        let goodbye = request(method: "DELETE", body: nil, accept: "application/json")
        Task { try? await HTTPStreamingCall.start(goodbye, timeout: .seconds(2), maxBodyBytes: 4096).cancel() }
    }
}
