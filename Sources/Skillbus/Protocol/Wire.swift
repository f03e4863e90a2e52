import SkillbusZMQ

/// Wire protocol v2: field layouts for every message between clients, workers and the bus.
/// docs/PROTOCOL.md is the normative description; keep the two in step.
public enum Wire {
    /// First frame of every client message (after the ROUTER's routing id on the bus side).
    public static let clientHeader = "SKB2C"
    /// First frame of every worker message.
    public static let workerHeader = "SKB2W"

    static let clientHeaderBytes = Array(clientHeader.utf8)
    static let workerHeaderBytes = Array(workerHeader.utf8)

    /// Reads field `index` as UTF-8 text, or explains what is wrong with it.
    static func text(_ message: Multipart, _ index: Int, _ name: String) throws(SkillbusError) -> String {
        guard index < message.count else {
            throw SkillbusError(.malformedMessage, "missing field \(index) (\(name))")
        }
        guard let text = String(utf8: message[index]) else {
            throw SkillbusError(.malformedMessage, "field \(index) (\(name)) is not valid UTF-8")
        }
        return text
    }

    /// Field `index`, checked to be UTF-8 but kept as bytes: ids the bus only passes along are never
    /// turned into Strings and back on the hot path.
    static func textBytes(_ message: Multipart, _ index: Int, _ name: String) throws(SkillbusError) -> [UInt8] {
        guard index < message.count else {
            throw SkillbusError(.malformedMessage, "missing field \(index) (\(name))")
        }
        let field = message[index]
        guard isText(field) else {
            throw SkillbusError(.malformedMessage, "field \(index) (\(name)) is not valid UTF-8")
        }
        return field
    }

    /// Whether bytes are UTF-8 text (ASCII, the common case, is checked without making a String).
    static func isText<Bytes: Collection<UInt8>>(_ bytes: Bytes) -> Bool {
        bytes.allSatisfy { $0 < 0x80 } || String(validating: bytes, as: UTF8.self) != nil
    }

    /// Bytes as a decimal integer: 1 to 18 ASCII digits, nothing else; nil for anything else.
    static func decimalValue<Bytes: Collection<UInt8>>(_ bytes: Bytes) -> Int? {
        guard !bytes.isEmpty, bytes.count <= 18 else { return nil }
        var value = 0
        for digit in bytes {
            guard digit >= UInt8(ascii: "0") && digit <= UInt8(ascii: "9") else { return nil }
            value = value * 10 + Int(digit - UInt8(ascii: "0"))
        }
        return value
    }

    static func json(_ message: Multipart, _ index: Int, _ name: String) throws(SkillbusError) -> JSONValue {
        guard index < message.count else {
            throw SkillbusError(.malformedMessage, "missing field \(index) (\(name))")
        }
        do {
            return try JSONValue(parsing: message[index])
        } catch {
            throw SkillbusError(.malformedMessage, "field \(index) (\(name)): \(error)")
        }
    }

    /// Reads field `index` as a non-negative decimal integer of at most `maximum`.
    static func decimal(_ message: Multipart, _ index: Int, _ name: String, maximum: Int) throws(SkillbusError) -> Int {
        let text = try Wire.text(message, index, name)
        guard let value = decimalValue(message[index]), value <= maximum else {
            throw SkillbusError(
                .malformedMessage,
                "field \(index) (\(name)) must be a decimal integer from 0 to \(maximum), got '\(text)'")
        }
        return value
    }

    /// The size at which libzmq itself drops a connection (ZMQ_MAXMSGSIZE) for a configured message limit.
    /// Well above the limit, so that a message over the limit but below this is read whole and answered
    /// `message_too_large`, and only a giant one costs the sender its connection.
    public static func hardCap(forLimit maxMessageBytes: Int) -> Int64 { Int64(maxMessageBytes) * 4 + 4096 }

    /// The most frames one inbound message may have (after a ROUTER's routing id); no message of this
    /// protocol has more than twelve. The bus stops keeping a message's frames past it, or past
    /// `maxMessageBytes`, while it still reads them (§9).
    public static let maxFrames = 32

    /// The longest feed subscription (a topic prefix) the feed applies; no topic is half as long.
    public static let maxSubscriptionBytes = 256
    /// The feed's ZMQ_MAXMSGSIZE: a subscription message over it closes the subscriber's connection before
    /// it is held; one between `maxSubscriptionBytes` and this is refused and counted.
    public static let feedHardCap: Int64 = 4096
    /// The first byte of a batch subscription and of a batch's topic frame (§7).
    static let feedBatchMark = UInt8(ascii: "+")

    /// The largest feed frame a subscriber (a replica, `FeedSubscriber`) takes (its ZMQ_MAXMSGSIZE): far
    /// above any event of a coordinator's default limits (an ENTRY is as large as a READY), so only a
    /// broken or hostile feed meets it, and costs its subscriber that connection instead of its memory.
    public static let subscriberHardCap: Int64 = 64 << 20

    /// The longest session id, in UTF-8 bytes.
    public static let maxSessionIDBytes = 128

    /// A session id field: text of at most `maxSessionIDBytes` (empty: no session).
    static func sessionBytes(_ message: Multipart, _ index: Int) throws(SkillbusError) -> [UInt8] {
        let frame = try textBytes(message, index, "session id")
        guard frame.count <= maxSessionIDBytes else {
            throw SkillbusError(
                .malformedMessage, "field \(index) (session id) has \(frame.count) bytes; at most \(maxSessionIDBytes)")
        }
        return frame
    }

    /// The longest timeout or deadline the wire accepts: one day, in milliseconds.
    public static let maxTimeoutMs = 86_400_000

    /// The commands of v1. Their frames are made once, and incoming ones are looked up by their bytes:
    /// no String is made or compared for a message's command on the hot path.
    enum Command: Int, CaseIterable {
        case request, skills, reply, error, ready, result, state, heartbeat, disconnect, welcome, invoke, cancel
        case snapshot, entry, agents, round
        /// A question for one agent about its context (sessions, history, memory), and its answer.
        case query, answer
        /// A worker's context in numbers: sessions held, and whether its store takes writes.
        case context
        /// A turn: a client asks (ASK), the bus hands it to an agent (TURN), the agent ends it (TURNEND),
        /// and the bus answers the client (TURN).
        case ask, turn, turnend
        /// A piece of a turn's reply, as it streams (worker → bus → client).
        case stream
        /// The bus asks a client to approve an invocation (CONFIRM); the client answers (APPROVE).
        case confirm, approve
        /// A turn that holds its round runs calls itself and reports them: one started (CLAIM), one ended
        /// (CALLED); RELEASE gives the round back to the bus before a call goes through it.
        case claim, called, release
        /// A turn that does not hold its round offers to run a call of a skill its agent offers (OFFER); the
        /// bus says whether to run it there, to send it as a REQUEST, or what an identical call gave (VERDICT).
        case offer, verdict
        /// A turn's call ended (worker → bus: STEP); a turn's state or call for the client that follows
        /// it (bus → client: PROGRESS).
        case step, progress
        /// Partial output of a running invocation (worker → bus → every client waiting for it).
        case output
        /// The answer to a CANCEL that names a round: what the bus stopped.
        case cancelled

        /// As it travels: the case name in capitals, `REQUEST`.
        var name: String { String(describing: self).uppercased() }
        var frame: [UInt8] { Self.frames[rawValue] }

        static let frames = allCases.map { Array($0.name.utf8) }
        static let byFrame = Dictionary(uniqueKeysWithValues: allCases.map { ($0.frame, $0) })
    }

    /// Frame 1 as one of the `expected` commands, or an error naming what was there and what is expected.
    static func command(_ message: Multipart, role: String, expected: [Command]) throws(SkillbusError) -> Command {
        guard message.count > 1 else { throw SkillbusError(.malformedMessage, "missing field 1 (command)") }
        if let command = Command.byFrame[message[1]], expected.contains(command) { return command }
        throw unknownCommand(message, role: role, expected: expected)
    }

    static func unknownCommand(_ message: Multipart, role: String, expected: [Command]) -> SkillbusError {
        let names = expected.map(\.name)
        let list = names.dropLast().isEmpty
            ? names.joined() : names.dropLast().joined(separator: ", ") + " or " + (names.last ?? "")
        let shown = String(decoding: message[1].prefix(32), as: UTF8.self)
        return SkillbusError(.malformedMessage, "unknown \(role) command '\(shown)' (expected \(list))")
    }

    /// HEARTBEAT fields with the interval, when known.
    static func heartbeat(_ intervalMs: Int?) -> Multipart {
        [workerHeaderBytes, Command.heartbeat.frame] + (intervalMs.map { [Array(String($0).utf8)] } ?? [])
    }

    /// HEARTBEAT field 2, the sender's interval: optional, and from 10 ms to one hour when present.
    static func heartbeatInterval(_ message: Multipart) throws(SkillbusError) -> Int? {
        try optionalDecimal(message, 2, "heartbeat interval", Registration.heartbeatRange)
    }

    /// An optional decimal field (a timeout, an interval): empty or absent is nil, else within `range`.
    static func optionalDecimal(
        _ message: Multipart, _ index: Int, _ name: String, _ range: ClosedRange<Int>
    ) throws(SkillbusError) -> Int? {
        guard message.count > index, !message[index].isEmpty else { return nil }
        let value = try decimal(message, index, name, maximum: range.upperBound)
        guard value >= range.lowerBound else {
            throw SkillbusError(.malformedMessage, "field \(index) (\(name)) must be at least \(range.lowerBound)")
        }
        return value
    }

    /// The field an optional decimal travels in: empty for nil.
    static func optionalDecimalField(_ value: Int?) -> [UInt8] { Array((value.map(String.init) ?? "").utf8) }

    static func expectFields(_ message: Multipart, _ count: Int, _ command: String) throws(SkillbusError) {
        guard message.count == count else {
            throw SkillbusError(
                .malformedMessage, "\(command) takes \(count) fields, got \(message.count)")
        }
    }
}

/// A text field kept as the bytes it travels in: the bus copies ids from one message to the next without
/// turning them into Strings and back. Read and written as a String; the bytes are `$name`.
@propertyWrapper
public struct WireText: Sendable, Equatable {
    public var projectedValue: [UInt8]

    public init(wrappedValue: String) { projectedValue = Array(wrappedValue.utf8) }
    init(bytes: [UInt8]) { projectedValue = bytes }

    public var wrappedValue: String {
        get { String(decoding: projectedValue, as: UTF8.self) }
        set { projectedValue = Array(newValue.utf8) }
    }
}

/// How an invocation ended, as the wire spells it.
public enum ReplyStatus: String, Sendable, CaseIterable {
    case ok, error

    static let okFrame = Array("ok".utf8)
    static let errorFrame = Array("error".utf8)
    var frame: [UInt8] { self == .ok ? Self.okFrame : Self.errorFrame }

    init(field message: Multipart, _ index: Int) throws(SkillbusError) {
        guard let status = Self(bytes: message[index]) else {
            let shown = String(decoding: message[index].prefix(32), as: UTF8.self)
            throw SkillbusError(.malformedMessage, "field \(index) (status) must be ok or error, got '\(shown)'")
        }
        self = status
    }

    /// The status these bytes spell, or nil.
    init?<Bytes: Collection<UInt8>>(bytes: Bytes) {
        if bytes.elementsEqual(Self.okFrame) {
            self = .ok
        } else if bytes.elementsEqual(Self.errorFrame) {
            self = .error
        } else {
            return nil
        }
    }
}
