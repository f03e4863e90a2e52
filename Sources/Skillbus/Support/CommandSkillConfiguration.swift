/// A skill run by a program, as a worker config declares it (an entry of `commands`): identifier,
/// description and parameters as any skill has, and how to run it — `command`, an argument list with
/// `{param}` placeholders (no shell), or the parameters as JSON on standard input; a working directory
/// inside the sandbox; the environment variables it may see; a timeout. Checked when the config is read,
/// every error naming its key; `CommandSkill` then finds the program and the directory on disk.
public struct CommandSkillSpec: Sendable, Equatable {
    /// What the program gets on standard input.
    public enum Input: String, Sendable, CaseIterable {
        /// Nothing (/dev/null): the parameters are in the arguments.
        case none
        /// The parameters (validated, defaults applied) as one JSON object, then end of file.
        case json
    }

    /// What its standard output becomes.
    public enum Output: String, Sendable, CaseIterable {
        /// The whole output, as text.
        case text
        /// The whole output, parsed as JSON: a `json` result.
        case json
    }

    public var identifier: String
    public var displayName: String
    public var description: String
    public var parameters: ParameterSchema
    /// The program (no placeholder) and its arguments, as written.
    public var command: [String]
    public var template: CommandTemplate
    public var stdin = Input.none
    public var result = Output.text
    /// Each line of standard output is also sent as partial output while the program runs.
    public var stream = true
    /// Relative to the worker's sandbox; it must stay inside it.
    public var workingDirectory = "."
    /// Variables passed on from the worker's environment when set there. PATH always is.
    public var environment: [String] = []
    /// The program is stopped (its whole process group) after this long.
    public var timeoutMs = 30_000
    public var needsConfirmation = false
    /// Where it was declared, for messages: `configs/local.json: workers[2].commands[0]`.
    public var location: String

    static let keys: Set<String> = [
        "identifier", "displayName", "description", "parameters", "command", "stdin", "result", "stream",
        "workingDirectory", "environment", "timeoutMs", "confirm",
    ]

    init(reading object: ConfigObject) throws(SkillbusError) {
        location = "\(object.file): \(object.path)"
        guard let identifier = try object.string("identifier") else {
            throw object.error("identifier", "missing: every command skill needs one")
        }
        guard SkillDescriptor.isValidIdentifier(identifier) else {
            throw object.error("identifier", "'\(identifier)' is invalid: use 1-128 of a-z A-Z 0-9 . _ -")
        }
        self.identifier = identifier
        displayName = try object.string("displayName") ?? identifier
        description = try object.string("description") ?? ""
        do throws(SkillbusError) {
            parameters = try ParameterSchema(json: object.values["parameters"] ?? [])
        } catch {
            throw object.error("parameters", error.message)
        }
        if let problem = parameters.problems.first { throw object.error("parameters", problem) }
        guard let command = try object.stringArray("command"), let program = command.first else {
            throw object.error("command", "missing: an array with the program and its arguments, e.g. [\"wc\", \"-l\", \"{path}\"]")
        }
        guard !program.isEmpty else { throw object.error("command[0]", "the program is empty") }
        self.command = command
        do throws(CommandTemplate.Problem) {
            template = try CommandTemplate(command)
        } catch {
            throw object.error("command[\(error.index)]", error.reason)
        }
        if template.hasPlaceholder(0) {
            throw object.error("command[0]", "the program cannot come from a parameter; name it, and pass parameters as arguments")
        }
        let declared = parameters.fields.map(\.name)
        for (index, argument) in command.enumerated() {
            for name in (try? CommandTemplate([argument]))?.parameterNames ?? [] where !declared.contains(name) {
                throw object.error(
                    "command[\(index)]",
                    "'{\(name)}' names no parameter (parameters: \(declared.isEmpty ? "none" : declared.joined(separator: ", ")))")
            }
        }
        stdin = try Self.choice(object, "stdin") ?? stdin
        result = try Self.choice(object, "result") ?? result
        stream = try object.bool("stream") ?? stream
        needsConfirmation = try object.bool("confirm") ?? needsConfirmation
        timeoutMs = try object.int("timeoutMs", minimum: 1, maximum: Wire.maxTimeoutMs) ?? timeoutMs
        workingDirectory = try object.string("workingDirectory") ?? workingDirectory
        if workingDirectory.isEmpty || workingDirectory.hasPrefix("/") {
            throw object.error("workingDirectory", "must be a path relative to the sandbox, got '\(workingDirectory)'")
        }
        environment = try object.stringArray("environment") ?? environment
        for (index, name) in environment.enumerated() where !Self.isVariableName(name) {
            throw object.error("environment[\(index)]", "'\(name)' is no variable name (letters, digits, _; not first a digit)")
        }
    }

    private static func choice<Value: RawRepresentable & CaseIterable>(
        _ object: ConfigObject, _ key: String
    ) throws(SkillbusError) -> Value? where Value.RawValue == String {
        guard let text = try object.string(key) else { return nil }
        guard let value = Value(rawValue: text) else {
            let allowed = Value.allCases.map(\.rawValue).joined(separator: " or ")
            throw object.error(key, "expected \(allowed), got '\(text)'")
        }
        return value
    }

    static func isVariableName(_ name: String) -> Bool {
        guard let first = name.utf8.first, !(48...57).contains(first) else { return false }
        return name.utf8.allSatisfy { byte in
            (48...57).contains(byte) || (65...90).contains(byte) || (97...122).contains(byte) || byte == UInt8(ascii: "_")
        }
    }

    /// The config file's form (what `up` hands its workers).
    public var json: JSONValue {
        var object: [String: JSONValue] = [
            "identifier": .string(identifier), "displayName": .string(displayName), "description": .string(description),
            "parameters": parameters.json, "command": .array(command.map { .string($0) }),
            "stdin": .string(stdin.rawValue), "result": .string(result.rawValue), "stream": .bool(stream),
            "workingDirectory": .string(workingDirectory), "environment": .array(environment.map { .string($0) }),
            "timeoutMs": .number(Double(timeoutMs)),
        ]
        if needsConfirmation { object["confirm"] = true }
        return .object(object)
    }

    /// Checks a worker's command skills against each other and its built-ins.
    static func checkUnique(_ specs: [CommandSkillSpec], builtins: [String], in object: ConfigObject) throws(SkillbusError) {
        var seen = Set<String>()
        for (index, spec) in specs.enumerated() {
            if builtins.contains(spec.identifier) {
                throw object.error(
                    "commands[\(index)].identifier",
                    "'\(spec.identifier)' is also a built-in skill this worker offers (list the built-ins in 'skills' without it)")
            }
            guard seen.insert(spec.identifier).inserted else {
                throw object.error("commands[\(index)].identifier", "'\(spec.identifier)' is declared twice")
            }
        }
    }
}
