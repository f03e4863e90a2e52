import SkillbusZMQ

/// Wire v2 framing (PROTOCOL §2.1). A message is a list of numbered fields (the header, the command, then
/// the fields of its table); the small ones travel packed in one envelope frame and the opaque ones
/// (parameters, payloads, documents, free text) each as a frame of its own, so that a plain request
/// costs libzmq two frames instead of eight.
extension Wire {
    /// Where a message's fields start travelling as frames of their own, by command, for one direction;
    /// a command missing from it carries all its fields in the envelope.
    typealias Layout = [Command: Int]

    /// The wire frames of a message given as fields: fields `0..<first` in the envelope, the rest as frames.
    static func pack(_ fields: Multipart, _ layout: Layout) -> Multipart {
        let command = fields.count > 1 ? Command.byFrame[fields[1]] : nil
        let split = min(command.flatMap { layout[$0] } ?? fields.count, fields.count)
        var envelope = fields[0]
        envelope.reserveCapacity(fields[1..<split].reduce(fields[0].count) { $0 + $1.count + 5 })
        for field in fields[1..<split] { appendField(field, to: &envelope) }
        var frames: Multipart = [envelope]
        frames.reserveCapacity(1 + fields.count - split)
        frames.append(contentsOf: fields[split...])
        return frames
    }

    /// One field as the envelope holds it: one length byte below 255, else 255 and four big-endian bytes.
    static func appendField<Field: Collection<UInt8>>(_ field: Field, to envelope: inout [UInt8]) {
        let count = field.count
        if count < 255 {
            envelope.append(UInt8(count))
        } else {
            envelope.append(0xFF)
            for shift in [24, 16, 8, 0] { envelope.append(UInt8(truncatingIfNeeded: count >> shift)) }
        }
        envelope.append(contentsOf: field)
    }

    /// A message folded into one frame (§2.1, one frame): the frames after the envelope become its last
    /// fields. Under CURVE every frame is a box of its own, so one frame halves what a two-frame message costs.
    public static func folded(_ frames: Multipart) -> Multipart {
        guard frames.count > 1 else { return frames }
        var envelope = frames[0]
        envelope.reserveCapacity(frames.dropFirst().reduce(envelope.count) { $0 + $1.count + 5 })
        for frame in frames.dropFirst() { appendField(frame, to: &envelope) }
        return [envelope]
    }

    /// Whether a message came folded into one frame: one frame whose envelope holds more fields than its
    /// command's first frame field in `layout`. A peer that sends such a message reads them too.
    static func isFolded(_ frames: Multipart, _ layout: Layout) -> Bool {
        guard frames.count == 1, let fields = try? unpack(frames, header: Array(frames[0].prefix(5)), [:]),
            fields.count > 1, let command = Command.byFrame[fields[1]], let first = layout[command]
        else { return false }
        return fields.count > first
    }

    /// An envelope written field by field, for the messages of the hot path (INVOKE, REPLY): no field
    /// becomes an Array of its own on the way, and numbers are written as digits directly.
    struct EnvelopeWriter {
        private(set) var bytes: [UInt8]

        init(_ header: [UInt8], _ command: Command, capacity: Int) {
            bytes = header
            bytes.reserveCapacity(header.count + 1 + command.frame.count + capacity)
            field(command.frame)
        }

        mutating func field<Field: Collection<UInt8>>(_ field: Field) { appendField(field, to: &bytes) }

        mutating func field(_ text: String) { appendField(text.utf8, to: &bytes) }

        /// A non-negative number in decimal (a negative one is written as 0).
        mutating func field(decimal value: Int) {
            var digits = 1
            var rest = max(value, 0)
            while rest >= 10 {
                rest /= 10
                digits += 1
            }
            bytes.append(UInt8(digits))
            let end = bytes.count + digits
            bytes.append(contentsOf: repeatElement(UInt8(ascii: "0"), count: digits))
            rest = max(value, 0)
            for index in stride(from: end - 1, through: end - digits, by: -1) {
                bytes[index] = UInt8(ascii: "0") + UInt8(rest % 10)
                rest /= 10
            }
        }
    }

    /// The fields of an envelope read in place, for the messages of the hot path (REQUEST, INVOKE, RESULT, REPLY):
    /// no field becomes an Array of its own unless the message keeps it as bytes. It only ever accepts: on
    /// anything unusual (another command or split, a long-form length, a field outside its rules) the
    /// caller decodes through `unpack` and `decode(fields:)`, which read a valid message the same way and
    /// name what is wrong with any other (EnvelopeTests holds the two paths to that).
    struct EnvelopeReader {
        private let envelope: [UInt8]
        /// The message's last field when it came as a frame of its own; nil when it is folded into the envelope.
        private let bodyFrame: [UInt8]?
        private var index: Int

        /// Nil unless the message is an envelope that starts with `header` and `command`, then one frame (its
        /// last field), or that envelope alone with the last field folded into it (§2.1, one frame).
        init?(_ frames: Multipart, header: [UInt8], command: Command) {
            guard frames.count == 2 || frames.count == 1, let envelope = frames.first, envelope.starts(with: header)
            else { return nil }
            self.envelope = envelope
            bodyFrame = frames.count == 2 ? frames[1] : nil
            index = header.count
            guard let field = nextRange(), envelope[field].elementsEqual(command.frame) else { return nil }
        }

        /// The message's last field: its frame, or the envelope's next field (of any length) when folded.
        mutating func body() -> [UInt8]? {
            if let bodyFrame { return bodyFrame }
            guard index < envelope.count, let range = try? Wire.nextField(of: envelope, at: &index, number: 0) else {
                return nil
            }
            return Array(envelope[range])
        }

        /// Whether every field of the envelope was read.
        var atEnd: Bool { index == envelope.count }

        private mutating func nextRange() -> Range<Int>? {
            guard index < envelope.count else { return nil }
            let count = Int(envelope[index])
            guard count < 0xFF, count < envelope.count - index else { return nil }
            defer { index += 1 + count }
            return index + 1..<index + 1 + count
        }

        /// The next field as text (`Wire.text`).
        mutating func text() -> String? {
            guard let range = nextRange() else { return nil }
            return String(utf8: envelope[range])
        }

        /// The next field, checked to be text and kept as bytes (`Wire.textBytes`).
        mutating func textBytes() -> [UInt8]? {
            guard let range = nextRange(), Wire.isText(envelope[range]) else { return nil }
            return Array(envelope[range])
        }

        /// The next field as a decimal integer (`Wire.decimal`); an empty one is `empty`.
        mutating func number() -> (value: Int, empty: Bool)? {
            guard let range = nextRange() else { return nil }
            if range.isEmpty { return (0, true) }
            return Wire.decimalValue(envelope[range]).map { ($0, false) }
        }

        /// The next field as a status (`ReplyStatus(field:)`).
        mutating func status() -> ReplyStatus? {
            guard let range = nextRange() else { return nil }
            return ReplyStatus(bytes: envelope[range])
        }
    }

    /// The most fields an envelope may hold: no message of the protocol has more than twelve.
    static let maxEnvelopeFields = 32

    /// The fields of a message as it arrived, checked against `layout`: the envelope's fields, then one per
    /// frame after it. `header` is what frame 0 must start with.
    static func unpack(_ frames: Multipart, header: [UInt8], _ layout: Layout) throws(SkillbusError) -> Multipart {
        guard let envelope = frames.first, envelope.starts(with: header) else {
            throw SkillbusError(.unsupportedProtocol, "expected header \(String(decoding: header, as: UTF8.self))")
        }
        var fields: Multipart = [header]
        fields.reserveCapacity(frames.count + 8)
        var command: Command?
        var index = header.count
        while index < envelope.count {
            guard fields.count < maxEnvelopeFields else {
                throw SkillbusError(.malformedMessage, "envelope holds more than \(maxEnvelopeFields) fields")
            }
            let range = try nextField(of: envelope, at: &index, number: fields.count)
            let bytes = envelope[range]
            // The command is looked up once, here, and kept as its shared frame: one Array less per message.
            if fields.count == 1, let known = Command.allCases.first(where: { $0.frame.elementsEqual(bytes) }) {
                command = known
                fields.append(known.frame)
            } else {
                fields.append(Array(bytes))
            }
        }
        let inEnvelope = fields.count
        guard inEnvelope > 1 || frames.count == 1 else {
            throw SkillbusError(.malformedMessage, "the envelope holds no command")
        }
        fields.append(contentsOf: frames.dropFirst())
        if let command {
            let first = layout[command] ?? Int.max
            // A message of one frame may carry its frame fields folded into the envelope (§2.1, one frame).
            guard inEnvelope == min(first, fields.count) || frames.count == 1 else {
                let expected = first == Int.max
                    ? "every field in its envelope"
                    : "fields 0 to \(first - 1) in its envelope and the rest as frames (or every field in its envelope)"
                throw SkillbusError(
                    .malformedMessage,
                    "\(command.name) carries \(expected); got \(inEnvelope) field(s) in the envelope and "
                        + "\(frames.count - 1) frame(s) after it")
            }
        }
        return fields
    }

    /// The bytes of envelope field `number`, which starts at `index` (its length, then its bytes); `index` moves
    /// past it. Throws when its length runs past the end of the envelope.
    static func nextField(of envelope: [UInt8], at index: inout Int, number: Int) throws(SkillbusError) -> Range<Int> {
        var count = Int(envelope[index])
        index += 1
        if count == 0xFF {
            guard index + 4 <= envelope.count else {
                throw SkillbusError(.malformedMessage, "envelope field \(number): its length runs past the end")
            }
            count = envelope[index..<index + 4].reduce(0) { $0 << 8 | Int($1) }
            index += 4
        }
        guard count <= envelope.count - index else {
            throw SkillbusError(
                .malformedMessage, "envelope field \(number) says \(count) bytes; only \(envelope.count - index) follow")
        }
        defer { index += count }
        return index..<index + count
    }

    /// v1's header frames: a v1 peer is told, in its own framing, that this bus speaks v2.
    static let clientHeaderV1 = Array("SKB1C".utf8)
    static let workerHeaderV1 = Array("SKB1W".utf8)

    /// The refusal a v1 peer can read: `[SKB1C, ERROR, request id, error]` or `[SKB1W, ERROR, error]`.
    static func v1Refusal(_ frames: Multipart, _ error: SkillbusError) -> Multipart? {
        switch frames.first {
        case clientHeaderV1?:
            let cut = frames.count > 2 ? Array(frames[2].prefix(256)) : []
            let requestID = String(validating: cut, as: UTF8.self) != nil ? cut : []
            return [clientHeaderV1, Command.error.frame, requestID, error.json.serialized()]
        case workerHeaderV1?:
            return [workerHeaderV1, Command.error.frame, error.json.serialized()]
        default:
            return nil
        }
    }

    /// The fields in a message's envelope, whatever its layout, when they can be read: what a refusal
    /// needs to name the message and answer its request id.
    static func envelopeFields(_ frames: Multipart) -> Multipart? {
        guard let envelope = frames.first, envelope.count >= 5 else { return nil }
        return try? unpack([envelope], header: Array(envelope.prefix(5)), [:])
    }

    /// Field 2 of a message, its request id in every client command, when the envelope's fields up to it can be
    /// read, whatever follows them (too many fields, a broken length later): the refusal then names the request.
    static func requestID(of frames: Multipart) -> String {
        guard let envelope = frames.first, envelope.count > 5 else { return "" }
        var index = 5
        for number in 1...2 {
            guard index < envelope.count, let range = try? nextField(of: envelope, at: &index, number: number) else {
                return ""
            }
            if number == 2 { return String(validating: envelope[range].prefix(256), as: UTF8.self) ?? "" }
        }
        return ""
    }

    /// The numbered fields of a message from the bus (to a client or a worker, by its header), or nil when
    /// it cannot be read: for load generators that look at a reply's fields without decoding it whole.
    public static func busMessageFields(_ frames: Multipart) -> Multipart? {
        guard let envelope = frames.first else { return nil }
        if envelope.starts(with: clientHeaderBytes) {
            return try? unpack(frames, header: clientHeaderBytes, BusToClientMessage.layout)
        }
        return try? unpack(frames, header: workerHeaderBytes, BusToWorkerMessage.layout)
    }
}
