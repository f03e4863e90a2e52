import Foundation
import SkillbusZMQ
import Synchronization

/// `skillbus mcp --http`: the bus as an MCP server over Streamable HTTP (MCP 2025-11-25), on the project's
/// own `HTTPServer`. One endpoint path: POST carries one JSON-RPC message and is answered with JSON or, for
/// a tool call, an event stream of its progress, its questions and its answer; GET opens the session's own
/// stream (or resumes one with `Last-Event-ID`); DELETE ends the session. Sessions are named by
/// `Mcp-Session-Id`; `Origin` is checked; with tokens configured, every request needs one (`Authorization:
/// Bearer`), and its role says whether it may call tools.
public final class MCPHTTPEndpoint: Sendable {
    public struct Settings: Sendable {
        public var address: HTTPAddress
        public var path = "/mcp"
        /// Bearer tokens and what each may do; empty: none needed (loopback only).
        public var tokens: [String: MCPAccess] = [:]
        /// Origins allowed besides the loopback ones (`http://localhost:*`, `http://127.0.0.1:*`).
        public var origins: Set<String> = []
        /// A POST's stream is closed after this long (the client resumes it with GET); nil: never.
        public var streamLimit: Duration?
        public var maxSessions = 256
        /// A session without requests, calls or a connected stream this long is ended (its client is gone
        /// without a DELETE).
        public var idleSessionTimeout: Duration = .seconds(3600)
        public var maxMessageBytes = 4 << 20

        public init(address: HTTPAddress) { self.address = address }

        /// Why these settings may not serve, or nil: a reachable address needs tokens.
        public var problem: String? {
            guard !address.isLoopback && tokens.isEmpty else { return nil }
            return "MCP over HTTP on \(address) would be open to the network without a token: listen on 127.0.0.1, "
                + "or give --http-token"
        }
    }

    let settings: Settings
    let makeServer: @Sendable (_ general: @escaping MCPServer.Output) -> MCPServer
    let logger: Logger?
    private let sessions = Mutex<[String: MCPHTTPSession]>([:])
    private let wakePipe: WakePipe
    private let server = Mutex<HTTPServer?>(nil)

    /// Where it listens (the real port when port 0 was asked for).
    public let address: HTTPAddress

    /// Listens on `settings.address`; `makeServer` makes each session's MCP server.
    public init(
        settings: Settings, logger: Logger?,
        makeServer: @escaping @Sendable (_ general: @escaping MCPServer.Output) -> MCPServer
    ) throws {
        if let problem = settings.problem { throw SkillbusError(.invalidConfiguration, problem) }
        self.settings = settings
        self.logger = logger
        self.makeServer = makeServer
        wakePipe = try WakePipe()
        let started: HTTPServer
        do {
            let handle = Handle()
            started = try HTTPServer(address: settings.address, wakePipe: wakePipe) { MCPHTTPSite(handle) }
            address = started.address
            handle.endpoint.withLock { $0 = Weak(self) }
        } catch {
            wakePipe.close()
            throw error
        }
        server.withLock { $0 = started }
    }

    /// Ends every session, gives their cancelled calls 2 s to tell the bus, and stops the HTTP thread (it
    /// waits: never call this on the cooperative pool).
    public func stop() {
        let ended = sessions.withLock { table in
            defer { table = [:] }
            return Array(table.values)
        }
        for session in ended { session.close() }
        let deadline = ContinuousClock.now + .seconds(2)
        while ended.contains(where: { ($0.server?.callsInFlight ?? 0) > 0 }) && ContinuousClock.now < deadline {
            usleep(10_000)
        }
        server.withLock { $0 }?.stop()
        wakePipe.close()
    }

    /// Tells every session's client when the tool listing changed. Runs until cancelled.
    public func watchRegistry(_ bus: any MCPBus) async {
        for await registry in bus.changes() {
            for session in sessions.withLock({ Array($0.values) }) { session.server?.registryChanged(registry) }
        }
    }

    /// Sessions open now.
    public var sessionCount: Int { sessions.withLock { $0.count } }

    func deliver(_ connection: HTTPConnectionID, _ delivery: HTTPDelivery) {
        server.withLock { $0 }?.deliver(connection, delivery)
    }

    // MARK: - Requests (on the HTTP thread)

    func respond(to request: HTTPRequest, on connection: HTTPConnectionID) -> HTTPResponse? {
        let head = request.head
        guard head.path == settings.path else {
            return .text(404, "no such endpoint: \(head.path.prefix(200)) (MCP is served on \(settings.path))")
        }
        if let origin = head.headers["origin"], !allows(origin: origin) {
            logger?.warning("refused a request from origin \(origin.prefix(200))")
            return Self.failure(403, .invalidRequest("origin '\(origin.prefix(200))' is not allowed"))
        }
        let access: MCPAccess
        switch authorize(head) {
        case .granted(let granted): access = granted
        case .refused(let refusal): return refusal
        }
        switch head.method {
        case "POST": return post(request, access: access, on: connection)
        case "GET": return get(head, on: connection)
        case "DELETE":
            guard let (id, session) = session(head) else { return sessionRefusal(head) }
            sessions.withLock { _ = $0.removeValue(forKey: id) }
            session.close()
            logger?.info("MCP session \(id) ended by its client")
            return HTTPResponse(status: 204, contentType: "text/plain", body: [])
        default:
            return .text(
                405, "\(head.method) is not allowed on \(settings.path)", headers: [("Allow", "GET, POST, DELETE")])
        }
    }

    func closed(_ connection: HTTPConnectionID) {
        for session in sessions.withLock({ Array($0.values) }) { session.detach(connection) }
    }

    private func post(_ request: HTTPRequest, access: MCPAccess, on connection: HTTPConnectionID) -> HTTPResponse? {
        let accept = request.head.headers["accept"] ?? "*/*"
        let streams = accept.contains("text/event-stream") || accept.contains("*/*")
        guard streams || accept.contains("application/json") else {
            return .text(406, "accept application/json and text/event-stream")
        }
        let message: JSONRPCMessage
        switch JSONRPCMessage.parse(request.body) {
        case .success(let read): message = read
        case .failure(let unreadable): return Self.failure(400, unreadable.error, id: unreadable.id)
        }
        if case .request(let id, "initialize", _) = message {
            return initialize(message, id: id, access: access, owner: bearer(request.head) ?? "")
        }
        guard let (_, session) = session(request.head) else { return sessionRefusal(request.head) }
        if let version = request.head.headers["mcp-protocol-version"], !MCPVersion.supported.contains(version) {
            return Self.failure(400, .invalidRequest("unsupported MCP-Protocol-Version '\(version.prefix(40))'"))
        }
        guard let server = session.server else { return Self.failure(404, .invalidRequest("session is ending")) }
        guard case .request(let id, let method, _) = message else {
            // A notification, or the client's answer to our question: accepted, nothing to say back.
            server.receive(message, output: session.general)
            return HTTPResponse(status: 202, contentType: "text/plain", body: [])
        }
        if method == "tools/call" && access == .reader {
            return Self.failure(
                403, .invalidRequest("this token's role (reader) may list tools, not call them"), id: id)
        }
        // A call's progress, questions and answer come as a stream: refused before it runs, not after.
        if method == "tools/call" && !streams {
            return Self.failure(406, .invalidRequest("tools/call is answered as text/event-stream: accept it"), id: id)
        }
        let exchange = MCPHTTPExchange(id: id)
        server.receive(message, output: exchange.output)
        return exchange.answer(session: session, connection: connection, streams: streams, endpoint: self)
    }

    private func initialize(_ message: JSONRPCMessage, id: JSONRPCID, access: MCPAccess, owner: String) -> HTTPResponse {
        endAbandonedSessions()
        let sessionID = UUID().uuidString.lowercased().replacingOccurrences(of: "-", with: "")
        let session = MCPHTTPSession(id: sessionID, access: access, owner: owner) { [weak self] connection, delivery in
            self?.deliver(connection, delivery)
        }
        let admitted = sessions.withLock { table -> Bool in
            guard table.count < settings.maxSessions else { return false }
            table[sessionID] = session
            return true
        }
        guard admitted else {
            return Self.failure(
                503, .internalError("too many MCP sessions (\(settings.maxSessions)); end one first"), id: id)
        }
        let server = makeServer(session.general)
        session.attach(server)
        server.registryChanged(server.bus.registry)
        let exchange = MCPHTTPExchange(id: id)
        server.receive(message, output: exchange.output)
        let answer = exchange.collected.last ?? .error(id: id, .internalError("initialize was not answered"))
        if case .error(_, let error) = answer {
            // No session came of it.
            sessions.withLock { _ = $0.removeValue(forKey: sessionID) }
            session.close()
            return Self.failure(400, error, id: id)
        }
        logger?.info("MCP session \(sessionID) started (\(access.rawValue))")
        return HTTPResponse(
            status: 200, contentType: "application/json", body: answer.encoded(),
            headers: [("Mcp-Session-Id", sessionID)])
    }

    private func get(_ head: HTTPRequestHead, on connection: HTTPConnectionID) -> HTTPResponse {
        guard (head.headers["accept"] ?? "").contains("text/event-stream") else {
            return .text(406, "GET opens an event stream: accept text/event-stream")
        }
        guard let (_, session) = session(head) else { return sessionRefusal(head) }
        guard let (bytes, finished) = session.resume(lastEventID: head.headers["last-event-id"], connection: connection)
        else {
            return .text(
                404, "no stream of this session has the event '\(head.headers["last-event-id"]?.prefix(64) ?? "")'")
        }
        var response = HTTPResponse.eventStream
        response.body = bytes
        if finished { deliver(connection, .end) }
        return response
    }

    /// The session the request names, if it is one of this request's token (another token's is none).
    private func session(_ head: HTTPRequestHead) -> (String, MCPHTTPSession)? {
        guard let id = head.headers["mcp-session-id"], let session = sessions.withLock({ $0[id] }),
            Self.sameBytes(session.owner, bearer(head) ?? "")
        else { return nil }
        session.touch()
        return (id, session)
    }

    /// Ends the sessions whose clients went away without a DELETE (looked for when a new one starts).
    private func endAbandonedSessions() {
        let now = ContinuousClock.now
        let abandoned = sessions.withLock { table -> [(String, MCPHTTPSession)] in
            let gone = table.filter { $0.value.isAbandoned(idle: settings.idleSessionTimeout, now: now) }
            for id in gone.keys { table[id] = nil }
            return Array(gone)
        }
        for (id, session) in abandoned {
            session.close()
            logger?.info("MCP session \(id) ended: idle for \(settings.idleSessionTimeout)")
        }
    }

    /// No session id: 400; one this endpoint does not know (ended, or never was): 404, so the client starts anew.
    private func sessionRefusal(_ head: HTTPRequestHead) -> HTTPResponse {
        guard let id = head.headers["mcp-session-id"] else {
            return Self.failure(400, .invalidRequest("missing Mcp-Session-Id: send 'initialize' first"))
        }
        return Self.failure(404, .invalidRequest("no MCP session '\(id.prefix(64))' (it ended): initialize again"))
    }

    private func allows(origin: String) -> Bool {
        if settings.origins.contains(origin) { return true }
        guard let host = URL(string: origin)?.host else { return false }
        return host == "localhost" || host == "127.0.0.1" || host == "::1" || host == "[::1]"
    }

    private enum Authorization {
        case granted(MCPAccess)
        case refused(HTTPResponse)
    }

    /// The request's bearer token, when it sends one and tokens are configured.
    private func bearer(_ head: HTTPRequestHead) -> String? {
        guard !settings.tokens.isEmpty else { return nil }
        return head.headers["authorization"].flatMap { value -> String? in
            guard value.lowercased().hasPrefix("bearer ") else { return nil }
            return String(value.dropFirst("bearer ".count)).trimmingCharacters(in: .whitespaces)
        }
    }

    private func authorize(_ head: HTTPRequestHead) -> Authorization {
        guard !settings.tokens.isEmpty else { return .granted(.client) }
        let given = bearer(head)
        // Every token is compared in full, so the time taken says nothing about how close a guess was.
        var granted: MCPAccess?
        for (token, access) in settings.tokens where Self.sameBytes(token, given ?? "") { granted = access }
        guard let granted else {
            logger?.warning(
                given == nil ? "refused a request without a bearer token" : "refused an unknown bearer token")
            var refusal = Self.failure(401, .invalidRequest("a valid bearer token is required"))
            refusal.headers.append(("WWW-Authenticate", "Bearer realm=\"skillbus-mcp\""))
            return .refused(refusal)
        }
        return .granted(granted)
    }

    private static func sameBytes(_ left: String, _ right: String) -> Bool {
        let (a, b) = (Array(left.utf8), Array(right.utf8))
        var difference = UInt8(a.count == b.count ? 0 : 1)
        for index in 0..<max(a.count, b.count) {
            difference |= (index < a.count ? a[index] : 0) ^ (index < b.count ? b[index] : 0)
        }
        return difference == 0
    }

    static func failure(_ status: Int, _ error: JSONRPCError, id: JSONRPCID? = nil) -> HTTPResponse {
        HTTPResponse(status: status, contentType: "application/json", body: JSONRPCMessage.error(id: id, error).encoded())
    }

    /// How the HTTP thread's site reaches the endpoint without keeping it alive.
    final class Handle: Sendable {
        let endpoint = Mutex<Weak?>(nil)
    }

    struct Weak: Sendable {
        weak var value: MCPHTTPEndpoint?
        init(_ value: MCPHTTPEndpoint) { self.value = value }
    }
}

/// The HTTP thread's site: hands each request to the endpoint.
final class MCPHTTPSite: HTTPSite {
    let handle: MCPHTTPEndpoint.Handle
    init(_ handle: MCPHTTPEndpoint.Handle) { self.handle = handle }

    private var endpoint: MCPHTTPEndpoint? { handle.endpoint.withLock { $0?.value } }
    var maxBodyBytes: Int { endpoint?.settings.maxMessageBytes ?? 1 }

    func respond(to request: HTTPRequest, on connection: HTTPConnectionID) -> HTTPResponse? {
        guard let endpoint else { return .text(503, "the MCP endpoint is stopping") }
        return endpoint.respond(to: request, on: connection)
    }

    func collect(streaming: Bool) -> [UInt8] { [] }
    func closed(_ connection: HTTPConnectionID) { endpoint?.closed(connection) }
}
