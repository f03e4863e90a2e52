import Foundation
import Skillbus
import SkillbusZMQ

/// `skillbus skills`
public enum SkillsCommand: SkillbusCommand {
    public static let spec = CommandSpec(
        name: "skills",
        abstract: "List every skill in the registry, its providers and its parameters.",
        discussion: """
            Reads from a replica of the registry: subscribes to the feed's registry updates, then asks the bus
            for a snapshot. With --watch it keeps following and redraws on every change until Ctrl-C.

            EXAMPLE: skillbus skills --watch
            """,
        options: [
            OptionSpec("--json", help: "Print the registry as JSON (one line per change with --watch)."),
            OptionSpec("--watch", help: "Keep following the registry and redraw on every change."),
            coordinatorOption, serverKeyOption, keyOption,
            feedOption,
            OptionSpec("--timeout", value: "SECONDS", help: "How long to wait for the snapshot (default 5)."),
        ])

    public static func run(_ arguments: ParsedArguments) async throws -> Int32 {
        let bus = try Defaults.bus(arguments, spec)
        let feed = try Defaults.feed(arguments, spec)
        let timeout = try arguments.double("--timeout", minimum: 0.001, maximum: 86_400, in: spec) ?? 5
        let json = arguments.flag("--json")
        let signals = SignalWatcher()
        let context = try ZMQContext()
        let client = try await SkillbusClient.connect(
            endpoint: bus, context: context, credentials: try Defaults.credentials(arguments, spec))
        let replica = try await RegistryReplica.connect(client: client, feedEndpoint: feed, context: context)
        defer {
            replica.close()
            client.close()
        }
        guard await replica.waitUntil(timeout: .seconds(timeout)) else {
            printError("error: unreachable: no registry snapshot from the coordinator at \(bus) within \(timeout) s")
            return 3
        }
        guard arguments.flag("--watch") else {
            print(json ? document(replica).jsonString : render(replica.registry))
            return 0
        }
        let redraw = isatty(STDOUT_FILENO) == 1 && !json
        let watcher = FunctionService {
            for await registry in replica.changes() {
                if json {
                    print(document(replica).jsonString)
                } else {
                    if redraw { print("\u{1B}[2J\u{1B}[H", terminator: "") }
                    let position = replica.position
                    print("registry epoch \(position?.epoch ?? "?") seq \(position?.sequence ?? 0), \(Date())")
                    print(render(registry))
                }
            }
        }
        try await runUntilStopped([watcher], signals: signals)
        return 0
    }

    /// PROTOCOL §5.15: the replica's position (`epoch`, `seq`, `digest`), its entries (`agents`, as in
    /// ENTRY) and `skills` in the catalog's shape (§5.9) without the load, which only the bus knows.
    static func document(_ replica: RegistryReplica) -> JSONValue {
        let registry = replica.registry
        var object = replica.position?.json.objectValue ?? [:]
        object["agents"] = registry.json["agents"]
        object["skills"] = SkillCatalog(registry: registry).entriesJSON
        return .object(object)
    }

    static func render(_ registry: Registry) -> String {
        guard !registry.skills.isEmpty else { return "No skills on offer (no agents registered)." }
        var lines: [String] = []
        for identifier in registry.skills.keys.sorted() {
            let skill = registry.skills[identifier]!
            let providers = skill.providers.map { name in
                let role = registry.agents[name]?.profile.role.map { ", role \($0)" } ?? ""
                return "\(name) (capacity \(registry.agents[name]?.capacity ?? 0)\(role))"
            }
            let description = skill.descriptor.description
            lines.append(description.isEmpty ? identifier : "\(identifier) — \(description)")
            lines.append("    providers: \(providers.joined(separator: ", "))")
            if let ms = skill.descriptor.defaultTimeoutMs { lines.append("    default timeout: \(ms) ms") }
            for field in skill.descriptor.parameters.fields {
                var line = "    \(field.name): \(field.type.rawValue), \(field.required ? "required" : "optional")"
                if let value = field.defaultValue { line += ", default \(value.jsonString)" }
                if !field.description.isEmpty { line += " — \(field.description)" }
                lines.append(line)
            }
        }
        return lines.joined(separator: "\n")
    }
}

/// `skillbus agents`
public enum AgentsCommand: SkillbusCommand {
    public static let spec = CommandSpec(
        name: "agents",
        abstract: "List live agents: skills, capacity, load, state, heartbeat age, registry replica.",
        discussion: "EXAMPLE: skillbus agents --json",
        options: [
            OptionSpec("--json", help: "Print the listing as JSON."),
            coordinatorOption, serverKeyOption, keyOption,
            OptionSpec("--timeout", value: "SECONDS", help: "How long to wait (default 5)."),
        ])

    public static func run(_ arguments: ParsedArguments) async throws -> Int32 {
        let endpoint = try Defaults.bus(arguments, spec)
        let timeout = try arguments.double("--timeout", minimum: 0.001, maximum: 86_400, in: spec) ?? 5
        let context = try ZMQContext()
        let client = try await SkillbusClient.connect(
            endpoint: endpoint, context: context, credentials: try Defaults.credentials(arguments, spec))
        defer { client.close() }
        let listing: JSONValue
        do {
            listing = try await client.agents(timeout: .seconds(timeout))
        } catch {
            printError("error: \(error.code): \(error.message)")
            return 3
        }
        print(arguments.flag("--json") ? listing.jsonString : render(listing))
        return 0
    }

    /// One line per agent: `alpha  idle  1/4  hb 0.3 s  registry 12 ✓  echo, math.eval`; first, in a coordinator
    /// group, who leads it.
    static func render(_ listing: JSONValue) -> String {
        let agents = listing["agents"]?.arrayValue ?? []
        let group = groupLine(listing["group"])
        guard !agents.isEmpty else { return (group.map { $0 + "\n" } ?? "") + "No agents registered." }
        let registrySeq = listing["registry"]?["seq"]?.intValue ?? 0
        var lines = (group.map { [$0] } ?? []) + ["registry at seq \(registrySeq); \(agents.count) agent(s)"]
        let nameWidth = max(5, agents.map { $0["agent"]?.stringValue?.count ?? 0 }.max() ?? 0)
        lines.append(
            "AGENT".padded(to: nameWidth)
                + "  STATE                 LOAD     HEARTBEAT  REPLICA     SESSIONS  SKILLS")
        for agent in agents {
            var state = agent["state"]?["state"]?.stringValue ?? "?"
            // What runs now, from the bus's slots; the state's own skill is only the one started last.
            let running = (agent["running"]?.objectValue ?? [:]).sorted { $0.key < $1.key }
                .map { $0.value.intValue == 1 ? $0.key : "\($0.key)×\($0.value.intValue ?? 0)" }
            if !running.isEmpty {
                state = "running " + running.joined(separator: ", ")
            } else if let skill = agent["state"]?["skill"]?.stringValue {
                state += "(\(skill))"
            }
            let load = "\(agent["inFlight"]?.intValue ?? 0)/\(agent["capacity"]?.intValue ?? 0)"
            let age = String(format: "%.1f s ago", (agent["lastHeartbeatAgeMs"]?.doubleValue ?? 0) / 1000)
            var replica = "-"
            if let seq = agent["registry"]?["seq"]?.intValue {
                replica = "seq \(seq) " + (agent["registryInSync"]?.boolValue == true ? "ok" : "behind")
            }
            var skills = agent["skills"]?.arrayValue?.compactMap(\.stringValue).joined(separator: ", ") ?? ""
            // What it is to a team: whether it takes turns, its role and what it is good at.
            if agent["planner"]?.boolValue == true {
                let role = agent["role"]?.stringValue.map { " as \($0)" } ?? ""
                let about = agent["description"]?.stringValue.map { " — \($0)" } ?? ""
                skills += (skills.isEmpty ? "" : "; ") + "takes turns\(role)\(about)"
            }
            // A store that cannot write is worth a look: say so beside the count.
            var sessions = agent["sessions"]?.intValue.map(String.init) ?? "-"
            if agent["storage"]?["code"] != nil { sessions += " (no writes)" }
            lines.append(
                (agent["agent"]?.stringValue ?? "?").padded(to: nameWidth) + "  "
                    + state.padded(to: 22)
                    + load.padded(to: 9)
                    + age.padded(to: 11)
                    + replica.padded(to: 12)
                    + sessions.padded(to: 10) + skills)
        }
        return lines.joined(separator: "\n")
    }

    /// `group g1: led by 'a' (epoch 2) since 2026-12-05T21:00:00.000Z; journal behind by 12 round(s)`.
    static func groupLine(_ group: JSONValue?) -> String? {
        guard let group, let name = group["group"]?.stringValue else { return nil }
        let leader = group["leader"]
        let who = leader?["name"]?.stringValue ?? "?"
        var line =
            "group \(name): led by '\(who)' (epoch \(leader?["epoch"]?.intValue ?? 0))"
            + " since \(leader?["since"]?.stringValue ?? "?")"
        let backlog = group["journalBacklog"]?.intValue ?? 0
        line += backlog > 0 ? "; journal behind by \(backlog) round(s)" : "; journal up to date"
        return line
    }
}
