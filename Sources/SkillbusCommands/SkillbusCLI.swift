import Foundation
import Skillbus
import SkillbusZMQ

/// The `skillbus` command: lists subcommands and hands the arguments to the chosen one.
public enum SkillbusCLI {
    public static var commands: [any SkillbusCommand.Type] {
        [
            CoordinatorCommand.self, WorkerCommand.self, SendCommand.self, FeedCommand.self, SkillsCommand.self,
            AgentsCommand.self, TopCommand.self, SessionsCommand.self, HistoryCommand.self, MemoryCommand.self,
            AskCommand.self, CancelCommand.self, KeygenCommand.self, MCPCommand.self,
            UpCommand.self, BenchCommand.self, BaselineProxyCommand.self, BaselineWorkerCommand.self,
        ]
    }

    public static var overview: String {
        var lines = [
            "OVERVIEW: Skillbus — agents that host skills, a coordinator that routes requests to them over ZeroMQ.",
            "", "USAGE: skillbus <command> [options]", "", "COMMANDS:",
        ]
        for command in commands where !command.spec.hidden {
            lines.append(
                "  " + command.spec.name.padded(to: 14) + command.spec.abstract)
        }
        lines += [
            "", "See 'skillbus <command> --help' for a command's options and an example;",
            "'skillbus --version' for the release.",
        ]
        return lines.joined(separator: "\n")
    }

    /// The release, printed by `skillbus --version`; the wire protocol has its own version (PROTOCOL §10).
    public static let version = "0.1.0"

    /// Runs the command line and returns the process exit code.
    public static func main(_ arguments: [String]) async -> Int32 {
        if arguments == ["--version"] {
            print("skillbus \(version) (wire protocol v2: SKB2C/SKB2W)")
            return 0
        }
        guard let name = arguments.first, name != "--help", name != "help", name != "-h" else {
            if arguments.count > 1, let command = commands.first(where: { $0.spec.name == arguments[1] }) {
                print(command.spec.help)
            } else {
                print(overview)
            }
            return 0
        }
        guard let command = commands.first(where: { $0.spec.name == name }) else {
            printError("error: unknown command '\(name)'\n\n\(overview)")
            return 2
        }
        let rest = Array(arguments.dropFirst())
        if asksForHelp(rest) {
            print(command.spec.help)
            return 0
        }
        do {
            return try await command.run(try command.spec.parse(rest))
        } catch let error as UsageError {
            printError(error.description)
            return 2
        } catch let error as SkillbusError {
            printError("error: \(error.message)")
            return error.code == .invalidConfiguration ? 2 : 1
        } catch {
            printError("error: \(error)")
            return 1
        }
    }
}

extension SkillbusCLI {
    /// -h or --help anywhere before a `--` asks for the command's help, whatever else the line holds.
    static func asksForHelp(_ arguments: [String]) -> Bool {
        arguments.prefix(while: { $0 != "--" }).contains { $0 == "-h" || $0 == "--help" }
    }
}

public protocol SkillbusCommand {
    static var spec: CommandSpec { get }
    static func run(_ arguments: ParsedArguments) async throws -> Int32
}

/// A line on standard error (unbuffered, so it is not held back behind standard output).
public func printError(_ text: String) {
    FileHandle.standardError.write(Data((text + "\n").utf8))
}

extension String {
    /// Exactly `width` characters for a column: cut, or filled with spaces, as Foundation's
    /// `padding(toLength:withPad:startingAt:)` does through NSString (at a cost `skillbus feed`, which pads two
    /// columns of every line, felt).
    public func padded(to width: Int) -> String {
        let length = count
        if length >= width { return length == width ? self : String(prefix(width)) }
        return self + String(repeating: " ", count: width - length)
    }
}

/// Endpoint defaults: flag, then config file, then environment, then the built-in default.
enum Defaults {
    static let bus = "tcp://127.0.0.1:5555"
    static let feed = "tcp://127.0.0.1:5556"

    static var environmentBus: String? { ProcessInfo.processInfo.environment["SKILLBUS_COORDINATOR"] }
    static var environmentFeed: String? { ProcessInfo.processInfo.environment["SKILLBUS_FEED"] }

    static func bus(_ arguments: ParsedArguments, _ spec: CommandSpec)
        throws(UsageError)
        -> String
    {
        if let flag = try arguments.endpoints("--coordinator", in: spec) { return flag }
        if let value = environmentBus {
            if let problem = Endpoint.listProblem(value) { throw UsageError(spec, "SKILLBUS_COORDINATOR: \(problem)") }
            return value
        }
        return bus
    }

    /// The CURVE keys to connect with: `--server-key` and `--key`, else the config's, else
    /// SKILLBUS_SERVER_KEY and SKILLBUS_KEY; nil when none of them names any. One without the other is a
    /// usage error; a key file that cannot be used is refused (invalid_configuration, exit 2).
    static func credentials(
        _ arguments: ParsedArguments, _ spec: CommandSpec, serverKey configuredServerKey: String? = nil,
        key configuredKey: String? = nil
    ) throws -> CurveCredentials? {
        let environment = ProcessInfo.processInfo.environment
        func nonEmpty(_ value: String?) -> String? { value.flatMap { $0.isEmpty ? nil : $0 } }
        let serverKey =
            arguments.value("--server-key") ?? configuredServerKey ?? nonEmpty(environment["SKILLBUS_SERVER_KEY"])
        let key = arguments.value("--key") ?? configuredKey ?? nonEmpty(environment["SKILLBUS_KEY"])
        switch (serverKey, key) {
        case (nil, nil):
            return nil
        case (let serverKey?, let key?):
            return try KeyFiles.credentials(serverKey: serverKey, key: key)
        case (nil, _?):
            throw UsageError(spec, "a key needs the coordinator's public key too (--server-key or SKILLBUS_SERVER_KEY)")
        case (_?, nil):
            throw UsageError(spec, "a server key needs this side's own secret key too (--key or SKILLBUS_KEY)")
        }
    }

    /// How long a first contact may take: `--connect-timeout`, else 2 s for each coordinator named (a group's
    /// client may find the first ones dead, 1 s or so each, PROTOCOL §3.3); never longer than the command's whole
    /// `timeout`. A coordinator that is not there is reported within it.
    static func connectTimeout(
        _ arguments: ParsedArguments, _ spec: CommandSpec, within timeout: Duration?
    ) throws(UsageError) -> Duration {
        let given = try arguments.double("--connect-timeout", minimum: 0.001, maximum: 3600, in: spec)
        let coordinators = Endpoint.list(try bus(arguments, spec)).count
        let connect = Duration.seconds(given ?? 2 * Double(coordinators))
        return timeout.map { min($0, connect) } ?? connect
    }

    static func feed(_ arguments: ParsedArguments, _ spec: CommandSpec) throws(UsageError) -> String {
        if let flag = try arguments.endpoints("--feed", in: spec) { return flag }
        if let value = environmentFeed {
            if let problem = Endpoint.listProblem(value) { throw UsageError(spec, "SKILLBUS_FEED: \(problem)") }
            return value
        }
        return feed
    }
}

extension Logger.Level {
    init(option: String?, spec: CommandSpec) throws(UsageError) {
        switch option ?? "info" {
        case "debug": self = .debug
        case "info": self = .info
        case "warning": self = .warning
        case "error": self = .error
        default: throw UsageError(spec, "option '--log-level' must be debug, info, warning or error")
        }
    }
}

let logLevelOption = OptionSpec("--log-level", value: "LEVEL", help: "debug, info (default), warning or error.")
let coordinatorOption = OptionSpec(
    "--coordinator", value: "ENDPOINT[,…]",
    help: "Bus endpoint (default \(Defaults.bus)); a group's coordinators: several, comma-separated.")
let connectTimeoutOption = OptionSpec(
    "--connect-timeout", value: "SECONDS",
    help: "How long to wait for the coordinator's first answer (default 2, per coordinator named).")
let feedOption = OptionSpec(
    "--feed", value: "ENDPOINT[,…]",
    help: "Feed endpoint (default \(Defaults.feed)); a group's: several, comma-separated.")
let serverKeyOption = OptionSpec(
    "--server-key", value: "FILE", help: "The coordinator's public key, or its file (else SKILLBUS_SERVER_KEY).")
let keyOption = OptionSpec("--key", value: "FILE", help: "This side's secret key file, NAME.key (else SKILLBUS_KEY).")
