import Foundation

/// What a skill produces.
public enum SkillResult: Sendable, Equatable {
    case text(String)
    case json(JSONValue)
    case attachment(Attachment)

    public struct Attachment: Sendable, Equatable {
        public var name: String
        public var mediaType: String
        public var bytes: [UInt8]

        public init(name: String, mediaType: String, bytes: [UInt8]) {
            self.name = name
            self.mediaType = mediaType
            self.bytes = bytes
        }
    }

    /// Wire form: `{"type":"text","text":…}`, `{"type":"json","json":…}` or
    /// `{"type":"attachment","name":…,"mediaType":…,"base64":…}`.
    public var json: JSONValue {
        switch self {
        case .text(let text): ["type": "text", "text": .string(text)]
        case .json(let value): ["type": "json", "json": value]
        case .attachment(let attachment):
            [
                "type": "attachment", "name": .string(attachment.name), "mediaType": .string(attachment.mediaType),
                "base64": .string(Data(attachment.bytes).base64EncodedString()),
            ]
        }
    }

    /// The wire form's bytes. A text result, the common case, is written without building a JSON value.
    public func serialized() -> [UInt8] {
        guard case .text(let text) = self else { return json.serialized() }
        var out: [UInt8] = []
        out.reserveCapacity(text.utf8.count + 28)  // one allocation: starting from the opening's Array made two
        out.append(contentsOf: #"{"text":"#.utf8)
        JSONValue.writeString(text, to: &out)
        out.append(contentsOf: #","type":"text"}"#.utf8)
        return out
    }

    public init(json: JSONValue) throws(SkillbusError) {
        switch Self.parse(json) {
        case .success(let result): self = result
        case .failure(let problem):
            throw SkillbusError(.malformedMessage, "a result must be {type: text|json|attachment, …}: \(problem)")
        }
    }

    /// Why `payload` is no result form, or nil when it is one (what the bus checks in an `ok` RESULT).
    static func problem(in payload: [UInt8]) -> String? {
        // The common case, a text result as `serialized()` writes it, needs no JSON value built.
        if isWellFormedText(payload) { return nil }
        do {
            if case .failure(let problem) = parse(try JSONValue(parsing: payload)) { return problem.reason }
            return nil
        } catch {
            return "not JSON (\(error))"
        }
    }

    private static let textHead = Array(#"{"text":""#.utf8)
    private static let textTail = Array(#"","type":"text"}"#.utf8)
    /// What may follow a backslash, `u` aside.
    private static let simpleEscapes = Array(#""\/bfnrt"#.utf8)

    /// Whether `payload` is exactly `{"text":"…","type":"text"}` around a string the strict reader takes:
    /// no raw quote or control character, only valid escapes, valid UTF-8. False means "look closer", not
    /// "invalid": anything else (a `\u` escape, other key orders, spaces) goes through the full reader.
    static func isWellFormedText(_ payload: [UInt8]) -> Bool {
        let (head, tail) = (textHead, textTail)
        guard payload.count >= head.count + tail.count, payload.starts(with: head),
            payload.suffix(tail.count).elementsEqual(tail)
        else { return false }
        let body = payload[head.count..<(payload.count - tail.count)]
        var ascii = true
        var index = body.startIndex
        while index < body.endIndex {
            let byte = body[index]
            if byte == UInt8(ascii: "\\") {
                let next = body.index(after: index)
                guard next < body.endIndex, simpleEscapes.contains(body[next]) else { return false }
                index = body.index(after: next)
                continue
            }
            if byte == UInt8(ascii: "\"") || byte < 0x20 { return false }
            if byte >= 0x80 { ascii = false }
            index = body.index(after: index)
        }
        return ascii || String(validating: body, as: UTF8.self) != nil
    }

    struct Problem: Error, CustomStringConvertible {
        let reason: String
        var description: String { reason }
    }

    private static func parse(_ json: JSONValue) -> Result<SkillResult, Problem> {
        func problem(_ reason: String) -> Result<SkillResult, Problem> { .failure(Problem(reason: reason)) }
        guard json.objectValue != nil else { return problem("a JSON object is expected, got \(json.typeName)") }
        switch json["type"] {
        case .string("text"):
            guard let text = json["text"]?.stringValue else { return problem("a text result needs 'text', a string") }
            return .success(.text(text))
        case .string("json"):
            guard let value = json["json"] else { return problem("a json result needs 'json'") }
            return .success(.json(value))
        case .string("attachment"):
            guard let name = json["name"]?.stringValue, let mediaType = json["mediaType"]?.stringValue else {
                return problem("an attachment needs 'name' and 'mediaType', both strings")
            }
            guard let base64 = json["base64"]?.stringValue, let data = Data(base64Encoded: base64) else {
                return problem("an attachment needs 'base64', a string in standard base64")
            }
            return .success(.attachment(Attachment(name: name, mediaType: mediaType, bytes: Array(data))))
        case .string(let other):
            return problem("unknown type '\(other.prefix(64))' (expected text, json or attachment)")
        case nil:
            return problem("'type' is missing")
        default:
            return problem("'type' must be a string")
        }
    }

    /// The result for people: text as is, JSON indented, an attachment as its name, type and size.
    public var humanReadable: String {
        switch self {
        case .text(let text): text
        case .json(let value): value.prettyString()
        case .attachment(let attachment):
            "[attachment \(attachment.name), \(attachment.mediaType), \(attachment.bytes.count) bytes]"
        }
    }
}
