import Synchronization

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
    /// Asks `agent` to take a turn answering `message`; returns the turn document. `onPiece` hears the reply
    /// as it streams.
    func ask(
        agent: String, message: String, roundID: String, sessionID: String, requestID: String, timeout: Duration,
        onPiece: @escaping @Sendable (String) -> Void
    ) async throws(SkillbusError) -> JSONValue
    /// Adds one who decides confirmations the bus asks of this client: it answers nil for one that is not of
    /// its calls (each MCP session is one; the first that knows the call decides, and none: refused).
    func addConfirmer(_ key: String, _ decide: @escaping @Sendable (Confirmation) async -> Bool?)
    func removeConfirmer(_ key: String)
}

/// The bus through a `SkillbusClient` and a live `RegistryReplica`, as `skillbus send` reaches it.
public struct SkillbusMCPBus: MCPBus {
    public let client: SkillbusClient
    public let replica: RegistryReplica
    private let confirmers = Confirmers()

    /// Every session's decider, by key; the client asks them in turn.
    private final class Confirmers: Sendable {
        let table = Mutex<[String: @Sendable (Confirmation) async -> Bool?]>([:])
    }

    public init(client: SkillbusClient, replica: RegistryReplica) {
        self.client = client
        self.replica = replica
        let confirmers = self.confirmers
        client.onConfirmation { confirmation in
            for decide in confirmers.table.withLock({ Array($0.values) }) {
                if let decision = await decide(confirmation) { return decision }
            }
            return false
        }
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
        agent: String, message: String, roundID: String, sessionID: String, requestID: String, timeout: Duration,
        onPiece: @escaping @Sendable (String) -> Void
    ) async throws(SkillbusError) -> JSONValue {
        try await client.ask(
            message, agent: agent, sessionID: sessionID, roundID: roundID, timeout: timeout, onPiece: onPiece,
            requestID: requestID
        ).document
    }

    public func addConfirmer(_ key: String, _ decide: @escaping @Sendable (Confirmation) async -> Bool?) {
        confirmers.table.withLock { $0[key] = decide }
    }

    public func removeConfirmer(_ key: String) {
        confirmers.table.withLock { _ = $0.removeValue(forKey: key) }
    }
}
