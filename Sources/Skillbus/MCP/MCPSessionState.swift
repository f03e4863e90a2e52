/// The client's side of one MCP session as plain state, with no I/O: the handshake's phase, the requests
/// that await an answer, and what each message from the server means. `MCPClient` performs what it returns.
struct MCPSessionState {
    /// The revisions we speak that begin with `initialize`, newest first; we offer the first.
    static let supportedVersions = ["2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"]

    enum Phase: Equatable {
        case fresh
        case initializing(id: Int)
        case ready(protocolVersion: String)
        case closed(reason: String)
    }

    struct Pending: Equatable {
        var method: String
        /// Progress notifications for this request carry this token (the request's id).
        var wantsProgress: Bool
    }

    /// A progress notification, as the server sent it.
    struct Progress: Equatable, Sendable {
        var progress: Double
        var total: Double?
        var message: String?
    }

    /// What a message from the server means for us.
    enum Inbound: Equatable {
        /// The answer to request `id` (the initialize answer included: `acceptInitializeResult` checks it).
        case answer(id: Int, Result<JSONValue, JSONRPCError>)
        case progress(id: Int, Progress)
        /// `notifications/tools/list_changed`: list the tools again.
        case toolsChanged
        /// What to send back to a request of the server's (a ping, or one we do not serve).
        case reply(JSONRPCMessage)
        /// Nothing to do; the text says why, for the log.
        case ignored(String)
    }

    private(set) var phase = Phase.fresh
    private(set) var pending: [Int: Pending] = [:]
    private var nextID = 1

    var isReady: Bool { if case .ready = phase { true } else { false } }

    /// The `initialize` request; the session is `initializing` until its answer is accepted.
    mutating func initializeRequest(clientName: String, clientVersion: String) -> JSONRPCMessage {
        precondition(phase == .fresh, "initialize is sent once, first")
        let params: JSONValue = [
            "protocolVersion": .string(Self.supportedVersions[0]),
            // We list no roots, sample nothing and ask no elicitation: the client has no capabilities to offer.
            "capabilities": [:],
            "clientInfo": ["name": .string(clientName), "version": .string(clientVersion)],
        ]
        let (id, message) = register("initialize", params: params, wantsProgress: false)
        phase = .initializing(id: id)
        return message
    }

    /// Checks the server's answer to `initialize` and returns the `initialized` notification to send. A
    /// revision we do not speak ends the session (the spec: the client should disconnect).
    mutating func acceptInitializeResult(_ result: JSONValue) throws(SkillbusError) -> JSONRPCMessage {
        guard case .initializing = phase else {
            throw SkillbusError(.internalError, "an initialize answer outside the handshake")
        }
        guard let version = result["protocolVersion"]?.stringValue else {
            phase = .closed(reason: "its initialize answer has no protocolVersion")
            throw SkillbusError(.unsupported, "its initialize answer has no 'protocolVersion'")
        }
        guard Self.supportedVersions.contains(version) else {
            phase = .closed(reason: "unsupported protocol version \(version)")
            throw SkillbusError(
                .unsupported,
                "it speaks MCP \(version.prefix(40)); we speak \(Self.supportedVersions.joined(separator: ", "))")
        }
        phase = .ready(protocolVersion: version)
        return .notification(method: "notifications/initialized", params: nil)
    }

    /// A request to send, registered as pending. With `wantsProgress` its params carry a progress token.
    mutating func request(_ method: String, params: JSONValue, wantsProgress: Bool = false) -> (
        id: Int, message: JSONRPCMessage
    ) {
        register(method, params: params, wantsProgress: wantsProgress)
    }

    private mutating func register(_ method: String, params: JSONValue, wantsProgress: Bool) -> (
        id: Int, message: JSONRPCMessage
    ) {
        let id = nextID
        nextID += 1
        var params = params
        if wantsProgress, case .object(var object) = params {
            var meta = object["_meta"]?.objectValue ?? [:]
            meta["progressToken"] = .number(Double(id))
            object["_meta"] = .object(meta)
            params = .object(object)
        }
        pending[id] = Pending(method: method, wantsProgress: wantsProgress)
        return (id, .request(id: .number(id), method: method, params: params))
    }

    /// Gives up on request `id` (its caller was cancelled or ran out of time): the notification that tells
    /// the server, or nil when the request no longer waits (then there is nothing to cancel). The spec
    /// forbids cancelling `initialize`.
    mutating func cancel(id: Int, reason: String) -> JSONRPCMessage? {
        guard let request = pending.removeValue(forKey: id) else { return nil }
        guard request.method != "initialize" else { return nil }
        return .notification(
            method: "notifications/cancelled", params: ["requestId": .number(Double(id)), "reason": .string(reason)])
    }

    /// Ends the session; the requests still waiting, which must now fail.
    mutating func close(reason: String) -> [Int] {
        if case .closed = phase {} else { phase = .closed(reason: reason) }
        defer { pending = [:] }
        return pending.keys.sorted()
    }

    /// What a message from the server means.
    mutating func receive(_ message: JSONRPCMessage) -> Inbound {
        switch message {
        case .result(let id, let result):
            return answer(id, .success(result))
        case .error(let id, let error):
            guard let id else { return .ignored("an error about no request: \(error.message.prefix(200))") }
            return answer(id, .failure(error))
        case .request(let id, let method, _):
            // A server may ping any time; we offer no other capability (roots, sampling, elicitation).
            if method == "ping" { return .reply(.result(id: id, result: [:])) }
            return .reply(.error(id: id, .methodNotFound(method)))
        case .notification(let method, let params):
            switch method {
            case "notifications/progress": return progress(params)
            case "notifications/tools/list_changed": return isReady ? .toolsChanged : .ignored("list_changed early")
            default: return .ignored("notification \(method)")  // log messages, resource updates, …
            }
        }
    }

    private mutating func answer(_ id: JSONRPCID, _ result: Result<JSONValue, JSONRPCError>) -> Inbound {
        guard case .number(let number) = id, pending.removeValue(forKey: number) != nil else {
            // A late answer to a request we gave up on, most often.
            return .ignored("an answer to request \(id), which no longer waits")
        }
        return .answer(id: number, result)
    }

    private func progress(_ params: JSONValue?) -> Inbound {
        guard let params, let token = params["progressToken"].flatMap(JSONRPCID.init(json:)),
            let value = params["progress"]?.doubleValue
        else { return .ignored("a progress notification without token or progress") }
        guard case .number(let id) = token, pending[id]?.wantsProgress == true else {
            return .ignored("progress for token \(token), which no request waits for")
        }
        return .progress(
            id: id,
            Progress(progress: value, total: params["total"]?.doubleValue, message: params["message"]?.stringValue))
    }
}
