import Foundation
import SkillbusZMQ

/// A coordinator's keys: its own secret key, and the policy that says who may connect
/// (`"security"` in a coordinator config, PROTOCOL §12).
public struct CoordinatorSecurity: Sendable, Equatable {
    /// The secret key file, as an absolute path (so that a config written elsewhere still finds it).
    public var secretKeyFile: String
    public var keys: CurveKeyPair
    public var policy: AccessPolicy

    public init(secretKeyFile: String, keys: CurveKeyPair, policy: AccessPolicy) {
        self.secretKeyFile = secretKeyFile
        self.keys = keys
        self.policy = policy
    }

    static let fields: Set<String> = ["secretKey", "keys", "feedRoles"]
    static let keyFields: Set<String> = ["name", "role", "publicKey", "agents"]

    /// Reads `{"secretKey": FILE, "keys": [{"name", "role", "publicKey", "agents"}], "feedRoles": [...]}`;
    /// a `publicKey` is the key itself or a file holding it. Files are found relative to the config file.
    init(reading object: ConfigObject) throws(SkillbusError) {
        guard Curve.isAvailable else {
            throw object.error("secretKey", "this libzmq was built without CURVE; keys cannot be used")
        }
        guard let secret = try object.string("secretKey") else { throw object.error("secretKey", "missing") }
        secretKeyFile = object.resolvedPath(secret)
        do {
            keys = try KeyFiles.loadSecret(secretKeyFile)
        } catch {
            throw object.error("secretKey", error.message)
        }
        var entries: [AccessPolicy.Key] = []
        for child in try object.objects("keys", allowed: Self.keyFields) ?? [] {
            guard let name = try child.string("name") else { throw child.error("name", "missing") }
            guard let roleName = try child.string("role") else { throw child.error("role", "missing") }
            guard let role = AccessPolicy.Role(rawValue: roleName) else {
                throw child.error("role", "'\(roleName)' is no role (client, worker or admin)")
            }
            guard let given = try child.string("publicKey") else { throw child.error("publicKey", "missing") }
            let publicKey: String
            do {
                publicKey = try KeyFiles.publicKey(given, besideConfig: child)
            } catch {
                throw child.error("publicKey", error.message)
            }
            entries.append(
                AccessPolicy.Key(name: name, role: role, publicKey: publicKey, agents: try child.stringArray("agents") ?? []))
        }
        var feedRoles = Set(AccessPolicy.Role.allCases)
        if let names = try object.stringArray("feedRoles") {
            feedRoles = []
            for name in names {
                guard let role = AccessPolicy.Role(rawValue: name) else {
                    throw object.error("feedRoles", "'\(name)' is no role (client, worker or admin)")
                }
                feedRoles.insert(role)
            }
        }
        do {
            policy = try AccessPolicy(keys: entries, feedRoles: feedRoles)
        } catch {
            throw SkillbusError(.invalidConfiguration, "\(object.file): \(error.message)")
        }
    }

    /// The file form, with the public keys written out and the secret key file's absolute path.
    public var json: JSONValue {
        [
            "secretKey": .string(secretKeyFile),
            "feedRoles": .array(AccessPolicy.Role.allCases.filter(policy.feedRoles.contains).map { .string($0.rawValue) }),
            "keys": .array(
                policy.keys.map { key in
                    var entry: [String: JSONValue] = [
                        "name": .string(key.name), "role": .string(key.role.rawValue), "publicKey": .string(key.publicKey),
                    ]
                    if !key.agents.isEmpty { entry["agents"] = .array(key.agents.map { .string($0) }) }
                    return .object(entry)
                }),
        ]
    }
}

extension ConfigObject {
    /// `path` as written in the file, relative to the file's own folder unless it is absolute.
    func resolvedPath(_ path: String) -> String {
        if path.hasPrefix("/") { return path }
        let folder = URL(fileURLWithPath: file).deletingLastPathComponent().path
        return URL(fileURLWithPath: folder).appendingPathComponent(path).standardizedFileURL.path
    }
}

extension KeyFiles {
    /// A public key as a config file gives it: the key itself (40 Z85 characters that decode) unless a file
    /// of that name lies beside the config, else that file's path, relative to the config's folder like every
    /// other file name in it (not to the working directory).
    static func publicKeyOrPath(_ given: String, besideConfig object: ConfigObject) -> String {
        let path = object.resolvedPath(given)
        return Curve.decode(given) != nil && !FileManager.default.fileExists(atPath: path) ? given : path
    }

    /// The public key a config file gives, read from its file when it names one.
    static func publicKey(_ given: String, besideConfig object: ConfigObject) throws(SkillbusError) -> String {
        let path = object.resolvedPath(given)
        if Curve.decode(given) != nil, !FileManager.default.fileExists(atPath: path) { return given }
        return try loadPublic(file: path)
    }
}

/// Binding without keys: loopback only, unless the coordinator was told `insecure`.
public enum BindCheck {
    /// Whether a peer on another host could reach `endpoint`: a tcp endpoint on anything but a loopback
    /// address (`127.x.x.x`, `localhost`, `::1`). ipc and inproc are local by nature.
    public static func isLoopback(_ endpoint: String) -> Bool {
        guard endpoint.hasPrefix("tcp://"), let colon = endpoint.lastIndex(of: ":") else { return true }
        var host = String(endpoint[endpoint.index(endpoint.startIndex, offsetBy: 6)..<colon])
        if host.hasPrefix("[") && host.hasSuffix("]") { host = String(host.dropFirst().dropLast()) }
        if host == "localhost" || host == "::1" { return true }
        let parts = host.split(separator: ".", omittingEmptySubsequences: false)
        return parts.count == 4 && parts[0] == "127" && parts.allSatisfy { UInt8($0) != nil }
    }

    /// Why a coordinator with `configuration` must not bind, or nil when it may.
    public static func problem(_ configuration: CoordinatorConfiguration) -> String? {
        // The HTTP endpoint has no keys even when the bus has: only --insecure opens it to other hosts.
        if let http = configuration.http, !http.isLoopback, !configuration.insecure {
            return "refusing to serve HTTP on \(http): the dashboard and metrics have no keys, and anyone who can "
                + "reach them could watch every agent and round. Serve it on 127.0.0.1 (reach it through an SSH "
                + "tunnel or a proxy), or start the coordinator with --insecure"
        }
        guard configuration.security == nil, !configuration.insecure else { return nil }
        let open = [configuration.bus, configuration.feed].filter { !isLoopback($0) }
        guard let first = open.first else { return nil }
        return "refusing to bind \(first) without keys: anyone who can reach it could register agents and read "
            + "the feed. Give the coordinator keys (\"security\" in its config, see README), bind 127.0.0.1, "
            + "or start it with --insecure"
    }
}
