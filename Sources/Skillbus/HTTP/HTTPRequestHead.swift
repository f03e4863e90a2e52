/// The head of one HTTP/1.x request (request line and header fields), read from the bytes a connection has
/// received so far. No sockets: the server feeds it bytes and acts on the answer.
public struct HTTPRequestHead: Sendable, Equatable {
    public var method: String
    /// The path of the request target, without its query (`/metrics` of `/metrics?x=1`).
    public var path: String
    public var version: String
    /// Field names in lower case; a repeated field keeps its last value.
    public var headers: [String: String]

    /// Heads larger than this are refused (431) before they are held whole.
    public static let maxBytes = 16 * 1024

    public enum Parse: Sendable, Equatable {
        /// The blank line that ends the head has not arrived yet.
        case incomplete
        case head(HTTPRequestHead)
        /// The bytes are no request this server can read: answer `status` with `reason`, then close.
        case refused(status: Int, reason: String)
    }

    /// Reads the head from `bytes`, which start at the request's first byte.
    public static func parse(_ bytes: [UInt8]) -> Parse {
        guard let end = headEnd(bytes) else {
            return bytes.count > maxBytes
                ? .refused(status: 431, reason: "request head larger than \(maxBytes) bytes") : .incomplete
        }
        guard end <= maxBytes else { return .refused(status: 431, reason: "request head larger than \(maxBytes) bytes") }
        guard let text = String(validating: bytes[..<end], as: UTF8.self) else {
            return .refused(status: 400, reason: "request head is not UTF-8")
        }
        var lines = text.split(separator: "\r\n", omittingEmptySubsequences: false).map(String.init)
        // Tolerate blank lines before the request line (RFC 9112 §2.2).
        while lines.first == "" { lines.removeFirst() }
        guard let requestLine = lines.first else { return .refused(status: 400, reason: "empty request") }
        let parts = requestLine.split(separator: " ", omittingEmptySubsequences: false)
        guard parts.count == 3, !parts[0].isEmpty, !parts[1].isEmpty else {
            return .refused(status: 400, reason: "malformed request line '\(requestLine.prefix(80))'")
        }
        let method = String(parts[0])
        guard method.utf8.allSatisfy(isTokenByte) else {
            return .refused(status: 400, reason: "malformed method '\(method.prefix(40))'")
        }
        let target = String(parts[1])
        guard target.hasPrefix("/") || target == "*" else {
            return .refused(status: 400, reason: "request target '\(target.prefix(80))' is no absolute path")
        }
        let version = String(parts[2])
        guard version.hasPrefix("HTTP/") else {
            return .refused(status: 400, reason: "malformed HTTP version '\(version.prefix(40))'")
        }
        guard version == "HTTP/1.1" || version == "HTTP/1.0" else {
            return .refused(status: 505, reason: "\(version.prefix(40)) is not supported; this server speaks HTTP/1.1")
        }
        var headers: [String: String] = [:]
        for line in lines.dropFirst() where !line.isEmpty {
            guard let colon = line.firstIndex(of: ":"), colon != line.startIndex,
                line[..<colon].utf8.allSatisfy(isTokenByte)
            else {
                return .refused(status: 400, reason: "malformed header field '\(line.prefix(80))'")
            }
            let value = line[line.index(after: colon)...].trimmingCharacters(in: [" ", "\t"])
            headers[line[..<colon].lowercased()] = value
        }
        let path = String(target.split(separator: "?", maxSplits: 1, omittingEmptySubsequences: false)[0])
        return .head(HTTPRequestHead(method: method, path: path, version: version, headers: headers))
    }

    /// Where the body starts: just past the blank line that ends the head, if it has arrived.
    static func bodyStart(_ bytes: [UInt8]) -> Int? { headEnd(bytes).map { $0 + 4 } }

    /// The index just past the head's lines (the start of the blank line that ends it), if it has arrived.
    private static func headEnd(_ bytes: [UInt8]) -> Int? {
        guard bytes.count >= 4 else { return nil }
        for index in 0...(bytes.count - 4)
        where bytes[index] == 13 && bytes[index + 1] == 10 && bytes[index + 2] == 13 && bytes[index + 3] == 10 {
            return index
        }
        return nil
    }

    /// RFC 9110 token characters: what a method and a field name are made of.
    private static func isTokenByte(_ byte: UInt8) -> Bool {
        switch byte {
        case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"),
            UInt8(ascii: "0")...UInt8(ascii: "9"):
            return true
        default:
            return Array("!#$%&'*+-.^_`|~".utf8).contains(byte)
        }
    }
}
