/// The response heads libcurl hands over line by line (each with its CRLF, a blank line ending each head),
/// folded into the head of the final response: a 1xx head (100 Continue, 103 Early Hints) and the head of a
/// redirect libcurl follows come first and are passed over. No I/O.
struct HTTPResponseHeadParser: Sendable {
    /// The redirects libcurl follows when the response names a Location (CURLOPT_FOLLOWLOCATION).
    static let followedRedirects: Set<Int> = [300, 301, 302, 303, 307, 308]

    private var statusCode: Int?
    private var fields: [(name: String, value: String)] = []

    /// Takes one line of a head; returns the response when `line` ends the final response's head.
    mutating func receive(_ line: some Collection<UInt8>) -> HTTPStreamingCall.Response? {
        // By bytes: "\r\n" is one Character to a String.
        var bytes = Array(line)
        while let last = bytes.last, last == UInt8(ascii: "\n") || last == UInt8(ascii: "\r") { bytes.removeLast() }
        let text = String(decoding: bytes, as: UTF8.self)
        if text.isEmpty {
            guard let statusCode else { return nil }
            defer { self = HTTPResponseHeadParser() }
            if (100..<200).contains(statusCode) && statusCode != 101 { return nil }
            let location = fields.contains { $0.name.lowercased() == "location" }
            if location && Self.followedRedirects.contains(statusCode) { return nil }
            return HTTPStreamingCall.Response(statusCode: statusCode, headerFields: fields)
        }
        if text.hasPrefix("HTTP/") {
            // "HTTP/1.1 200 OK", "HTTP/2 200": a new head begins.
            let words = text.split(separator: " ", omittingEmptySubsequences: true)
            self = HTTPResponseHeadParser()
            statusCode = words.count >= 2 ? Int(words[1]) : nil
            return nil
        }
        guard statusCode != nil else { return nil }
        if let first = text.first, first == " " || first == "\t", let last = fields.indices.last {
            // An obsolete continuation line belongs to the field before it.
            fields[last].value += " " + text.trimmed
        } else if let colon = text.firstIndex(of: ":") {
            fields.append((String(text[..<colon]).trimmed, String(text[text.index(after: colon)...]).trimmed))
        }
        return nil
    }
}

extension String {
    fileprivate var trimmed: String {
        var view = Substring(self)
        while let first = view.first, first == " " || first == "\t" { view.removeFirst() }
        while let last = view.last, last == " " || last == "\t" { view.removeLast() }
        return String(view)
    }
}
