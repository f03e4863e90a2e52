/// ZeroMQ endpoint checks, so that a typo is reported by name before any socket exists.
public enum Endpoint {
    /// Why `text` is not a usable endpoint, or nil when it is.
    public static func problem(_ text: String) -> String? {
        if text.contains(",") { return "'\(text)' holds a comma: one endpoint here, not a list" }
        if text.hasPrefix("tcp://") {
            let rest = text.dropFirst(6)
            guard let colon = rest.lastIndex(of: ":") else { return "'\(text)' has no port (tcp://HOST:PORT)" }
            let host = rest[..<colon]
            let port = rest[rest.index(after: colon)...]
            guard !host.isEmpty else { return "'\(text)' has no host (tcp://HOST:PORT)" }
            if port == "*" { return nil }
            guard let number = Int(port), (1...65535).contains(number) else {
                return "'\(text)' has an invalid port '\(port)' (1-65535, or * for any free port)"
            }
            return nil
        }
        if text.hasPrefix("ipc://") || text.hasPrefix("inproc://") {
            return text.hasSuffix("//") ? "'\(text)' has no path" : nil
        }
        return "'\(text)' is not a ZeroMQ endpoint (use tcp://HOST:PORT, ipc://PATH or inproc://NAME)"
    }

    /// `bound` as a peer reaches it: a tcp endpoint bound to every interface (`0.0.0.0`, `[::]`, `*`) takes
    /// the host of `via`, the endpoint that peer already reaches the same coordinator on.
    public static func reachable(_ bound: String, via: String) -> String {
        guard bound.hasPrefix("tcp://"), via.hasPrefix("tcp://"),
            let boundColon = bound.lastIndex(of: ":"), let viaColon = via.lastIndex(of: ":")
        else { return bound }
        let host = bound[bound.index(bound.startIndex, offsetBy: 6)..<boundColon]
        guard ["0.0.0.0", "*", "[::]", "::"].contains(host) else { return bound }
        return String(via[..<viaColon]) + String(bound[boundColon...])
    }
}

/// Several coordinators of one group named where one is (PROTOCOL §3.3): `--coordinator a,b`,
/// `SKILLBUS_COORDINATOR`, a worker config's `coordinator` (a comma list or a JSON array of strings).
extension Endpoint {
    /// The entries of a comma list, each without the blanks around it. One endpoint is a list of one.
    public static func list(_ text: String) -> [String] {
        text.split(separator: ",", omittingEmptySubsequences: false).map {
            $0.trimmingCharacters(in: .whitespaces)
        }
    }

    /// Why the comma list `text` is not a usable list of endpoints (naming the bad entry), or nil when it is.
    public static func listProblem(_ text: String) -> String? {
        let entries = list(text)
        guard entries.count > 1 else { return problem(text) }
        var seen: Set<String> = []
        for (index, entry) in entries.enumerated() {
            guard !entry.isEmpty else {
                return "entry \(index + 1) of '\(text)' is empty (a,b: endpoints between commas)"
            }
            if let problem = problem(entry) { return "entry \(index + 1) of '\(text)': \(problem)" }
            guard seen.insert(entry).inserted else { return "'\(text)' names '\(entry)' twice" }
        }
        return nil
    }

    /// `endpoints` as one comma list, after checking each as `listProblem` does.
    public static func joined(_ endpoints: [String]) -> (list: String, problem: String?) {
        let text = endpoints.joined(separator: ",")
        guard !endpoints.isEmpty else { return (text, "no endpoint given") }
        if let index = endpoints.firstIndex(where: { $0.contains(",") }) {
            return (text, "entry \(index + 1) '\(endpoints[index])' holds a comma (give one endpoint per entry)")
        }
        return (text, listProblem(text))
    }
}
