import Foundation

/// Where Skillbus keeps its state by default: `$XDG_STATE_HOME/skillbus`, else `~/.local/state/skillbus`;
/// agents under `agents/<name>`, the coordinator `up` starts under `coordinator`.
public enum DataDirectory {
    public static var root: String {
        let environment = ProcessInfo.processInfo.environment
        let state =
            environment["XDG_STATE_HOME"].flatMap { $0.isEmpty ? nil : $0 }
            ?? (environment["HOME"] ?? NSHomeDirectory()) + "/.local/state"
        return state + "/skillbus"
    }

    /// The folder that holds every agent's directory.
    public static var agents: String { root + "/agents" }

    /// The journal of the coordinator `up` starts: beside the agents' folder, not in it (where it looked like
    /// an agent's, and an agent named after it would have shared it).
    public static var coordinator: String { root + "/coordinator" }

    public static func agent(_ name: String, under root: String = agents) -> String { root + "/" + name }

    /// The directory systemd made for the service (`StateDirectory=`, passed as `$STATE_DIRECTORY`; its first
    /// entry when it names several); nil outside such a unit.
    public static var serviceState: String? {
        let value = ProcessInfo.processInfo.environment["STATE_DIRECTORY"] ?? ""
        return value.split(separator: ":").first.map(String.init)
    }

    /// A worker's context when its config names no `dataDir`: `$STATE_DIRECTORY/context` in a systemd unit,
    /// else `agent(name)`.
    public static func worker(_ name: String) -> String { serviceState.map { $0 + "/context" } ?? agent(name) }

    /// What `file.read` may read when the config names no `sandbox`: `$STATE_DIRECTORY/files` in a systemd
    /// unit (made when missing), else the current directory.
    public static func sandbox() throws(SkillbusError) -> String {
        guard let state = serviceState else { return FileManager.default.currentDirectoryPath }
        let files = state + "/files"
        do {
            try FileManager.default.createDirectory(atPath: files, withIntermediateDirectories: true)
        } catch {
            throw SkillbusError(.invalidConfiguration, "cannot make the sandbox \(files) in STATE_DIRECTORY: \(error)")
        }
        return files
    }
}
