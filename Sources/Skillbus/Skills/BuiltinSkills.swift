import Foundation

/// The skills every `skillbus worker` can offer, by identifier.
public enum BuiltinSkills {
    public static let identifiers = [
        "echo", "sleep", "text.stats", "text.grep", "math.eval", "file.read", "text.report",
        "memory.set", "memory.get", "memory.list", "memory.delete", "file.write", "text.lines",
    ]

    /// Makes the named built-ins. `sandbox` is where `file.read` may read.
    public static func make(_ identifiers: [String], sandbox: String, maxFileBytes: Int = 1 << 20) throws(SkillbusError)
        -> [any AgentSkill]
    {
        var skills: [any AgentSkill] = []
        for identifier in identifiers {
            switch identifier {
            case "echo": skills.append(EchoSkill())
            case "sleep": skills.append(SleepSkill())
            case "text.stats": skills.append(TextStatsSkill())
            case "text.grep": skills.append(TextGrepSkill())
            case "math.eval": skills.append(MathEvalSkill())
            case "file.read":
                skills.append(FileReadSkill(reader: SandboxedFileReader(root: sandbox, maxBytes: maxFileBytes)))
            case "text.report": skills.append(TextReportSkill())
            case "text.lines": skills.append(TextLinesSkill())
            case "memory.set": skills.append(MemorySetSkill())
            case "memory.get": skills.append(MemoryGetSkill())
            case "memory.list": skills.append(MemoryListSkill())
            case "memory.delete": skills.append(MemoryDeleteSkill())
            case "file.write":
                skills.append(FileWriteSkill(sandbox: SandboxedFileReader(root: sandbox, maxBytes: maxFileBytes)))
            default:
                throw SkillbusError(
                    .invalidConfiguration,
                    "unknown built-in skill '\(identifier)' (known: \(Self.identifiers.joined(separator: ", ")))")
            }
        }
        return skills
    }
}

/// Returns its text unchanged.
public struct EchoSkill: SynchronousSkill {
    public init() {}
    public var isIdempotent: Bool { true }
    public var retryPolicy: RetryPolicy? { RetryPolicy() }
    public var executionStyle: SkillExecutionStyle { .quick }
    public let identifier = "echo"
    public let displayName = "Echo"
    public let description = "Returns the text it is given."
    public let parameterSchema = ParameterSchema([ParameterField("text", .string, description: "Text to return")])

    public func executeNow(parameters: [String: JSONValue], context: SkillExecutionContext) throws -> SkillResult {
        .text(parameters["text"]?.stringValue ?? "")
    }
}

/// Waits, then says how long it waited. For testing timeouts, capacity and cancellation.
public struct SleepSkill: AgentSkill {
    public init() {}
    public var isIdempotent: Bool { true }
    public var retryPolicy: RetryPolicy? { RetryPolicy() }
    public var executionStyle: SkillExecutionStyle { .quick }
    public let identifier = "sleep"
    public let displayName = "Sleep"
    public let description = "Waits the given number of milliseconds (at most 10 minutes); stops early when cancelled."
    public let parameterSchema = ParameterSchema([ParameterField("ms", .integer, description: "Milliseconds to wait")])

    public func execute(parameters: [String: JSONValue], context: SkillExecutionContext) async throws -> SkillResult {
        let ms = parameters["ms"]?.intValue ?? 0
        guard (0...600_000).contains(ms) else {
            throw SkillbusError(.invalidParameters, "parameter 'ms' must be between 0 and 600000, got \(ms)")
        }
        try await Task.sleep(for: .milliseconds(ms))
        return .json(["sleptMs": .number(Double(ms))])
    }
}

/// Streams a text line by line as partial output (`context.emit`), then returns how many lines it sent.
/// It shows streamed output, and the bench measures it against `echo`.
public struct TextLinesSkill: AgentSkill {
    public init() {}
    public var executionStyle: SkillExecutionStyle { .quick }
    public let identifier = "text.lines"
    public let displayName = "Text lines"
    public let description =
        "Sends each line of a text as partial output, one every delayMs (default 0, at most 60000), and returns the count."
    public let parameterSchema = ParameterSchema([
        ParameterField("text", .string, description: "Text to stream, line by line"),
        ParameterField("delayMs", .integer, required: false, description: "Milliseconds between lines", default: 0),
    ])

    public func execute(parameters: [String: JSONValue], context: SkillExecutionContext) async throws -> SkillResult {
        let delay = parameters["delayMs"]?.intValue ?? 0
        guard (0...60_000).contains(delay) else {
            throw SkillbusError(.invalidParameters, "parameter 'delayMs' must be between 0 and 60000, got \(delay)")
        }
        var lines = (parameters["text"]?.stringValue ?? "").split(separator: "\n", omittingEmptySubsequences: false)
        if lines.last == "" { lines.removeLast() }
        for (index, line) in lines.enumerated() {
            if index > 0 && delay > 0 { try await Task.sleep(for: .milliseconds(delay)) }
            try context.emit(String(line))
        }
        return .json(["lines": .number(Double(lines.count))])
    }
}

/// Counts lines, words and characters and lists the most frequent words.
public struct TextStatsSkill: AgentSkill {
    public init() {}
    public var isIdempotent: Bool { true }
    public var retryPolicy: RetryPolicy? { RetryPolicy() }
    public let identifier = "text.stats"
    public let displayName = "Text statistics"
    public let description = "Counts lines, words and characters of a text and lists its five most frequent words."
    public let parameterSchema = ParameterSchema([ParameterField("text", .string, description: "Text to measure")])

    public func execute(parameters: [String: JSONValue], context: SkillExecutionContext) async throws -> SkillResult {
        let stats = TextStatistics.compute(parameters["text"]?.stringValue ?? "")
        return .json([
            "lines": .number(Double(stats.lines)), "words": .number(Double(stats.words)),
            "characters": .number(Double(stats.characters)),
            "topWords": .array(
                stats.topWords.map { ["word": .string($0.word), "count": .number(Double($0.count))] }),
        ])
    }
}

/// Lines of a text that match a regular expression, with their line numbers.
public struct TextGrepSkill: AgentSkill {
    public init() {}
    public var isIdempotent: Bool { true }
    public var retryPolicy: RetryPolicy? { RetryPolicy() }
    public let identifier = "text.grep"
    public let displayName = "Text grep"
    public let description = "Finds the lines of a text that match a regular expression, with 1-based line numbers."
    public let parameterSchema = ParameterSchema([
        ParameterField("pattern", .string, description: "Regular expression (ICU syntax)"),
        ParameterField("text", .string, description: "Text to search"),
    ])

    public func execute(parameters: [String: JSONValue], context: SkillExecutionContext) async throws -> SkillResult {
        let pattern = parameters["pattern"]?.stringValue ?? ""
        do {
            // A pattern that backtracks for ever stops at the deadline or at CANCEL, not when it is done.
            let matches = try TextGrep.matches(
                pattern: pattern, in: parameters["text"]?.stringValue ?? "", shouldStop: { context.isCancelled })
            return .json([
                "count": .number(Double(matches.count)),
                "matches": .array(matches.map { ["line": .number(Double($0.lineNumber)), "text": .string($0.line)] }),
            ])
        } catch {
            if error.stopped {
                if Task.isCancelled { throw SkillbusError(.cancelled, error.description) }
                throw SkillbusError(.timeout, error.description + ": its deadline passed")
            }
            throw SkillbusError(.invalidParameters, error.description)
        }
    }
}

/// Evaluates arithmetic with its own parser: + - * / ^, parentheses, unary minus, decimals.
public struct MathEvalSkill: SynchronousSkill {
    public init() {}
    public var isIdempotent: Bool { true }
    public var retryPolicy: RetryPolicy? { RetryPolicy() }
    public var executionStyle: SkillExecutionStyle { .quick }
    public let identifier = "math.eval"
    public let displayName = "Math evaluation"
    public let description = "Evaluates an arithmetic expression: + - * / ^, parentheses, unary minus, decimals."
    public let parameterSchema = ParameterSchema([
        ParameterField("expression", .string, description: "For example (1 + 2) * -3.5 ^ 2")
    ])

    public func executeNow(parameters: [String: JSONValue], context: SkillExecutionContext) throws -> SkillResult {
        let expression = parameters["expression"]?.stringValue ?? ""
        do {
            let value = try MathExpression.evaluate(expression)
            return .json(["expression": .string(expression), "value": .number(value)])
        } catch {
            throw SkillbusError(.invalidParameters, "cannot evaluate '\(expression)' \(error.description)")
        }
    }
}

/// Reads a text file inside the worker's sandbox directory.
public struct FileReadSkill: AgentSkill {
    public let reader: SandboxedFileReader
    public init(reader: SandboxedFileReader) { self.reader = reader }
    public var isIdempotent: Bool { true }
    public var retryPolicy: RetryPolicy? { RetryPolicy() }
    public let identifier = "file.read"
    public let displayName = "Read file"
    public let description = "Reads a UTF-8 text file inside the agent's sandbox directory (size-limited)."
    public let parameterSchema = ParameterSchema([
        ParameterField("path", .string, description: "Path relative to the sandbox directory")
    ])

    public func execute(parameters: [String: JSONValue], context: SkillExecutionContext) async throws -> SkillResult {
        let path = parameters["path"]?.stringValue ?? ""
        do {
            return .text(try reader.read(path))
        } catch {
            throw SkillbusError(.skillFailed, error.description)
        }
    }
}

/// Writes a text file inside the sandbox. It changes files, so every invocation waits for the client's
/// approval first (`needsConfirmation`).
public struct FileWriteSkill: AgentSkill {
    public let sandbox: SandboxedFileReader
    public init(sandbox: SandboxedFileReader) { self.sandbox = sandbox }
    public let identifier = "file.write"
    public let displayName = "Write file"
    public let description = "Writes a UTF-8 text file inside the agent's sandbox directory, replacing it. Asks first."
    public var needsConfirmation: Bool { true }
    /// One write at a time on an agent: two writes of one file must not interleave.
    public var concurrencyLimit: Int? { 1 }
    public let parameterSchema = ParameterSchema([
        ParameterField("path", .string, description: "Path relative to the sandbox directory"),
        ParameterField("text", .string, description: "The file's new contents"),
    ])

    public func execute(parameters: [String: JSONValue], context: SkillExecutionContext) async throws -> SkillResult {
        let path = parameters["path"]?.stringValue ?? ""
        do {
            let bytes = try sandbox.write(parameters["text"]?.stringValue ?? "", to: path)
            return .json(["path": .string(path), "bytes": .number(Double(bytes))])
        } catch {
            throw SkillbusError(.skillFailed, error.description)
        }
    }
}

/// A composite: reads a file with `file.read` and summarises it with `text.stats`, wherever in the registry
/// those run (this agent or another), in the caller's round.
public struct TextReportSkill: AgentSkill {
    public init() {}
    public var isIdempotent: Bool { true }
    public var retryPolicy: RetryPolicy? { RetryPolicy() }
    public let identifier = "text.report"
    public let displayName = "Text report"
    public let description = "Reads a file (file.read) and reports its statistics (text.stats), on any agents."
    public let parameterSchema = ParameterSchema([
        ParameterField("path", .string, description: "Path relative to the sandbox of the agent that reads it")
    ])

    public func execute(parameters: [String: JSONValue], context: SkillExecutionContext) async throws -> SkillResult {
        let path = parameters["path"] ?? ""
        guard case .text(let text) = try await context.invoke("file.read", parameters: ["path": path]) else {
            throw SkillbusError(.skillFailed, "file.read did not return text")
        }
        let stats = try await context.invoke("text.stats", parameters: ["text": .string(text)])
        guard case .json(let summary) = stats else {
            throw SkillbusError(.skillFailed, "text.stats did not return JSON")
        }
        return .json(["path": path, "bytes": .number(Double(text.utf8.count)), "stats": summary])
    }
}
