import Foundation
import Synchronization

/// One MCP server mounted by a worker, supervised: connected (a stdio server launched), its tools listed
/// and published as skills, listed again on `list_changed`, and when the connection ends (the process died,
/// the server went away) connected again after a delay that doubles up to `maxBackoff`. Its skills stay
/// offered meanwhile: a call waits for the server within its deadline. Cancelling `run()` stops the server.
public final class MCPServerMount: Service {
    public let spec: MCPServerSpec
    private let logger: Logger
    private let clientVersion: String
    /// Replaces the skills this server offers on the worker.
    private let publish: @Sendable ([any AgentSkill]) -> Void

    static let connectTimeout: Duration = .seconds(20)
    static let firstBackoff: Duration = .milliseconds(250)
    static let maxBackoff: Duration = .seconds(30)
    /// A connection that lived this long was healthy: the next restart starts from the first delay again.
    static let healthyAfter: Duration = .seconds(30)

    private struct State {
        var client: MCPClient?
        /// Calls waiting for a connection.
        var waiters: [UUID: CheckedContinuation<MCPClient, any Error>] = [:]
        var stopped = false
        /// Each listing gets a number; only the newest may publish (list_changed may come in bursts).
        var listings = 0
        /// The last reason the connection failed, for calls that find none.
        var lastFailure: String?
        /// The bearer token's variable is unset: said once, not at every reconnection.
        var toldOfMissingToken = false
    }

    private let state = Mutex(State())

    public init(
        spec: MCPServerSpec, logger: Logger, clientVersion: String,
        publish: @escaping @Sendable ([any AgentSkill]) -> Void
    ) {
        self.spec = spec
        self.logger = logger
        self.clientVersion = clientVersion
        self.publish = publish
    }

    public func run() async {
        var backoff = Self.firstBackoff
        while !Task.isCancelled {
            let started = ContinuousClock.now
            let client = MCPClient(
                server: spec.name, transport: makeTransport(), logger: logger, clientVersion: clientVersion,
                onToolsChanged: { [weak self] in self?.relist() })
            let reason = await serve(client)
            state.withLock { state in
                if state.client === client { state.client = nil }
                state.lastFailure = reason
            }
            guard !Task.isCancelled else { break }
            if ContinuousClock.now - started >= Self.healthyAfter { backoff = Self.firstBackoff }
            logger.warning("MCP server '\(spec.name)': \(reason); connecting again in \(backoff)")
            try? await Task.sleep(for: backoff)
            backoff = min(backoff * 2, Self.maxBackoff)
        }
        let waiters = state.withLock { state in
            state.stopped = true
            defer { state.waiters = [:] }
            return Array(state.waiters.values)
        }
        for waiter in waiters { waiter.resume(throwing: SkillbusError(.cancelled, "the worker is stopping")) }
    }

    /// One connection, from handshake to end; why it ended.
    private func serve(_ client: MCPClient) async -> String {
        do {
            try await client.connect(timeout: Self.connectTimeout)
            let tools = try await client.listTools(deadline: .now + Self.connectTimeout)
            let listing = state.withLock { state in
                state.listings += 1
                return state.listings
            }
            publish(tools, listing: listing)
            logger.info(
                "MCP server '\(spec.name)' connected (MCP \(client.protocolVersion ?? "?")): \(tools.count) tools")
            let waiters = state.withLock { state in
                state.client = client
                defer { state.waiters = [:] }
                return Array(state.waiters.values)
            }
            for waiter in waiters { waiter.resume(returning: client) }
        } catch {
            client.close()
            _ = await client.waitUntilClosed()
            return "cannot connect: \((error as? SkillbusError)?.message ?? "\(error)")"
        }
        return await withTaskCancellationHandler {
            await client.waitUntilClosed()
        } onCancel: {
            client.close()
        }
    }

    private func makeTransport() -> any MCPTransport {
        switch spec.connection {
        case .stdio(let command, let arguments, let environment):
            return MCPStdioTransport(
                server: spec.name, launch: .init(command: command, arguments: arguments, environment: environment),
                logger: logger)
        case .http(let url, let tokenVariable):
            let token = tokenVariable.flatMap { ProcessInfo.processInfo.environment[$0] }
            if let tokenVariable, token == nil, !state.withLock({ $0.toldOfMissingToken }) {
                state.withLock { $0.toldOfMissingToken = true }
                logger.warning("MCP server '\(spec.name)': \(tokenVariable) is not set; connecting without a token")
            }
            return MCPHTTPTransport(server: spec.name, url: url, bearerToken: token, logger: logger)
        }
    }

    /// The tools again, after the server said they changed.
    private func relist() {
        guard let client = state.withLock({ $0.client }) else { return }
        Task {
            let listing = state.withLock { state in
                state.listings += 1
                return state.listings
            }
            do {
                let tools = try await client.listTools(deadline: .now + Self.connectTimeout)
                publish(tools, listing: listing)
                logger.info("MCP server '\(spec.name)': its tools changed; now \(tools.count)")
            } catch {
                logger.warning("MCP server '\(spec.name)': cannot list its changed tools: \(error)")
            }
        }
    }

    private func publish(_ tools: [MCPListedTool], listing: Int) {
        var skills: [any AgentSkill] = []
        for tool in tools {
            do throws(SkillbusError) {
                let descriptor = try tool.descriptor(
                    server: spec.name, trusted: spec.trusted, timeoutMs: spec.timeoutMs, cacheMs: spec.cacheMs)
                skills.append(MCPToolSkill(skill: descriptor, tool: tool.name, mount: self))
            } catch {
                logger.warning("MCP server '\(spec.name)': tool not offered: \(error.message)")
            }
        }
        // An older listing that finishes after a newer one must not undo it.
        guard state.withLock({ $0.listings == listing }) else { return }
        publish(skills)
    }

    /// The connected client; waits for one (a server starting or restarting) until `deadline`.
    func connectedClient(until deadline: ContinuousClock.Instant) async throws -> MCPClient {
        if let client = state.withLock({ $0.client }), client.isOpen { return client }
        let id = UUID()
        let expiry = Task { [weak self] in
            try await Task.sleep(until: deadline)
            self?.stopWaiting(
                id, SkillbusError(.timeout, "MCP server '\(self?.spec.name ?? "")' was not connected in time"))
        }
        defer { expiry.cancel() }
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { continuation in
                let outcome: Result<MCPClient, any Error>? = state.withLock { state in
                    if let client = state.client, client.isOpen { return .success(client) }
                    if state.stopped { return .failure(SkillbusError(.cancelled, "the worker is stopping")) }
                    state.waiters[id] = continuation
                    return nil
                }
                if let outcome { continuation.resume(with: outcome) }
            }
        } onCancel: {
            stopWaiting(
                id, SkillbusError(.cancelled, "the call was cancelled while MCP server '\(spec.name)' connected"))
        }
    }

    private func stopWaiting(_ id: UUID, _ error: SkillbusError) {
        let waiter = state.withLock { $0.waiters.removeValue(forKey: id) }
        let detail = state.withLock { $0.lastFailure.map { " (last: \($0))" } ?? "" }
        waiter?.resume(throwing: error.code == .timeout ? SkillbusError(.timeout, error.message + detail) : error)
    }
}
