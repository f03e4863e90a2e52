#if canImport(Glibc)
    import Glibc
#endif
import Foundation

/// A skill run by a program (a worker config's `commands`, `CommandSkillSpec`): any language, one process
/// per invocation. Its standard output lines stream as partial output; the result is the whole output as
/// text or JSON; a non-zero exit is `command_failed` with the exit code and the last lines of standard
/// error; cancel or timeout stops its whole process group (`CommandProcess`).
public struct CommandSkill: AgentSkill {
    public let spec: CommandSkillSpec
    /// The program's absolute path, found when the skill was made.
    public let program: String
    /// The working directory, resolved: inside the sandbox.
    public let directory: String
    /// The child's whole environment: PATH, then the allowed variables that are set.
    public let environment: [String]

    public var identifier: String { spec.identifier }
    public var displayName: String { spec.displayName }
    public var description: String { spec.description }
    public var parameterSchema: ParameterSchema { spec.parameters }
    public var defaultTimeoutMs: Int? { spec.timeoutMs }
    public var needsConfirmation: Bool { spec.needsConfirmation }

    /// Finds the program (a path relative to the current directory, or a name looked up in PATH) and the
    /// working directory inside `sandbox`; an error names the config key.
    public init(
        spec: CommandSkillSpec, sandbox: String,
        environment inherited: [String: String] = ProcessInfo.processInfo.environment
    ) throws(SkillbusError) {
        self.spec = spec
        func problem(_ key: String, _ message: String) -> SkillbusError {
            SkillbusError(.invalidConfiguration, "\(spec.location).\(key): \(message)")
        }
        let path = inherited["PATH"] ?? "/usr/local/bin:/usr/bin:/bin"
        let name = spec.command[0]
        if name.contains("/") {
            let absolute = name.hasPrefix("/") ? name : FileManager.default.currentDirectoryPath + "/" + name
            guard Self.isExecutableFile(absolute) else {
                throw problem("command[0]", "'\(name)' is not an executable file (relative paths start from \(FileManager.default.currentDirectoryPath))")
            }
            program = absolute
        } else {
            let found = path.split(separator: ":").map { "\($0)/\(name)" }.first(where: Self.isExecutableFile)
            guard let found else { throw problem("command[0]", "program '\(name)' is not found in PATH (\(path))") }
            program = found
        }
        guard let root = Self.realPath(sandbox) else {
            throw problem("workingDirectory", "the sandbox '\(sandbox)' does not exist")
        }
        guard let resolved = Self.realPath(root + "/" + spec.workingDirectory) else {
            throw problem("workingDirectory", "'\(spec.workingDirectory)' does not exist in the sandbox '\(sandbox)'")
        }
        guard resolved == root || resolved.hasPrefix(root == "/" ? "/" : root + "/") else {
            throw problem("workingDirectory", "'\(spec.workingDirectory)' is outside the sandbox '\(sandbox)'")
        }
        var isDirectory: ObjCBool = false
        guard FileManager.default.fileExists(atPath: resolved, isDirectory: &isDirectory), isDirectory.boolValue else {
            throw problem("workingDirectory", "'\(spec.workingDirectory)' is not a directory")
        }
        directory = resolved
        environment = ["PATH=" + path] + spec.environment.filter { $0 != "PATH" }.compactMap { variable in
            inherited[variable].map { "\(variable)=\($0)" }
        }
    }

    public func execute(parameters: [String: JSONValue], context: SkillExecutionContext) async throws -> SkillResult {
        let started = ContinuousClock.now
        let ownDeadline = started + .milliseconds(spec.timeoutMs)
        let process = try CommandProcess.spawn(
            CommandProcess.Launch(
                program: program, arguments: spec.template.render(parameters), environment: environment,
                directory: directory,
                input: spec.stdin == .json ? JSONValue.object(parameters).serialized() + [UInt8(ascii: "\n")] : nil))
        let stream = spec.stream
        let ending = await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<CommandProcess.Ending, Never>) in
                // The run blocks in poll(2): a thread of its own, never the cooperative pool.
                let thread = Thread {
                    let ending = process.run(
                        deadline: min(ownDeadline, context.deadline),
                        maxStdoutBytes: context.outputLimitBytes ?? 1 << 20
                    ) { line throws(SkillbusError) in
                        if stream { try context.emit(line) }
                    }
                    continuation.resume(returning: ending)
                }
                thread.name = "skillbus-command-\(spec.identifier)"
                thread.start()
            }
        } onCancel: {
            process.stop(.cancelled)
        }
        return try outcome(of: ending, timedOutOnItsOwn: ownDeadline <= context.deadline)
    }

    /// The result, or the error, of a run that ended.
    func outcome(of ending: CommandProcess.Ending, timedOutOnItsOwn: Bool) throws(SkillbusError) -> SkillResult {
        let stderr: JSONValue = .array(ending.stderrTail.map { .string($0) })
        switch ending.stopped {
        case .cancelled:
            throw SkillbusError(.cancelled, "'\(identifier)' was cancelled; its processes were stopped")
        case .timedOut:
            let why = timedOutOnItsOwn
                ? "ran longer than its timeout of \(spec.timeoutMs) ms" : "did not end before the invocation's deadline"
            throw SkillbusError(.timeout, "'\(identifier)' \(why); its processes were stopped", details: ["stderr": stderr])
        case .failed(let error):
            throw SkillbusError(error.code, "'\(identifier)': \(error.message)", details: error.details)
        case nil:
            break
        }
        let last = ending.stderrTail.last.map { ": \($0.prefix(200))" } ?? ""
        switch ending.status {
        case .signalled(let number):
            throw SkillbusError(
                .commandFailed, "'\(identifier)' was killed by signal \(number)\(last)",
                details: ["signal": .number(Double(number)), "stderr": stderr])
        case .exited(let code) where code != 0:
            throw SkillbusError(
                .commandFailed, "'\(identifier)' exited with code \(code)\(last)",
                details: ["exitCode": .number(Double(code)), "stderr": stderr])
        case .exited:
            break
        }
        switch spec.result {
        case .text:
            return .text(String(decoding: ending.stdout, as: UTF8.self))
        case .json:
            do {
                return .json(try JSONValue(parsing: ending.stdout))
            } catch {
                throw SkillbusError(
                    .commandFailed, "'\(identifier)' exited with code 0 but its standard output is not JSON: \(error)",
                    details: ["exitCode": 0, "stderr": stderr])
            }
        }
    }

    static func isExecutableFile(_ path: String) -> Bool {
        var status = stat()
        return stat(path, &status) == 0 && (status.st_mode & S_IFMT) == S_IFREG && access(path, X_OK) == 0
    }

    static func realPath(_ path: String) -> String? {
        guard let resolved = realpath(path, nil) else { return nil }
        defer { free(resolved) }
        return String(cString: resolved)
    }
}
