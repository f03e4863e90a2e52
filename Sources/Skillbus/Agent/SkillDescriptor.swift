import Foundation

/// A skill as the registry and the wire know it: everything but the code.
public struct SkillDescriptor: Sendable, Equatable {
    public var identifier: String
    public var displayName: String
    public var description: String
    public var parameters: ParameterSchema
    /// Milliseconds a request may take when the client names no timeout; nil takes the bus's default.
    public var defaultTimeoutMs: Int?
    /// Free-form metadata (tags, version, owner, …) that the registry keeps and passes on untouched.
    public var metadata: [String: JSONValue]
    /// Before it runs, the client that asked must approve the invocation (PROTOCOL §3.8).
    public var needsConfirmation: Bool
    /// How the bus retries a failed invocation (PROTOCOL §5.2.1); nil: it does not.
    public var retry: RetryPolicy?
    /// Running it twice does no more than running it once: a lost or timed-out attempt may be repeated.
    public var idempotent: Bool
    /// Invocations that may run at once on one agent; nil: up to the agent's capacity.
    public var concurrency: Int?
    /// Its result depends on its parameters alone (PROTOCOL §5.2.2); with `cacheMs`, how long the bus may
    /// answer an identical invocation from its cache.
    public var pure: Bool
    public var cacheMs: Int?

    public init(
        identifier: String, displayName: String, description: String, parameters: ParameterSchema,
        defaultTimeoutMs: Int? = nil, metadata: [String: JSONValue] = [:], needsConfirmation: Bool = false,
        retry: RetryPolicy? = nil, idempotent: Bool = false, concurrency: Int? = nil, pure: Bool = false,
        cacheMs: Int? = nil
    ) {
        self.pure = pure
        self.cacheMs = cacheMs
        self.needsConfirmation = needsConfirmation
        self.retry = retry
        self.idempotent = idempotent
        self.concurrency = concurrency
        self.identifier = identifier
        self.displayName = displayName
        self.description = description
        self.parameters = parameters
        self.defaultTimeoutMs = defaultTimeoutMs
        self.metadata = metadata
    }

    public var json: JSONValue {
        var object: [String: JSONValue] = [
            "identifier": .string(identifier), "displayName": .string(displayName),
            "description": .string(description), "parameters": parameters.json,
        ]
        if let defaultTimeoutMs { object["defaultTimeoutMs"] = .number(Double(defaultTimeoutMs)) }
        if !metadata.isEmpty { object["metadata"] = .object(metadata) }
        if needsConfirmation { object["confirm"] = true }
        if let retry { object["retry"] = retry.json }
        if idempotent { object["idempotent"] = true }
        if let concurrency { object["concurrency"] = .number(Double(concurrency)) }
        if pure { object["pure"] = true }
        if let cacheMs { object["cacheMs"] = .number(Double(cacheMs)) }
        return .object(object)
    }

    /// Parses and checks a descriptor from a registration.
    public init(json: JSONValue) throws(SkillbusError) {
        guard let identifier = json["identifier"]?.stringValue else {
            throw SkillbusError(.invalidRegistration, "a skill has no string 'identifier'")
        }
        guard SkillDescriptor.isValidIdentifier(identifier) else {
            throw SkillbusError(
                .invalidRegistration,
                "skill identifier '\(identifier)' is invalid: use 1-128 of a-z A-Z 0-9 . _ -")
        }
        let parameters = try ParameterSchema(json: json["parameters"] ?? .array([]))
        let problems = parameters.problems
        guard problems.isEmpty else {
            throw SkillbusError(
                .invalidRegistration, "skill '\(identifier)': " + problems.joined(separator: "; "))
        }
        var defaultTimeoutMs: Int?
        if let value = json["defaultTimeoutMs"], value != .null {
            guard let ms = value.intValue, (1...Wire.maxTimeoutMs).contains(ms) else {
                throw SkillbusError(
                    .invalidRegistration,
                    "skill '\(identifier)': 'defaultTimeoutMs' must be an integer from 1 to \(Wire.maxTimeoutMs)")
            }
            defaultTimeoutMs = ms
        }
        var metadata: [String: JSONValue] = [:]
        if let value = json["metadata"], value != .null {
            guard let object = value.objectValue else {
                throw SkillbusError(.invalidRegistration, "skill '\(identifier)': 'metadata' must be an object")
            }
            metadata = object
        }
        var needsConfirmation = false
        if let value = json["confirm"], value != .null {
            guard let flag = value.boolValue else {
                throw SkillbusError(.invalidRegistration, "skill '\(identifier)': 'confirm' must be true or false")
            }
            needsConfirmation = flag
        }
        let (retry, idempotent, concurrency) = try Self.policies(json, identifier)
        let (pure, cacheMs) = try Self.cachePolicy(json, identifier)
        self.init(
            identifier: identifier, displayName: json["displayName"]?.stringValue ?? identifier,
            description: json["description"]?.stringValue ?? "", parameters: parameters,
            defaultTimeoutMs: defaultTimeoutMs, metadata: metadata, needsConfirmation: needsConfirmation,
            retry: retry, idempotent: idempotent, concurrency: concurrency, pure: pure, cacheMs: cacheMs)
    }

    public static func isValidIdentifier(_ identifier: String) -> Bool {
        !identifier.isEmpty && identifier.utf8.count <= 128
            && identifier.utf8.allSatisfy { byte in
                (48...57).contains(byte) || (65...90).contains(byte) || (97...122).contains(byte)
                    || byte == UInt8(ascii: ".") || byte == UInt8(ascii: "_") || byte == UInt8(ascii: "-")
            }
    }
}
