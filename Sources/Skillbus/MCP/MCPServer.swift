import Foundation
import Synchronization

/// One MCP session of the bus as an MCP server: it reads JSON-RPC messages, answers them, and runs tool
/// calls as rounds on the bus (MCPServer+Calls). It holds no socket and no pipe: a transport hands it each
/// message with the `Output` its answers go to (stdio: standard output; HTTP: the request's stream), and
/// what belongs to no request (`notifications/tools/list_changed`) goes to `general`.
public final class MCPServer: Sendable {
    public typealias Output = @Sendable (JSONRPCMessage) -> Void

    public struct Settings: Sendable {
        /// Tools per `tools/list` page.
        public var pageSize = 100
        /// Identical calls within it share a round (zero: never).
        public var reuseWindow: Duration = .seconds(30)
        /// How long a skill's round may take when the call names no `skillbus/timeoutMs`; nil: the skill's own.
        public var timeout: Duration?
        /// How long an agent's turn may take when the call names no timeout.
        public var askTimeout: Duration = .seconds(120)
        /// The Skillbus session the calls and turns run in (an agent keeps its context by it).
        public var sessionID = "mcp-" + UUID().uuidString.lowercased().prefix(8)
        public var version = "0.1.0"

        public init() {}
    }

    let bus: any MCPBus
    let settings: Settings
    let general: Output
    let logger: Logger?
    let state: Mutex<State>
    /// Names this session among those that decide the bus's confirmations.
    let key = UUID().uuidString

    struct State {
        /// Set by `initialize`: the revision this session speaks.
        var version: String?
        /// The client said it can ask its user (`capabilities.elicitation`).
        var clientElicits = false
        var calls: [JSONRPCID: Call] = [:]
        /// Requests of ours (elicitation) waiting for the client's answer, by the id we gave them.
        var outbound: [String: Outbound] = [:]
        var nextOutbound = 0
        var reuse: MCPRoundReuse
        /// The tool listing as last seen, to tell the client when it changes.
        var listing: [JSONValue]?
        var closed = false
    }

    /// A `tools/call` in flight.
    struct Call {
        var task: Task<Void, Never>?
        /// The id of its messages on the bus: confirmations asked during it carry it.
        var busRequestID: String
        var output: Output
        /// Cancelled by the client: it gets no answer (the spec's rule).
        var cancelled = false
    }

    struct Outbound {
        var call: JSONRPCID
        var continuation: CheckedContinuation<JSONRPCMessage?, Never>
    }

    public init(bus: any MCPBus, settings: Settings = Settings(), logger: Logger? = nil, general: @escaping Output) {
        self.bus = bus
        self.settings = settings
        self.logger = logger
        self.general = general
        state = Mutex(State(reuse: MCPRoundReuse(window: settings.reuseWindow)))
        bus.addConfirmer(key) { [weak self] confirmation in await self?.confirm(confirmation) }
    }

    /// Reads one message and acts on it; answers go to `output`. Never blocks on the bus: a tool call runs
    /// in a task of its own, and its answer comes when it ends.
    public func receive(_ bytes: [UInt8], output: @escaping Output) {
        switch JSONRPCMessage.parse(bytes) {
        case .failure(let unreadable):
            logger?.warning("refused a message: \(unreadable.error.message)")
            output(.error(id: unreadable.id, unreadable.error))
        case .success(let message):
            receive(message, output: output)
        }
    }

    public func receive(_ message: JSONRPCMessage, output: @escaping Output) {
        switch message {
        case .request(let id, let method, let params):
            do throws(JSONRPCError) {
                if let result = try answer(id: id, method: method, params: params ?? [:], output: output) {
                    output(.result(id: id, result: result))
                }
            } catch {
                logger?.info("\(method): \(error.message)")
                output(.error(id: id, error))
            }
        case .notification(let method, let params):
            notified(method, params: params ?? [:])
        case .result, .error:
            answered(message.id, message)
        }
    }

    /// The result of a request answered at once; nil for a tool call, which answers when it ends.
    private func answer(id: JSONRPCID, method: String, params: JSONValue, output: @escaping Output) throws(JSONRPCError)
        -> JSONValue?
    {
        guard params.objectValue != nil else { throw .invalidParams("'params' of \(method) must be an object") }
        switch method {
        case "initialize": return try initialize(params)
        case "ping": return [:]
        default: break
        }
        guard state.withLock({ $0.version }) != nil else {
            throw .invalidRequest("this session is not initialized: send 'initialize' first")
        }
        switch method {
        case "tools/list":
            let cursor = params["cursor"]
            guard cursor == nil || cursor == .null || cursor?.stringValue != nil else {
                throw .invalidParams("'cursor' must be a string")
            }
            let list = MCPToolList(bus.registry)
            state.withLock { $0.listing = list.tools.map(\.json) }
            let (tools, next) = try list.page(after: cursor?.stringValue, size: settings.pageSize)
            var result: [String: JSONValue] = ["tools": .array(tools.map(\.json))]
            if let next { result["nextCursor"] = .string(next) }
            return .object(result)
        case "tools/call":
            try startCall(id: id, params: params, output: output)
            return nil
        default:
            throw .methodNotFound(method)
        }
    }

    private func initialize(_ params: JSONValue) throws(JSONRPCError) -> JSONValue {
        guard let requested = params["protocolVersion"]?.stringValue else {
            throw .invalidParams("initialize needs 'protocolVersion', a string")
        }
        let version = MCPVersion.negotiate(requested)
        let elicits = params["capabilities"]?["elicitation"]?.objectValue != nil
        let clientName = params["clientInfo"]?["name"]?.stringValue ?? "an unnamed client"
        state.withLock { state in
            state.version = version
            state.clientElicits = elicits
        }
        logger?.info("\(clientName) initialized (protocol \(version), asked for \(requested))")
        return [
            "protocolVersion": .string(version),
            "capabilities": ["tools": ["listChanged": true]],
            "serverInfo": ["name": "skillbus", "title": "Skillbus", "version": .string(settings.version)],
            "instructions": .string(
                "Each tool is a Skillbus skill (or, as ask.<agent>, an agent that answers a message). "
                    + "A call runs one round on the bus; an identical call soon after gets that round's stored "
                    + "result instead of running again."),
        ]
    }

    private func notified(_ method: String, params: JSONValue) {
        switch method {
        case "notifications/cancelled":
            guard let id = params["requestId"].flatMap(JSONRPCID.init(json:)) else {
                return logger?.info("ignored notifications/cancelled without a valid 'requestId'") ?? ()
            }
            cancel(id)
        case "notifications/initialized":
            logger?.debug("the client is initialized")
        default:
            logger?.debug("ignored notification \(method.prefix(64))")
        }
    }

    /// An answer to one of our requests: whoever waits for it gets it.
    private func answered(_ id: JSONRPCID?, _ message: JSONRPCMessage) {
        guard case .string(let key)? = id, let waiting = state.withLock({ $0.outbound.removeValue(forKey: key) }) else {
            return logger?.info("ignored an answer to no request of ours (id \(id?.description.prefix(64) ?? "null"))") ?? ()
        }
        waiting.continuation.resume(returning: message)
    }

    /// Sends a request of ours on `output` and waits for the client's answer; nil when the call it belongs
    /// to ended first.
    func request(_ method: String, params: JSONValue, for call: JSONRPCID, output: Output) async -> JSONRPCMessage? {
        await withCheckedContinuation { continuation in
            let id: String? = state.withLock { state in
                guard state.calls[call] != nil, !state.closed else { return nil }
                state.nextOutbound += 1
                let id = "skillbus-\(state.nextOutbound)"
                state.outbound[id] = Outbound(call: call, continuation: continuation)
                return id
            }
            guard let id else { return continuation.resume(returning: nil) }
            output(.request(id: .string(id), method: method, params: params))
        }
    }

    /// Tells the client when the tool listing changed. Runs until cancelled.
    public func watchRegistry() async {
        for await registry in bus.changes() { registryChanged(registry) }
    }

    /// The registry is now `registry`: the client hears `notifications/tools/list_changed` when the tool
    /// listing differs from the one it last saw (or could have seen).
    public func registryChanged(_ registry: Registry) {
        let listing = MCPToolList(registry).tools.map(\.json)
        let changed = state.withLock { state -> Bool in
            defer { state.listing = listing }
            return state.version != nil && state.listing != nil && state.listing != listing
        }
        if changed { general(.notification(method: "notifications/tools/list_changed", params: nil)) }
    }

    /// Ends the session: every call still running is cancelled (on the bus too), and answers nobody.
    public func close() {
        bus.removeConfirmer(key)
        let (tasks, waiting) = state.withLock { state in
            state.closed = true
            for id in state.calls.keys { state.calls[id]?.cancelled = true }
            defer { state.outbound.removeAll() }
            return (state.calls.values.compactMap(\.task), Array(state.outbound.values))
        }
        for task in tasks { task.cancel() }
        for waiting in waiting { waiting.continuation.resume(returning: nil) }
    }

    /// Calls still running.
    public var callsInFlight: Int { state.withLock { $0.calls.count } }
}
