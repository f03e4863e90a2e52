/// Reads a `text/event-stream` body (server-sent events, as the HTML standard defines them) as it arrives:
/// bytes in, whole events out. A piece of the body may end anywhere, in the middle of a line, between the
/// `\r` and `\n` of a line break, or inside a multi-byte character: lines are only decoded once whole.
struct ServerSentEvents {
    struct Event: Equatable, Sendable {
        /// The `event:` field; "message" when the event names none.
        var type: String
        /// The `data:` lines, joined with newlines.
        var data: String
    }

    private var line: [UInt8] = []
    private var dataLines: [String] = []
    private var type = ""
    /// The last piece ended with `\r`: a `\n` opening the next one belongs to that line break.
    private var afterCarriageReturn = false

    init() {}

    /// The events that the bytes complete, in order.
    mutating func receive(_ bytes: some Sequence<UInt8>) -> [Event] {
        var events: [Event] = []
        for byte in bytes {
            if afterCarriageReturn {
                afterCarriageReturn = false
                if byte == UInt8(ascii: "\n") { continue }
            }
            switch byte {
            case UInt8(ascii: "\n"):
                if let event = endLine() { events.append(event) }
            case UInt8(ascii: "\r"):
                afterCarriageReturn = true
                if let event = endLine() { events.append(event) }
            default:
                line.append(byte)
            }
        }
        return events
    }

    /// The end of the body: an event still being read counts even without its closing blank line (the
    /// standard drops it; a server that closes right after its last `data:` line meant it).
    mutating func finish() -> Event? {
        if !line.isEmpty { _ = endLine() }  // a field line never ends an event by itself
        return endLine()
    }

    private mutating func endLine() -> Event? {
        defer { line.removeAll(keepingCapacity: true) }
        guard !line.isEmpty else {
            // A blank line ends the event; one without data is no event.
            defer {
                dataLines = []
                type = ""
            }
            guard !dataLines.isEmpty else { return nil }
            return Event(type: type.isEmpty ? "message" : type, data: dataLines.joined(separator: "\n"))
        }
        if line.first == UInt8(ascii: ":") { return nil }  // a comment, often a keep-alive
        let colon = line.firstIndex(of: UInt8(ascii: ":")) ?? line.endIndex
        let field = String(decoding: line[..<colon], as: UTF8.self)
        var value = colon < line.endIndex ? line[(colon + 1)...] : []
        if value.first == UInt8(ascii: " ") { value = value.dropFirst() }
        switch field {
        case "data": dataLines.append(String(decoding: value, as: UTF8.self))
        case "event": type = String(decoding: value, as: UTF8.self)
        default: break  // id, retry and unknown fields mean nothing to a single answer
        }
        return nil
    }
}
