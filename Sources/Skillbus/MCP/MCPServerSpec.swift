/// An MCP server a worker mounts (an entry of its config's `mcpServers`): a name, and either a command to
/// launch (stdio) or a URL (Streamable HTTP). Its tools become the skills `<name>.<tool>`. Checked when the
/// config is read; every error names the entry and the key.
public struct MCPServerSpec: Sendable, Equatable {
    public enum Connection: Sendable, Equatable {
        /// The program (looked up in PATH), its arguments, and variables added to the worker's environment.
        case stdio(command: String, arguments: [String], environment: [String: String])
        /// The server's MCP endpoint; the bearer token, if any, is read from this environment variable when
        /// the worker connects (never written in the config).
        case http(url: String, bearerTokenEnvironment: String?)
    }

    public var name: String
    public var connection: Connection
    /// The operator vouches for its annotations: a readOnlyHint tool becomes pure (cached, shared).
    public var trusted = false
    /// The skills' default timeout when the client names none (ms); nil: the bus's default.
    public var timeoutMs: Int?
    /// How long the bus may answer its pure tools (readOnlyHint on a trusted server) from its cache (ms).
    public var cacheMs: Int?

    public init(
        name: String, connection: Connection, trusted: Bool = false, timeoutMs: Int? = nil, cacheMs: Int? = nil
    ) {
        self.name = name
        self.connection = connection
        self.trusted = trusted
        self.timeoutMs = timeoutMs
        self.cacheMs = cacheMs
    }

    static let keys: Set<String> = [
        "name", "command", "args", "env", "url", "bearerTokenEnv", "trusted", "timeoutMs", "cacheMs",
    ]

    /// A server name: what skill identifiers allow, without dots (the dot separates it from the tool).
    static func isValidName(_ name: String) -> Bool {
        !name.isEmpty && name.utf8.count <= 64 && !name.contains(".") && SkillDescriptor.isValidIdentifier(name)
    }

    init(reading object: ConfigObject) throws(SkillbusError) {
        guard let name = try object.string("name") else {
            throw object.error("name", "missing: every MCP server needs a name (its tools become <name>.<tool>)")
        }
        guard Self.isValidName(name) else {
            throw object.error("name", "'\(name.prefix(64))' is no server name: use 1-64 of a-z A-Z 0-9 _ - (no dot)")
        }
        self.name = name
        let command = try object.string("command")
        let url = try object.string("url")
        switch (command, url) {
        case (let command?, nil):
            guard !command.isEmpty else { throw object.error("command", "the program is empty") }
            if object.values["bearerTokenEnv"] != nil {
                throw object.error("bearerTokenEnv", "only a server with a 'url' takes a bearer token")
            }
            var environment: [String: String] = [:]
            if let env = try object.object("env", allowed: nil) {
                for (key, value) in env.values.sorted(by: { $0.key < $1.key }) {
                    guard CommandSkillSpec.isVariableName(key) else {
                        throw env.error(key, "'\(key)' is no variable name (letters, digits, _; not first a digit)")
                    }
                    guard let text = value.stringValue else {
                        throw env.error(key, "expected a string, got \(value.typeName)")
                    }
                    environment[key] = text
                }
            }
            connection = .stdio(
                command: command, arguments: try object.stringArray("args") ?? [], environment: environment)
        case (nil, let url?):
            guard url.hasPrefix("http://") || url.hasPrefix("https://") else {
                throw object.error("url", "expected an http:// or https:// URL, got '\(url.prefix(200))'")
            }
            for key in ["args", "env"] where object.values[key] != nil {
                throw object.error(key, "only a server with a 'command' takes '\(key)'")
            }
            let token = try object.string("bearerTokenEnv")
            if let token, !CommandSkillSpec.isVariableName(token) {
                throw object.error(
                    "bearerTokenEnv", "'\(token)' is no variable name (letters, digits, _; not first a digit)")
            }
            connection = .http(url: url, bearerTokenEnvironment: token)
        case (nil, nil):
            throw object.error("command", "missing: give either 'command' (stdio) or 'url' (Streamable HTTP)")
        case (_?, _?):
            throw object.error("url", "give either 'command' (stdio) or 'url' (Streamable HTTP), not both")
        }
        trusted = try object.bool("trusted") ?? false
        timeoutMs = try object.int("timeoutMs", minimum: 1, maximum: Wire.maxTimeoutMs)
        cacheMs = try object.int("cacheMs", minimum: 1, maximum: SkillDescriptor.maxCacheMs)
        if cacheMs != nil, !trusted {
            throw object.error("cacheMs", "needs \"trusted\": true (only a trusted server's read-only tools are pure)")
        }
    }

    /// The config file's form.
    public var json: JSONValue {
        var object: [String: JSONValue] = ["name": .string(name)]
        switch connection {
        case .stdio(let command, let arguments, let environment):
            object["command"] = .string(command)
            if !arguments.isEmpty { object["args"] = .array(arguments.map { .string($0) }) }
            if !environment.isEmpty { object["env"] = .object(environment.mapValues { .string($0) }) }
        case .http(let url, let token):
            object["url"] = .string(url)
            if let token { object["bearerTokenEnv"] = .string(token) }
        }
        if trusted { object["trusted"] = true }
        if let timeoutMs { object["timeoutMs"] = .number(Double(timeoutMs)) }
        if let cacheMs { object["cacheMs"] = .number(Double(cacheMs)) }
        return .object(object)
    }

    /// Reads the `mcpServers` list; every bad entry is reported, and two entries with one name are refused.
    static func list(in object: ConfigObject) throws(SkillbusError) -> [MCPServerSpec]? {
        guard let entries = try object.objects("mcpServers", allowed: keys) else { return nil }
        var servers: [MCPServerSpec] = []
        var problems: [String] = []
        for entry in entries {
            do throws(SkillbusError) {
                let server = try MCPServerSpec(reading: entry)
                if servers.contains(where: { $0.name == server.name }) {
                    problems.append(entry.error("name", "server name '\(server.name)' is used twice").message)
                } else {
                    servers.append(server)
                }
            } catch {
                problems += ConfigObject.problems(in: error)
            }
        }
        try ConfigObject.throwing(problems)
        return servers
    }
}
