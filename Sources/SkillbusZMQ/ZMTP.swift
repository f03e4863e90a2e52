#if canImport(Glibc)
    import Glibc
#endif

/// The parts of ZMTP 3 (rfc.zeromq.org/spec/23 and 37) a ROUTER or DEALER needs: the greeting, the NULL
/// mechanism's READY command and the properties it shares with CURVE's boxes, PING and PONG, and the frames.
enum ZMTP {
    static let moreFlag: UInt8 = 0x01
    static let longFlag: UInt8 = 0x02
    static let commandFlag: UInt8 = 0x04
    /// The socket types a ROUTER talks to, and a DEALER.
    static let routerPeers: Set<String> = ["DEALER", "REQ", "ROUTER"]
    static let dealerPeers: Set<String> = ["ROUTER", "DEALER", "REP"]
    /// Bytes a connection may have waiting to be written before sends to it fail (as a full pipe).
    static let maxUnsentBytes = 64 << 20
    /// What one read takes from the kernel at most.
    static let readChunk = 64 * 1024

    struct Violation: Error {
        let what: String
        init(_ what: String) { self.what = what }
    }

    static let greetingBytes = 64

    /// Signature, version 3.0, mechanism NULL, not as-server, filler: 64 bytes.
    static let greeting = greeting(mechanism: "NULL", asServer: false)

    /// Signature, version 3.0, `mechanism`, the as-server flag, filler: 64 bytes.
    static func greeting(mechanism: String, asServer: Bool) -> [UInt8] {
        var bytes = [UInt8](repeating: 0, count: greetingBytes)
        bytes[0] = 0xFF
        bytes[8] = 1
        bytes[9] = 0x7F
        bytes[10] = 3
        bytes[12..<12 + mechanism.utf8.count] = ArraySlice(mechanism.utf8)
        bytes[32] = asServer ? 1 : 0
        return bytes
    }

    /// Checks the peer's greeting: ZMTP 3 or later, and `mechanism`. (Not the as-server flag: libzmq always
    /// sends 0 there, its CURVE servers too; who is server follows from who binds.)
    static func checkGreeting(_ greeting: ArraySlice<UInt8>, mechanism expected: String = "NULL") throws(Violation) {
        let bytes = Array(greeting)
        guard bytes[0] == 0xFF, bytes[9] & 1 == 1 else { throw .init("no ZMTP signature") }
        guard bytes[10] >= 3 else { throw .init("ZMTP version \(bytes[10])") }
        let mechanism = bytes[12..<32].prefix { $0 != 0 }
        guard mechanism.elementsEqual(expected.utf8) else { throw .init(mechanismMismatch(Array(mechanism), expected)) }
    }

    /// A peer's mechanism that is not ours, in words.
    static func mechanismMismatch(_ mechanism: [UInt8], _ expected: String) -> String {
        let name = String(decoding: mechanism, as: UTF8.self)
        let hint = name == "NULL" && expected == "CURVE" ? " (a peer without keys)" : ""
        return "mechanism \(name) where \(expected) is spoken\(hint)"
    }

    /// A command frame with `body` (a name, then data).
    static func commandFrame(_ body: [UInt8]) -> [UInt8] {
        var frame: [UInt8] = []
        appendFrameHeader(size: body.count, more: false, command: true, to: &frame)
        return frame + body
    }

    /// A frame's flags and size: short (1 byte) up to 255 bytes, long (8 bytes, big-endian) above.
    static func appendFrameHeader(size: Int, more: Bool, command: Bool, to buffer: inout [UInt8]) {
        let long = size > 255
        buffer.append((more ? moreFlag : 0) | (long ? longFlag : 0) | (command ? commandFlag : 0))
        if long {
            withUnsafeBytes(of: UInt64(size).bigEndian) { buffer.append(contentsOf: $0) }
        } else {
            buffer.append(UInt8(size))
        }
    }

    /// A frame header at `at` in `buffer`: its length, flags and body size; nil when it has not all arrived.
    static func frameHeader(in buffer: [UInt8], at: Int, maxBytes: Int) throws(Violation) -> (Int, UInt8, Int)? {
        guard buffer.count - at >= 2 else { return nil }
        let flags = buffer[at]
        guard flags & ~(moreFlag | longFlag | commandFlag) == 0 else { throw .init("frame flags \(flags)") }
        var size: UInt64
        let header: Int
        if flags & longFlag != 0 {
            guard buffer.count - at >= 9 else { return nil }
            size = 0
            for index in 1...8 { size = size << 8 | UInt64(buffer[at + index]) }
            header = 9
        } else {
            size = UInt64(buffer[at + 1])
            header = 2
        }
        guard size <= UInt64(maxBytes) else { throw .init("a frame of \(size) bytes") }
        return (header, flags, Int(size))
    }

    /// ZMTP metadata: each property a 1-byte name length, the name, a 4-byte value length, the value.
    static func properties(_ list: [(name: String, value: [UInt8])]) -> [UInt8] {
        var bytes: [UInt8] = []
        for (name, value) in list {
            bytes.append(UInt8(name.utf8.count))
            bytes.append(contentsOf: name.utf8)
            withUnsafeBytes(of: UInt32(value.count).bigEndian) { bytes.append(contentsOf: $0) }
            bytes.append(contentsOf: value)
        }
        return bytes
    }

    /// A READY command with Socket-Type.
    static func ready(socketType: String) -> [UInt8] {
        commandFrame([5] + Array("READY".utf8) + properties([("Socket-Type", Array(socketType.utf8))]))
    }

    /// A peer's READY: its Socket-Type and, when it set one, its Identity; and whether it asked for a CURVE
    /// refusal's reason in words (`refusalReasonProperty`).
    struct Ready {
        let socketType: String
        let identity: [UInt8]?
        var wantsRefusalReason = false
    }

    /// The property a CURVE client puts in INITIATE's metadata to be told why it is refused: the ERROR then
    /// carries the reason in words. Without it the reason is "400", the ZAP status libzmq's clients read
    /// (they report it as an authentication failure, and a longer reason as nothing at all).
    static let refusalReasonProperty = "X-Refusal-Reason"

    static func readReady(_ body: ArraySlice<UInt8>) throws(Violation) -> Ready {
        guard body.count >= 6, body.first == 5, body.dropFirst().prefix(5).elementsEqual("READY".utf8) else {
            throw .init("no READY")
        }
        return try readProperties(body.dropFirst(6))
    }

    /// The properties of a READY (or of CURVE's INITIATE and READY boxes) that a ROUTER and a DEALER use.
    static func readProperties(_ metadata: ArraySlice<UInt8>) throws(Violation) -> Ready {
        let bytes = Array(metadata)
        var at = 0
        var socketType: String?
        var identity: [UInt8]?
        var wantsRefusalReason = false
        while at < bytes.count {
            let nameLength = Int(bytes[at])
            guard at + 1 + nameLength + 4 <= bytes.count else { throw .init("a truncated metadata property") }
            let name = String(decoding: bytes[at + 1..<at + 1 + nameLength], as: UTF8.self)
            at += 1 + nameLength
            let valueLength = bytes[at..<at + 4].reduce(0) { $0 << 8 | Int($1) }
            at += 4
            guard valueLength <= bytes.count - at else { throw .init("a truncated metadata property") }
            let value = Array(bytes[at..<at + valueLength])
            at += valueLength
            switch name.lowercased() {
            case "socket-type": socketType = String(decoding: value, as: UTF8.self)
            case "identity": identity = value
            case refusalReasonProperty.lowercased(): wantsRefusalReason = true
            default: break
            }
        }
        guard let socketType else { throw .init("metadata without Socket-Type") }
        return Ready(socketType: socketType, identity: identity, wantsRefusalReason: wantsRefusalReason)
    }

    /// `frames` as one message on the wire (no frames: one empty frame, as libzmq sends an empty message).
    static func appendMessage(_ frames: Multipart, to buffer: inout [UInt8]) {
        guard !frames.isEmpty else { return appendFrame([], more: false, to: &buffer) }
        for (index, frame) in frames.enumerated() { appendFrame(frame, more: index < frames.count - 1, to: &buffer) }
    }

    static func appendFrame(_ body: [UInt8], more: Bool, to buffer: inout [UInt8]) {
        appendFrameHeader(size: body.count, more: more, command: false, to: &buffer)
        buffer.append(contentsOf: body)
    }

    static func isPing(_ body: ArraySlice<UInt8>) -> Bool {
        body.count >= 7 && body.first == 4 && body.dropFirst().prefix(4).elementsEqual("PING".utf8)
    }

    /// PING's body: the name, a 2-byte TTL, then the context PONG sends back (at most 16 bytes of it, as
    /// the specification allows no more).
    static func pingContext(_ body: ArraySlice<UInt8>) -> ArraySlice<UInt8> { body.dropFirst(7).prefix(16) }

    static func pong(_ context: ArraySlice<UInt8>) -> [UInt8] {
        let body: [UInt8] = [4] + Array("PONG".utf8) + context
        return [commandFlag, UInt8(body.count)] + body
    }
}
