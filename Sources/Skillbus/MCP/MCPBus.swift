/// What the MCP server needs of the bus: the registry as it is now and as it changes, a skill's round,
/// an agent's turn, and the confirmations asked of this client. `SkillbusMCPBus` is the real one; unit
/// tests hand in their own.
public protocol MCPBus: Sendable {
    var registry: Registry { get }
    /// The registry after every change, starting with the current one.
    func changes() -> AsyncStream<Registry>
    /// A fresh id for the bus messages of one call: a confirmation asked during it carries this id.
    func makeRequestID() -> String
    /// Runs `skill` in round `roundID`; a cancelled caller cancels the round on the bus.
    func run(
        skill: String, arguments: JSONValue, roundID: String, sessionID: String, requestID: String,
        timeout: Duration?, onOutput: @escaping @Sendable (OutputBatch) -> Void
    ) async throws(SkillbusError) -> RoundDocument
    /// Asks `agent` to take a turn answering `message`; returns the turn document.
    func ask(
        agent: String, message: String, roundID: String, sessionID: String, requestID: String, timeout: Duration
    ) async throws(SkillbusError) -> JSONValue
    /// Who decides the confirmations the bus asks of this client.
    func onConfirmation(_ decide: @escaping @Sendable (Confirmation) async -> Bool)
}

/// The bus through a `SkillbusClient` and a live `RegistryReplica`, as `skillbus send` reaches it.
public struct SkillbusMCPBus: MCPBus {
    public let client: SkillbusClient
    public let replica: RegistryReplica

    public init(client: SkillbusClient, replica: RegistryReplica) {
        self.client = client
        self.replica = replica
    }

    public var registry: Registry { replica.registry }
    public func changes() -> AsyncStream<Registry> { replica.changes() }
    public func makeRequestID() -> String { client.makeRequestID() }

    public func run(
        skill: String, arguments: JSONValue, roundID: String, sessionID: String, requestID: String,
        timeout: Duration?, onOutput: @escaping @Sendable (OutputBatch) -> Void
    ) async throws(SkillbusError) -> RoundDocument {
        try await client.round(
            .invoke(skill: skill, parameters: arguments), roundID: roundID, sessionID: sessionID, timeout: timeout,
            requestID: requestID, onOutput: { _, batch in onOutput(batch) })
    }

    public func ask(
        agent: String, message: String, roundID: String, sessionID: String, requestID: String, timeout: Duration
    ) async throws(SkillbusError) -> JSONValue {
        try await client.ask(
            message, agent: agent, sessionID: sessionID, roundID: roundID, timeout: timeout, requestID: requestID
        ).document
    }

    public func onConfirmation(_ decide: @escaping @Sendable (Confirmation) async -> Bool) {
        client.onConfirmation(decide)
    }
}
