import Foundation
import Skillbus
import SkillbusZMQ
import Synchronization

/// `skillbus mcp`: the bus as an MCP server, over stdio (a client launches it as a subprocess).
public enum MCPCommand: SkillbusCommand {
    public static let spec = CommandSpec(
        name: "mcp",
        abstract: "Serve the bus's skills and agents to an MCP client (Claude, an IDE, an agent SDK).",
        discussion: """
            Speaks the Model Context Protocol on standard input and output (newline-delimited JSON-RPC; logs
            go to standard error), so an MCP client can launch it as a subprocess. Every skill in the registry
            is a tool (its parameters as the tool's JSON Schema), and every agent with a planner is a tool
            ask.<agent> that takes a message. A call runs a round on the bus as 'skillbus send' does: partial
            output comes as progress, a cancelled call cancels the round, a skill that needs confirmation asks
            the user through the client (elicitation) or is refused. An identical call within --reuse-window
            gets the stored result of the first instead of running again. See docs/MCP.md.

            With --http it serves Streamable HTTP instead, on one endpoint /mcp: POST a message (answered
            with JSON, or an event stream for a tool call), GET the session's stream (Last-Event-ID resumes
            one), DELETE to end the session. It listens on loopback only, unless bearer tokens are given
            (--http-token client:FILE; a reader token may list tools but not call them); browsers' requests
            are refused unless their Origin is localhost's or given with --http-origin.

            EXAMPLE: skillbus mcp --coordinator tcp://127.0.0.1:5555 --feed tcp://127.0.0.1:5556
                     skillbus mcp --http 127.0.0.1:8765 --http-token client:/etc/skillbus/mcp-token
            """,
        options: [
            coordinatorOption, feedOption, serverKeyOption, keyOption, connectTimeoutOption,
            OptionSpec(
                "--timeout", value: "SECONDS",
                help: "How long a call's round may take (default: the skill's own, else the bus's 15)."),
            OptionSpec(
                "--reuse-window", value: "SECONDS",
                help: "Identical calls this close together share a round (default 30; 0: never)."),
            OptionSpec("--page-size", value: "N", help: "Tools per tools/list page (default 100)."),
            OptionSpec("--session", value: "ID", help: "The Skillbus session calls run in (default: a new one)."),
            OptionSpec(
                "--http", value: "HOST:PORT",
                help: "Serve Streamable HTTP on HOST:PORT (path /mcp) instead of stdio; loopback unless tokens."),
            OptionSpec(
                "--http-token", value: "ROLE:FILE",
                help: "A bearer token (FILE's first line) and its role, client or reader; then none else.",
                repeatable: true),
            OptionSpec(
                "--http-origin", value: "ORIGIN", help: "An Origin allowed besides localhost's.", repeatable: true),
            OptionSpec(
                "--http-stream-limit", value: "SECONDS",
                help: "Close a call's event stream after this long; the client resumes it (default: never)."),
            logLevelOption,
        ])

    /// A message longer than this (a line of standard input) is refused, not held.
    static let maxMessageBytes = 4 << 20

    public static func run(_ arguments: ParsedArguments) async throws -> Int32 {
        let endpoint = try Defaults.bus(arguments, spec)
        let feed = try Defaults.feed(arguments, spec)
        let settings = try settings(arguments)
        // Every mistake of the command line is refused before anything connects.
        let http = try httpSettings(arguments)
        let connectTimeout = try Defaults.connectTimeout(arguments, spec, within: nil)
        let logger = Logger(label: "mcp", level: try Logger.Level(option: arguments.value("--log-level"), spec: spec))
        // A client that went away must not kill us with SIGPIPE in the middle of a write.
        signal(SIGPIPE, SIG_IGN)
        let signals = SignalWatcher()
        let context = try ZMQContext()
        let client = try await SkillbusClient.connect(
            endpoint: endpoint, context: context, credentials: try Defaults.credentials(arguments, spec))
        let replica = try await RegistryReplica.connect(client: client, feedEndpoint: feed, context: context)
        // Serve even without a registry yet: the client hears list_changed once it comes.
        if await !replica.waitUntil(timeout: connectTimeout) {
            logger.warning(
                "no registry from the coordinator at \(endpoint) and its feed \(feed) within \(connectTimeout) (is it "
                    + "running; with keys, does its feedRoles admit this key?); serving anyway, tools come when it does")
        }
        let bus = SkillbusMCPBus(client: client, replica: replica)
        if let http {
            // Stopping the endpoint cancels its sessions' calls and waits for them.
            let code = try await serveHTTP(
                http, bus: bus, settings: settings, arguments: arguments, logger: logger, signals: signals)
            await closeWhenQuiet(bus, context: context) { 0 }
            return code
        }
        let output = StandardOutputLines()
        let server = MCPServer(bus: bus, settings: settings, logger: logger, general: output.sink)
        logger.info("serving MCP on stdio for the bus at \(endpoint) (session \(settings.sessionID))")
        let input = FunctionService {
            await InputLines.read(STDIN_FILENO, maxBytes: maxMessageBytes) { line in
                server.receive(line, output: output.sink)
            } tooLong: {
                output.send(.error(id: nil, .invalidRequest("message longer than \(maxMessageBytes) bytes")))
            }
            logger.info("standard input closed: stopping")
        }
        let watcher = FunctionService { await server.watchRegistry() }
        try await runUntilStopped([watcher, input], signals: signals, logger: logger)
        server.close()
        await closeWhenQuiet(bus, context: context) { server.callsInFlight }
        return 0
    }

    /// Lets the calls that closing cancelled tell the bus (their CANCELs), 2 s at most, then closes the
    /// replica and the connection; ending the context sends what is still queued.
    static func closeWhenQuiet(
        _ bus: SkillbusMCPBus, context: ZMQContext, callsInFlight: @Sendable () -> Int
    ) async {
        let deadline = ContinuousClock.now + .seconds(2)
        while callsInFlight() > 0 && ContinuousClock.now < deadline { try? await Task.sleep(for: .milliseconds(10)) }
        bus.replica.close()
        bus.client.close()
        await context.terminate(within: .seconds(1))
    }

    /// Streamable HTTP: a session per client, each with its own MCP server on the one bus connection.
    static func serveHTTP(
        _ http: MCPHTTPEndpoint.Settings, bus: SkillbusMCPBus, settings: MCPServer.Settings,
        arguments: ParsedArguments, logger: Logger, signals: SignalWatcher
    ) async throws -> Int32 {
        let ownSessions = arguments.value("--session") == nil
        let endpoint = try MCPHTTPEndpoint(settings: http, logger: logger) { general in
            var session = settings
            // Each client its own Skillbus session (an agent keeps each one's context apart), unless one is named.
            if ownSessions { session.sessionID = "mcp-" + UUID().uuidString.lowercased().prefix(8) }
            return MCPServer(bus: bus, settings: session, logger: logger, general: general)
        }
        let access = http.tokens.isEmpty ? "no token" : "\(http.tokens.count) token(s)"
        print("skillbus mcp ready: http://\(endpoint.address)\(http.path) (\(access))")
        let watcher = FunctionService { await endpoint.watchRegistry(bus) }
        try await runUntilStopped([watcher], signals: signals, logger: logger)
        // Stopping waits for the HTTP thread: not on the cooperative pool.
        try await OwnThread.run { endpoint.stop() }
        return 0
    }

    static func httpSettings(_ arguments: ParsedArguments) throws -> MCPHTTPEndpoint.Settings? {
        guard let text = arguments.value("--http") else {
            for option in ["--http-token", "--http-origin", "--http-stream-limit"] where arguments.value(option) != nil
            {
                throw UsageError(spec, "option '\(option)' needs --http")
            }
            return nil
        }
        var http: MCPHTTPEndpoint.Settings
        do throws(SkillbusError) {
            http = MCPHTTPEndpoint.Settings(address: try HTTPAddress(parsing: text))
        } catch {
            throw UsageError(spec, "option '--http': \(error.message)")
        }
        for item in arguments.all("--http-token") {
            guard let colon = item.firstIndex(of: ":"), let access = MCPAccess(rawValue: String(item[..<colon])) else {
                throw UsageError(
                    spec, "option '--http-token': expected ROLE:FILE with ROLE client or reader, got '\(item)'")
            }
            let path = String(item[item.index(after: colon)...])
            guard let data = FileManager.default.contents(atPath: path),
                let token = String(data: data, encoding: .utf8)?.split(whereSeparator: \.isNewline).first
                    .map({ $0.trimmingCharacters(in: .whitespaces) }), token.utf8.count >= 16
            else {
                throw SkillbusError(
                    .invalidConfiguration, "--http-token: '\(path)' must hold a token of at least 16 characters")
            }
            http.tokens[token] = access
        }
        http.origins = Set(arguments.all("--http-origin"))
        if let seconds = try arguments.double("--http-stream-limit", minimum: 0.01, maximum: 86_400, in: spec) {
            http.streamLimit = .seconds(seconds)
        }
        if let problem = http.problem { throw SkillbusError(.invalidConfiguration, problem) }
        return http
    }

    static func settings(_ arguments: ParsedArguments) throws -> MCPServer.Settings {
        var settings = MCPServer.Settings()
        settings.version = SkillbusCLI.version
        if let seconds = try arguments.double("--timeout", minimum: 0.001, maximum: 86_400, in: spec) {
            settings.timeout = .seconds(seconds)
            settings.askTimeout = .seconds(seconds)
        }
        if let seconds = try arguments.double("--reuse-window", minimum: 0, maximum: 86_400, in: spec) {
            settings.reuseWindow = .seconds(seconds)
        }
        if let size = try arguments.int("--page-size", minimum: 1, maximum: 10_000, in: spec) {
            settings.pageSize = size
        }
        if let session = arguments.value("--session") {
            guard !session.isEmpty, session.utf8.count <= Wire.maxSessionIDBytes else {
                throw UsageError(spec, "option '--session': 1 to \(Wire.maxSessionIDBytes) bytes")
            }
            settings.sessionID = session
        }
        return settings
    }
}

/// Messages to standard output, one line each, whole: writes from several tasks never interleave.
final class StandardOutputLines: Sendable {
    private let lock = Mutex(())

    var sink: MCPServer.Output { { message in self.send(message) } }

    func send(_ message: JSONRPCMessage) {
        var bytes = message.encoded()
        bytes.append(UInt8(ascii: "\n"))
        lock.withLock { _ in
            var offset = 0
            while offset < bytes.count {
                let written = bytes[offset...].withUnsafeBytes { Glibc.write(STDOUT_FILENO, $0.baseAddress, $0.count) }
                if written < 0 && errno == EINTR { continue }
                guard written > 0 else { return }  // the reader is gone: nobody is left to tell
                offset += written
            }
        }
    }
}

/// Lines of a file descriptor, read on a thread of its own (a blocking read never holds the cooperative pool).
enum InputLines {
    /// Calls `onLine` for each non-empty line and `tooLong` for each line over `maxBytes` (which is skipped);
    /// returns at end of file, or when the calling task is cancelled.
    static func read(
        _ fd: Int32, maxBytes: Int, onLine: @escaping @Sendable ([UInt8]) -> Void,
        tooLong: @escaping @Sendable () -> Void
    ) async {
        let done = Mutex<CheckedContinuation<Void, Never>?>(nil)
        let finish = { @Sendable in done.withLock { $0.take() }?.resume() }
        await withTaskCancellationHandler {
            await withCheckedContinuation { continuation in
                done.withLock { $0 = continuation }
                let thread = Thread {
                    readLines(fd, maxBytes: maxBytes, onLine: onLine, tooLong: tooLong)
                    finish()
                }
                thread.name = "skillbus-mcp-stdin"
                thread.start()
            }
        } onCancel: {
            finish()
        }
    }

    private static func readLines(
        _ fd: Int32, maxBytes: Int, onLine: ([UInt8]) -> Void, tooLong: () -> Void
    ) {
        var buffer = [UInt8](repeating: 0, count: 65_536)
        var pending: [UInt8] = []
        var skipping = false  // inside a line that was too long: drop it up to its newline
        while true {
            let count = buffer.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress, $0.count) }
            if count < 0 && errno == EINTR { continue }
            guard count > 0 else { break }
            var start = 0
            while let newline = buffer[start..<count].firstIndex(of: UInt8(ascii: "\n")) {
                if !skipping {
                    pending.append(contentsOf: buffer[start..<newline])
                    if pending.count > maxBytes { tooLong() } else if !isBlank(pending) { onLine(pending) }
                }
                pending.removeAll(keepingCapacity: true)
                skipping = false
                start = newline + 1
            }
            if !skipping { pending.append(contentsOf: buffer[start..<count]) }
            if pending.count > maxBytes && !skipping {
                tooLong()
                pending.removeAll()
                skipping = true
            }
        }
        if !skipping && !isBlank(pending) { onLine(pending) }
    }

    private static func isBlank(_ line: [UInt8]) -> Bool {
        line.allSatisfy { $0 == 0x20 || $0 == 0x09 || $0 == 0x0D }
    }
}
