import Foundation

/// A coordinator group (`"ha"` in a coordinator's config): its journal is kept in PostgreSQL, which also elects
/// the group's one leader. The password is never in the config: it comes from an environment variable or a
/// file, read when the config is.
public struct CoordinatorGroupSettings: Sendable, Equatable {
    /// libpq's connection URI, `postgresql://[user@]host[:port]/database[?…]`, without a password.
    public var database: String
    /// The group's name: coordinators of one group share its journal and elect one leader.
    public var group: String
    public var passwordEnv: String?
    public var passwordFile: String?
    /// The password, read from `passwordEnv` or `passwordFile` (nil: neither was given; libpq may still find
    /// one in ~/.pgpass). Never written to a file.
    var password: String?
    /// This coordinator's name in the group (`ha.name`); nil: the host's name.
    public var name: String?
    /// The endpoints others should use to reach this coordinator (`ha.advertise`); nil: the bound ones, a
    /// wildcard host replaced by the host's name. `http` is its dashboard's URL, which the group's pages follow.
    public var advertise: (bus: String?, feed: String?, http: String?) = (nil, nil, nil)
    /// How long a leader's lease lasts (`ha.leaseMs`, PROTOCOL §3.11): a leader whose renewals go unanswered
    /// stops serving after it, and a standby takes over after seeing it unrenewed for that long.
    public var leaseMs = 2000

    public init(database: String, group: String, password: String? = nil, name: String? = nil, leaseMs: Int = 2000) {
        self.database = database
        self.group = group
        self.password = password
        self.name = name
        self.leaseMs = leaseMs
    }

    public static func == (left: Self, right: Self) -> Bool {
        left.database == right.database && left.group == right.group && left.passwordEnv == right.passwordEnv
            && left.passwordFile == right.passwordFile && left.password == right.password && left.name == right.name
            && left.advertise.bus == right.advertise.bus && left.advertise.feed == right.advertise.feed
            && left.advertise.http == right.advertise.http
            && left.leaseMs == right.leaseMs
    }

    static let fields: Set<String> = [
        "database", "group", "passwordEnv", "passwordFile", "name", "advertise", "leaseMs",
    ]
    static let maxGroupBytes = 64
    static let leaseMsRange = 500...600_000

    /// The name the coordinator goes by in its group.
    var memberName: String { name ?? ProcessInfo.processInfo.hostName }

    /// What this coordinator advertises, from the endpoints it bound (`tcp://0.0.0.0:5555` becomes
    /// `tcp://HOSTNAME:5555`) unless `advertise` names them.
    func advertised(bus bound: String, feed boundFeed: String) -> (bus: String, feed: String) {
        (advertise.bus ?? Self.reachable(bound), advertise.feed ?? Self.reachable(boundFeed))
    }

    static func reachable(_ bound: String, host: String = ProcessInfo.processInfo.hostName) -> String {
        Endpoint.reachable(bound, via: "tcp://\(host):1")
    }

    /// The dashboard's URL this coordinator advertises: `advertise.http`, else the bound HTTP address with a
    /// wildcard host replaced by `host`; nil when it serves no HTTP (then it advertises none, even if named).
    func advertisedHTTP(bound: HTTPAddress?, host: String = ProcessInfo.processInfo.hostName) -> String? {
        guard let bound else { return nil }
        if let http = advertise.http { return http }
        let wildcard = ["0.0.0.0", "*", "::", "[::]"].contains(bound.host)
        return "http://\(wildcard ? host : bound.host):\(bound.port)"
    }

    /// What is wrong with an advertised dashboard URL, or nil: `http://HOST[:PORT]` (or https), a host others can
    /// reach, no path (the page asks for `/state` and `/events` at the root).
    static func problem(http url: String) -> String? {
        let usage = "use http://HOST:PORT (or https://), the URL others open this coordinator's dashboard at"
        guard let scheme = ["http://", "https://"].first(where: url.hasPrefix) else {
            return "'\(url)' is no http:// URL: \(usage)"
        }
        var rest = url.dropFirst(scheme.count)
        if rest.hasSuffix("/") { rest = rest.dropLast() }
        guard !rest.isEmpty, !rest.contains(where: { "/?#@ ".contains($0) }) else {
            return "'\(url)' is no URL of a dashboard: \(usage), without a path, query or user"
        }
        var host = rest
        if let colon = rest.lastIndex(of: ":"), !rest.hasSuffix("]") {
            host = rest[..<colon]
            guard let port = UInt16(rest[rest.index(after: colon)...]), port > 0 else {
                return "'\(url)' names no port from 1 to 65535: \(usage)"
            }
        }
        guard !host.isEmpty, !["0.0.0.0", "*", "::", "[::]"].contains(host) else {
            return "'\(url)' is no URL others can open: name a host (not a wildcard)"
        }
        return nil
    }

    private static func nameAllowed(_ name: String) -> Bool {
        !name.isEmpty && name.utf8.count <= maxGroupBytes
            && name.utf8.allSatisfy { byte in
                (UInt8(ascii: "a")...UInt8(ascii: "z")).contains(byte)
                    || (UInt8(ascii: "A")...UInt8(ascii: "Z")).contains(byte)
                    || (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte) || byte == UInt8(ascii: "-")
                    || byte == UInt8(ascii: "_") || byte == UInt8(ascii: ".")
            }
    }

    /// Reads `{"database", "group", "passwordEnv" | "passwordFile"}`; every problem is reported at once, each
    /// naming its key (`ha.database`, …).
    init(reading object: ConfigObject, environment: [String: String] = ProcessInfo.processInfo.environment)
        throws(SkillbusError)
    {
        var problems: [String] = []
        func note(_ body: () throws(SkillbusError) -> Void) {
            do throws(SkillbusError) { try body() } catch { problems += ConfigObject.problems(in: error) }
        }
        database = ""
        group = ""
        note { () throws(SkillbusError) in
            guard let url = try object.string("database") else {
                throw object.error("database", "missing: a PostgreSQL connection URI, postgresql://host:port/database")
            }
            if let problem = Self.problem(database: url) { throw object.error("database", problem) }
            database = url
        }
        note { () throws(SkillbusError) in
            guard let name = try object.string("group") else {
                throw object.error("group", "missing: the name the group's coordinators share")
            }
            guard Self.nameAllowed(name) else {
                throw object.error(
                    "group", "'\(name)' is no group name: use 1-\(Self.maxGroupBytes) of a-z A-Z 0-9 . _ -")
            }
            group = name
        }
        note { () throws(SkillbusError) in
            guard let name = try object.string("name") else { return }
            guard Self.nameAllowed(name) else {
                throw object.error(
                    "name", "'\(name)' is no coordinator name: use 1-\(Self.maxGroupBytes) of a-z A-Z 0-9 . _ -")
            }
            self.name = name
        }
        note { () throws(SkillbusError) in
            let range = Self.leaseMsRange
            leaseMs = try object.int("leaseMs", minimum: range.lowerBound, maximum: range.upperBound) ?? leaseMs
        }
        note { () throws(SkillbusError) in
            guard let section = try object.object("advertise", allowed: ["bus", "feed", "http"]) else { return }
            var problems: [String] = []
            do throws(SkillbusError) {
                if let url = try section.string("http") {
                    if let problem = Self.problem(http: url) { throw section.error("http", problem) }
                    advertise.http = url.hasSuffix("/") ? String(url.dropLast()) : url
                }
            } catch {
                problems += ConfigObject.problems(in: error)
            }
            for key in ["bus", "feed"] {
                do throws(SkillbusError) {
                    guard let endpoint = try section.string(key) else { continue }
                    if let problem = Endpoint.problem(endpoint) { throw section.error(key, problem) }
                    if endpoint.hasSuffix(":*") || endpoint.contains("://0.0.0.0:") || endpoint.contains("://*:") {
                        throw section.error(
                            key, "'\(endpoint)' is no endpoint others can connect to: name a host and a port")
                    }
                    if key == "bus" { advertise.bus = endpoint } else { advertise.feed = endpoint }
                } catch {
                    problems += ConfigObject.problems(in: error)
                }
            }
            try ConfigObject.throwing(problems)
        }
        note { () throws(SkillbusError) in
            passwordEnv = try object.string("passwordEnv")
            passwordFile = try object.string("passwordFile").map(object.resolvedPath)
            if passwordEnv != nil && passwordFile != nil {
                throw object.error("passwordFile", "give the password in passwordEnv or in passwordFile, not both")
            }
            if let name = passwordEnv {
                guard let value = environment[name], !value.isEmpty else {
                    throw object.error("passwordEnv", "the environment variable \(name) is not set")
                }
                password = value
            }
            if let path = passwordFile {
                guard let data = FileManager.default.contents(atPath: path) else {
                    throw object.error("passwordFile", "cannot read \(path)")
                }
                // One line: a trailing newline is not part of the password.
                let text = String(decoding: data, as: UTF8.self)
                password = String(text.split(separator: "\n", omittingEmptySubsequences: false).first ?? "")
                if password?.isEmpty ?? true { throw object.error("passwordFile", "\(path) is empty") }
            }
        }
        try ConfigObject.throwing(problems)
    }

    /// What is wrong with a connection URI, or nil.
    static func problem(database url: String) -> String? {
        guard url.hasPrefix("postgresql://") || url.hasPrefix("postgres://") else {
            return "'\(url)' is no PostgreSQL connection URI: it starts with postgresql://"
        }
        if PostgresConnection.withoutPassword(url) != url {
            return "holds a password: give it in passwordEnv or passwordFile instead, so it stays out of the config"
        }
        if url.range(of: "password=") != nil {
            return "holds a password parameter: give it in passwordEnv or passwordFile instead"
        }
        return nil
    }

    /// The file form: the password's source, never the password.
    var json: JSONValue {
        var object: [String: JSONValue] = ["database": .string(database), "group": .string(group)]
        if let passwordEnv { object["passwordEnv"] = .string(passwordEnv) }
        if let passwordFile { object["passwordFile"] = .string(passwordFile) }
        if let name { object["name"] = .string(name) }
        if leaseMs != 2000 { object["leaseMs"] = .number(Double(leaseMs)) }
        if advertise.bus != nil || advertise.feed != nil || advertise.http != nil {
            var endpoints: [String: JSONValue] = [:]
            if let bus = advertise.bus { endpoints["bus"] = .string(bus) }
            if let feed = advertise.feed { endpoints["feed"] = .string(feed) }
            if let http = advertise.http { endpoints["http"] = .string(http) }
            object["advertise"] = .object(endpoints)
        }
        return .object(object)
    }
}
