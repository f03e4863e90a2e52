import SkillbusZMQ

/// One piece of a skill's partial output, sent while it runs (`SkillExecutionContext.emit`): text, or a
/// JSON value. Wire form (PROTOCOL §5.19): `{"type":"text","text":…}` or `{"type":"json","json":…}`.
public enum OutputPart: Sendable, Equatable {
    case text(String)
    case json(JSONValue)

    public var json: JSONValue {
        switch self {
        case .text(let text): ["type": "text", "text": .string(text)]
        case .json(let value): ["type": "json", "json": value]
        }
    }

    /// The wire form's bytes; a text part is written without building a JSON value.
    public func serialized() -> [UInt8] {
        var out: [UInt8] = []
        write(to: &out)
        return out
    }

    func write(to out: inout [UInt8]) {
        switch self {
        case .text(let text):
            out.append(contentsOf: #"{"text":"#.utf8)
            JSONValue.writeString(text, to: &out)
            out.append(contentsOf: #","type":"text"}"#.utf8)
        case .json:
            json.write(to: &out)
        }
    }

    public init(json: JSONValue) throws(SkillbusError) {
        switch (json["type"], json.objectValue) {
        case (.string("text"), _):
            guard let text = json["text"]?.stringValue else {
                throw SkillbusError(.malformedMessage, "an output part of type text needs 'text', a string")
            }
            self = .text(text)
        case (.string("json"), _):
            guard let value = json["json"] else {
                throw SkillbusError(.malformedMessage, "an output part of type json needs 'json'")
            }
            self = .json(value)
        case (_, nil):
            throw SkillbusError(.malformedMessage, "an output part must be a JSON object, got \(json.typeName)")
        default:
            throw SkillbusError(.malformedMessage, "an output part needs 'type' text or json")
        }
    }

    /// For people: text as is, JSON compact.
    public var humanReadable: String {
        switch self {
        case .text(let text): text
        case .json(let value): value.jsonString
        }
    }
}

/// Parts of one execution's output, in order, as one OUTPUT message carries them.
public struct OutputBatch: Sendable, Equatable {
    /// How many parts of the execution came before this batch: a waiter that joined late, or lost a batch
    /// at a high-water mark, sees the gap.
    public var first: Int
    public var parts: [OutputPart] {
        didSet { received = nil }
    }
    /// The parts frame as it arrived (or as its maker wrote it): the bus forwards it as it is, and never
    /// writes it again.
    private var received: [UInt8]?

    public init(first: Int, parts: [OutputPart]) {
        self.first = first
        self.parts = parts
    }

    /// A batch whose parts frame its maker already wrote (it must be exactly `parts`).
    init(first: Int, parts: [OutputPart], partsFrame: [UInt8]) {
        self.first = first
        self.parts = parts
        received = partsFrame
    }

    public static func == (left: OutputBatch, right: OutputBatch) -> Bool {
        left.first == right.first && left.parts == right.parts
    }

    /// The parts frame: a JSON array of part objects.
    var partsFrame: [UInt8] {
        if let received { return received }
        var out: [UInt8] = [UInt8(ascii: "[")]
        for (index, part) in parts.enumerated() {
            if index > 0 { out.append(UInt8(ascii: ",")) }
            part.write(to: &out)
        }
        out.append(UInt8(ascii: "]"))
        return out
    }

    /// Reads fields `index` (first) and `index + 1` (parts, a non-empty JSON array).
    init(fields message: Multipart, from index: Int) throws(SkillbusError) {
        first = try Wire.decimal(message, index, "first part", maximum: Int(Int32.max))
        guard let list = try Wire.json(message, index + 1, "parts").arrayValue, !list.isEmpty else {
            throw SkillbusError(.malformedMessage, "field \(index + 1) (parts) must be a non-empty JSON array")
        }
        var parts: [OutputPart] = []
        parts.reserveCapacity(list.count)
        for item in list { parts.append(try OutputPart(json: item)) }
        self.parts = parts
        received = message[index + 1]
    }

    var frames: Multipart { [Array(String(first).utf8), partsFrame] }

    /// The parts frame's size plus one: what the bus's limit on output counts.
    public var byteCount: Int { (received?.count ?? partsFrame.count) + 1 }
}
