import Foundation

/// ZMTP's CURVE mechanism (rfc.zeromq.org/spec/26, CurveZMQ, as ZMTP 3 carries it) as values over bytes, with
/// no sockets: the server's and the client's handshake, and the message boxes of an open connection. Every box
/// is one libsodium call (`Sodium`).
///
/// Long-term keys: the server's S/s, the client's C/c. Short-term keys, made per connection: the server's S'/s',
/// the client's C'/c'. The handshake is HELLO (C', a box from C' to S that proves C' knows S), WELCOME (S' and
/// a cookie, boxed from S to C'), INITIATE (the cookie back, then C and a vouch — C' and S boxed from C to S' —
/// and the client's metadata, boxed from C' to S'), READY (the server's metadata, boxed from S' to C') or
/// ERROR (a reason, in clear). Then each frame travels as a MESSAGE: an 8-byte nonce and a box of a flags byte
/// and the frame, from C' to S' one way, S' to C' the other.
enum CurveZMTP {
    static let helloBytes = 200
    static let welcomeBytes = 168
    static let minimumInitiateBytes = 257
    static let cookieBytes = 96
    /// "\x07MESSAGE", the nonce, the MAC and the flags byte: what a MESSAGE adds to the frame it carries.
    static let messageOverhead = 8 + 8 + Sodium.macBytes + 1

    static func name(_ text: String) -> [UInt8] { [UInt8(text.utf8.count)] + Array(text.utf8) }

    /// MESSAGE's name, made once: every frame of an open connection starts with it.
    static let messageName = name("MESSAGE")

    /// A 24-byte nonce: a 16-byte prefix and a short nonce, big-endian.
    static func shortNonce(_ prefix: String, _ counter: UInt64) -> [UInt8] {
        Array(prefix.utf8) + bigEndian(counter)
    }

    /// A 24-byte nonce: an 8-byte prefix and 16 bytes (random, as the sender chose them).
    static func longNonce(_ prefix: String, _ bytes: ArraySlice<UInt8>) -> [UInt8] { Array(prefix.utf8) + bytes }

    static func bigEndian(_ value: UInt64) -> [UInt8] { withUnsafeBytes(of: value.bigEndian) { Array($0) } }

    static func readBigEndian(_ bytes: ArraySlice<UInt8>) -> UInt64 { bytes.reduce(0) { $0 << 8 | UInt64($1) } }

    static func hasName(_ body: ArraySlice<UInt8>, _ text: String) -> Bool {
        let expected = name(text)
        return body.count >= expected.count && body.prefix(expected.count).elementsEqual(expected)
    }

    /// A command frame (ERROR here: the handshake's other commands come from the handshakes).
    static func error(reason: String) -> [UInt8] {
        let text = Array(reason.utf8.prefix(255))
        return ZMTP.commandFrame(name("ERROR") + [UInt8(text.count)] + text)
    }
}

/// The cookie key of a CURVE server, which seals in each WELCOME's cookie the client's and the server's
/// short-term keys, so that the INITIATE that brings the cookie back is known to follow that WELCOME. It is
/// replaced every `lifetime`, and the one before it forgotten one `lifetime` later: a cookie is good for
/// one to two lifetimes, then refused as expired.
public struct CurveCookieKeys {
    public static let lifetime: Duration = .seconds(60)
    private(set) var current: [UInt8]
    private(set) var previous: [UInt8]?
    private var madeAt: ContinuousClock.Instant

    public init(now: ContinuousClock.Instant = .now) {
        current = Sodium.randomBytes(Sodium.keyBytes)
        madeAt = now
    }

    /// Replaces the key once it is `lifetime` old; forgets the previous one once that is two lifetimes old.
    public mutating func rotateIfDue(now: ContinuousClock.Instant) {
        let age = now - madeAt
        guard age >= Self.lifetime else { return }
        if previous != nil { Sodium.wipe(&previous!) }
        if age >= Self.lifetime * 2 {
            Sodium.wipe(&current)
            previous = nil
        } else {
            previous = current
        }
        current = Sodium.randomBytes(Sodium.keyBytes)
        madeAt = now
    }

    /// The keys a cookie may have been sealed with, newest first.
    var valid: [[UInt8]] { [current] + (previous.map { [$0] } ?? []) }
}

/// The boxes of an open CURVE connection: seals outgoing frames as MESSAGE commands with strictly increasing
/// nonces of its own, and opens incoming ones, refusing any whose nonce does not exceed the last it accepted.
/// `forget` wipes the key when the connection closes; nothing seals or opens after that.
struct CurveBoxes {
    private var sharedKey: [UInt8]
    /// The 24-byte nonces: a fixed prefix, then the short nonce, rewritten in place for each box.
    private var sealNonce: [UInt8]
    private var openNonce: [UInt8]
    /// The short nonce the next sealed MESSAGE gets.
    private(set) var nextNonce: UInt64
    /// The short nonce of the last box the peer sent that opened.
    private(set) var peerNonce: UInt64
    /// The plaintext of the frame being sealed, and of the MESSAGE last opened: reused, so that neither
    /// allocates once they have grown to the frames' size.
    private var plain: [UInt8] = []
    private var opened: [UInt8] = []

    init(sharedKey: [UInt8], asServer: Bool, nextNonce: UInt64, peerNonce: UInt64) {
        self.sharedKey = sharedKey
        sealNonce = CurveZMTP.shortNonce(asServer ? "CurveZMQMESSAGES" : "CurveZMQMESSAGEC", 0)
        openNonce = CurveZMTP.shortNonce(asServer ? "CurveZMQMESSAGEC" : "CurveZMQMESSAGES", 0)
        self.nextNonce = nextNonce
        self.peerNonce = peerNonce
    }

    var forgotten: Bool { sharedKey.isEmpty }

    /// Appends `frame` as one MESSAGE command (in a plain ZMTP frame, as libzmq sends it) to `output`.
    mutating func seal(_ frame: [UInt8], more: Bool, command: Bool, to output: inout [UInt8]) throws(ZMTP.Violation) {
        guard !forgotten else { throw .init("a MESSAGE after the connection's keys were forgotten") }
        guard nextNonce < .max else { throw .init("the connection's nonces are used up") }
        Self.write(nextNonce, into: &sealNonce)
        plain.removeAll(keepingCapacity: true)
        plain.append((more ? ZMTP.moreFlag : 0) | (command ? 0x02 : 0))
        plain.append(contentsOf: frame)
        let bodyBytes = 16 + plain.count + Sodium.macBytes
        ZMTP.appendFrameHeader(size: bodyBytes, more: false, command: false, to: &output)
        output.append(contentsOf: CurveZMTP.messageName)
        output.append(contentsOf: sealNonce[16..<24])
        plain.withUnsafeBytes { Sodium.seal($0, nonce: sealNonce, sharedKey: sharedKey, to: &output) }
        nextNonce += 1
    }

    /// Puts `counter`, big-endian, in the last 8 bytes of a 24-byte nonce.
    private static func write(_ counter: UInt64, into nonce: inout [UInt8]) {
        for index in 0..<8 { nonce[16 + index] = UInt8(truncatingIfNeeded: counter >> (56 - 8 * index)) }
    }

    /// The frame a MESSAGE command's body carries, with its MORE and COMMAND flags (a slice of a buffer the
    /// next `open` reuses: copy it out before then).
    mutating func open(_ body: ArraySlice<UInt8>) throws(ZMTP.Violation) -> (
        more: Bool, command: Bool, frame: ArraySlice<UInt8>
    ) {
        guard !forgotten else { throw .init("a MESSAGE after the connection's keys were forgotten") }
        guard body.starts(with: CurveZMTP.messageName) else { throw .init("a command that is no MESSAGE") }
        guard body.count >= CurveZMTP.messageOverhead else { throw .init("a MESSAGE of \(body.count) bytes") }
        let start = body.startIndex
        let nonce = CurveZMTP.readBigEndian(body[start + 8..<start + 16])
        guard nonce > peerNonce else { throw .init("a MESSAGE nonce \(nonce) not above the last, \(peerNonce)") }
        Self.write(nonce, into: &openNonce)
        guard Sodium.open(body[(start + 16)...], nonce: openNonce, sharedKey: sharedKey, into: &opened) else {
            throw .init("a MESSAGE box that does not open")
        }
        peerNonce = nonce
        let flags = opened[0]
        return (flags & ZMTP.moreFlag != 0, flags & 0x02 != 0, opened[1...])
    }

    /// Wipes the key: the connection closed.
    mutating func forget() {
        Sodium.wipe(&sharedKey)
        sharedKey = []
        Sodium.wipe(&plain)
        Sodium.wipe(&opened)
    }
}

/// The server's side of one connection's CURVE handshake: reads HELLO and answers WELCOME, reads INITIATE and
/// asks its owner to decide about the client's long-term key, then answers READY (`accept`) or ERROR.
/// Anything malformed, out of order, or that does not open throws: the owner closes the connection.
struct CurveServerHandshake {
    enum Step { case hello, initiate, decided }

    enum Outcome {
        /// A command frame to send the client.
        case reply([UInt8])
        /// INITIATE was good: decide about `clientKey` (the client's long-term public key), then `accept` or
        /// send `CurveZMTP.error`.
        case authorize(clientKey: [UInt8], metadata: ZMTP.Ready)
    }

    private(set) var step = Step.hello
    private let publicKey: [UInt8]
    private let secretKey: [UInt8]
    private var clientShortKey: [UInt8] = []
    private var shortPublicKey: [UInt8] = []
    private var shortSecretKey: [UInt8] = []
    /// Between C' and s': INITIATE's box, READY's, and every MESSAGE's.
    private var sharedKey: [UInt8] = []
    private var peerNonce: UInt64 = 0

    init(publicKey: [UInt8], secretKey: [UInt8]) {
        self.publicKey = publicKey
        self.secretKey = secretKey
    }

    mutating func receive(_ body: ArraySlice<UInt8>, cookieKeys: CurveCookieKeys) throws(ZMTP.Violation) -> Outcome {
        switch step {
        case .hello: return .reply(try hello(body, cookieKey: cookieKeys.current))
        case .initiate: return try initiate(body, cookieKeys: cookieKeys.valid)
        case .decided: throw .init("a command after INITIATE")
        }
    }

    private mutating func hello(_ body: ArraySlice<UInt8>, cookieKey: [UInt8]) throws(ZMTP.Violation) -> [UInt8] {
        guard CurveZMTP.hasName(body, "HELLO") else { throw .init("a command before HELLO") }
        guard body.count == CurveZMTP.helloBytes else { throw .init("a HELLO of \(body.count) bytes") }
        let bytes = Array(body)
        guard bytes[6] == 1, bytes[7] == 0 else { throw .init("CURVE version \(bytes[6]).\(bytes[7])") }
        clientShortKey = Array(bytes[80..<112])
        let nonce = CurveZMTP.readBigEndian(bytes[112..<120])
        guard let helloKey = Sodium.sharedKey(publicKey: clientShortKey, secretKey: secretKey),
            let signature = Sodium.open(
                bytes[120..<200], nonce: CurveZMTP.shortNonce("CurveZMQHELLO---", nonce), sharedKey: helloKey),
            signature.allSatisfy({ $0 == 0 })
        else { throw .init("a HELLO box that does not open (the client has another server key)") }
        peerNonce = nonce
        (shortPublicKey, shortSecretKey) = Sodium.boxKeyPair()
        let cookieNonce = Sodium.randomBytes(16)
        let cookie =
            cookieNonce
            + Sodium.secretSeal(
                clientShortKey + shortSecretKey, nonce: CurveZMTP.longNonce("COOKIE--", cookieNonce[...]),
                key: cookieKey)
        let welcomeNonce = Sodium.randomBytes(16)
        let box = Sodium.seal(
            shortPublicKey + cookie, nonce: CurveZMTP.longNonce("WELCOME-", welcomeNonce[...]), sharedKey: helloKey)
        step = .initiate
        return ZMTP.commandFrame(CurveZMTP.name("WELCOME") + welcomeNonce + box)
    }

    private mutating func initiate(_ body: ArraySlice<UInt8>, cookieKeys: [[UInt8]]) throws(ZMTP.Violation) -> Outcome {
        guard CurveZMTP.hasName(body, "INITIATE") else { throw .init("a command where INITIATE belongs") }
        guard body.count >= CurveZMTP.minimumInitiateBytes else { throw .init("an INITIATE of \(body.count) bytes") }
        let bytes = Array(body)
        let cookie = bytes[9..<105]
        let cookieNonce = CurveZMTP.longNonce("COOKIE--", cookie.prefix(16))
        guard
            let keys = cookieKeys.lazy.compactMap({
                Sodium.secretOpen(cookie.dropFirst(16), nonce: cookieNonce, key: $0)
            }).first
        else { throw .init("a cookie that does not open (expired, or not this server's)") }
        guard keys == clientShortKey + shortSecretKey else { throw .init("a cookie of another connection") }
        let nonce = CurveZMTP.readBigEndian(bytes[105..<113])
        guard nonce > peerNonce else { throw .init("an INITIATE nonce \(nonce) not above HELLO's, \(peerNonce)") }
        guard let shared = Sodium.sharedKey(publicKey: clientShortKey, secretKey: shortSecretKey),
            let plain = Sodium.open(
                bytes[113...], nonce: CurveZMTP.shortNonce("CurveZMQINITIATE", nonce), sharedKey: shared),
            plain.count >= 128
        else { throw .init("an INITIATE box that does not open") }
        let clientKey = Array(plain[0..<32])
        guard let vouchKey = Sodium.sharedKey(publicKey: clientKey, secretKey: shortSecretKey),
            let vouch = Sodium.open(
                plain[48..<128], nonce: CurveZMTP.longNonce("VOUCH---", plain[32..<48]), sharedKey: vouchKey)
        else { throw .init("a vouch that does not open (not from the key INITIATE names)") }
        guard vouch == clientShortKey + publicKey else { throw .init("a vouch for another key") }
        let metadata = try ZMTP.readProperties(plain[128...])
        peerNonce = nonce
        sharedKey = shared
        // s' did its work: the shared key is all the connection needs from here.
        Sodium.wipe(&shortSecretKey)
        step = .decided
        return .authorize(clientKey: clientKey, metadata: metadata)
    }

    /// READY with `socketType`, and the boxes of the open connection.
    mutating func accept(socketType: String) -> (ready: [UInt8], boxes: CurveBoxes) {
        precondition(step == .decided && !sharedKey.isEmpty, "accept follows a good INITIATE")
        let nonce: UInt64 = 1
        let box = Sodium.seal(
            ZMTP.properties([("Socket-Type", Array(socketType.utf8))]),
            nonce: CurveZMTP.shortNonce("CurveZMQREADY---", nonce), sharedKey: sharedKey)
        let ready = ZMTP.commandFrame(CurveZMTP.name("READY") + CurveZMTP.bigEndian(nonce) + box)
        let boxes = CurveBoxes(sharedKey: sharedKey, asServer: true, nextNonce: nonce + 1, peerNonce: peerNonce)
        forget()
        return (ready, boxes)
    }

    /// Wipes the short-term keys (the connection closed, or they were handed to the boxes).
    mutating func forget() {
        Sodium.wipe(&shortSecretKey)
        Sodium.wipe(&sharedKey)
        shortSecretKey = []
        sharedKey = []
    }
}

/// The client's side of a CURVE handshake: HELLO, then INITIATE once WELCOME came, then the boxes once READY
/// came, or the server's reason when ERROR came instead.
struct CurveClientHandshake {
    enum Outcome {
        case reply([UInt8])
        case ready(ZMTP.Ready, CurveBoxes)
        case refused(reason: String)
    }

    private let serverKey: [UInt8]
    private let publicKey: [UInt8]
    private var secretKey: [UInt8]
    private let metadata: [UInt8]
    private let shortPublicKey: [UInt8]
    private var shortSecretKey: [UInt8]
    private var sharedKey: [UInt8] = []
    private var welcomed = false
    private static let helloNonce: UInt64 = 1
    private static let initiateNonce: UInt64 = 2

    /// `metadata`: ZMTP properties (`ZMTP.properties`), Socket-Type at least.
    init(serverKey: [UInt8], publicKey: [UInt8], secretKey: [UInt8], metadata: [UInt8]) {
        self.serverKey = serverKey
        self.publicKey = publicKey
        self.secretKey = secretKey
        self.metadata = metadata
        (shortPublicKey, shortSecretKey) = Sodium.boxKeyPair()
    }

    /// The HELLO command frame; nil when the server key is no key libsodium accepts.
    func hello() -> [UInt8]? {
        guard let key = Sodium.sharedKey(publicKey: serverKey, secretKey: shortSecretKey) else { return nil }
        let box = Sodium.seal(
            [UInt8](repeating: 0, count: 64), nonce: CurveZMTP.shortNonce("CurveZMQHELLO---", Self.helloNonce),
            sharedKey: key)
        return ZMTP.commandFrame(
            CurveZMTP.name("HELLO") + [1, 0] + [UInt8](repeating: 0, count: 72) + shortPublicKey
                + CurveZMTP.bigEndian(Self.helloNonce) + box)
    }

    mutating func receive(_ body: ArraySlice<UInt8>) throws(ZMTP.Violation) -> Outcome {
        if CurveZMTP.hasName(body, "ERROR") {
            let bytes = Array(body)
            guard bytes.count >= 7, Int(bytes[6]) <= bytes.count - 7 else { throw .init("a truncated ERROR") }
            return .refused(reason: String(decoding: bytes[7..<7 + Int(bytes[6])], as: UTF8.self))
        }
        return welcomed ? try ready(body) : .reply(try welcome(body))
    }

    private mutating func welcome(_ body: ArraySlice<UInt8>) throws(ZMTP.Violation) -> [UInt8] {
        guard CurveZMTP.hasName(body, "WELCOME") else { throw .init("a command where WELCOME belongs") }
        guard body.count == CurveZMTP.welcomeBytes else { throw .init("a WELCOME of \(body.count) bytes") }
        let bytes = Array(body)
        guard let helloKey = Sodium.sharedKey(publicKey: serverKey, secretKey: shortSecretKey),
            let plain = Sodium.open(
                bytes[24...], nonce: CurveZMTP.longNonce("WELCOME-", bytes[8..<24]), sharedKey: helloKey)
        else { throw .init("a WELCOME box that does not open (the server has another key)") }
        let serverShortKey = Array(plain[0..<32])
        let cookie = plain[32..<128]
        guard let vouchKey = Sodium.sharedKey(publicKey: serverShortKey, secretKey: secretKey),
            let shared = Sodium.sharedKey(publicKey: serverShortKey, secretKey: shortSecretKey)
        else { throw .init("a WELCOME with no usable short-term key") }
        let vouchNonce = Sodium.randomBytes(16)
        let vouch = Sodium.seal(
            shortPublicKey + serverKey, nonce: CurveZMTP.longNonce("VOUCH---", vouchNonce[...]),
            sharedKey: vouchKey)
        let box = Sodium.seal(
            publicKey + vouchNonce + vouch + metadata,
            nonce: CurveZMTP.shortNonce("CurveZMQINITIATE", Self.initiateNonce), sharedKey: shared)
        sharedKey = shared
        welcomed = true
        // The long-term secret did its last work in the vouch; c' is in the shared key now.
        Sodium.wipe(&secretKey)
        Sodium.wipe(&shortSecretKey)
        return ZMTP.commandFrame(
            CurveZMTP.name("INITIATE") + cookie + CurveZMTP.bigEndian(Self.initiateNonce) + box)
    }

    private mutating func ready(_ body: ArraySlice<UInt8>) throws(ZMTP.Violation) -> Outcome {
        guard CurveZMTP.hasName(body, "READY") else { throw .init("a command where READY belongs") }
        guard body.count >= 6 + 8 + Sodium.macBytes else { throw .init("a READY of \(body.count) bytes") }
        let bytes = Array(body)
        let nonce = CurveZMTP.readBigEndian(bytes[6..<14])
        guard nonce > 0,
            let plain = Sodium.open(
                bytes[14...], nonce: CurveZMTP.shortNonce("CurveZMQREADY---", nonce), sharedKey: sharedKey)
        else { throw .init("a READY box that does not open") }
        let metadata = try ZMTP.readProperties(plain[...])
        let boxes = CurveBoxes(
            sharedKey: sharedKey, asServer: false, nextNonce: Self.initiateNonce + 1, peerNonce: nonce)
        forget()
        return .ready(metadata, boxes)
    }

    mutating func forget() {
        Sodium.wipe(&secretKey)
        Sodium.wipe(&shortSecretKey)
        Sodium.wipe(&sharedKey)
        sharedKey = []
    }
}
