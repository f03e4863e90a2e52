/// ZeroMQ endpoint checks, so that a typo is reported by name before any socket exists.
public enum Endpoint {
    /// Why `text` is not a usable endpoint, or nil when it is.
    public static func problem(_ text: String) -> String? {
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
