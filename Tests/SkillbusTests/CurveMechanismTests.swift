import Foundation
import Testing

@testable import SkillbusZMQ

/// A client made by hand from libsodium's boxes, whose every step a test can bend: the messages
/// `CurveClientHandshake` sends, built separately, so that a malformed or hostile one can be written too.
struct HandClient {
    let serverKey: [UInt8]
    let long = Sodium.boxKeyPair()
    let short = Sodium.boxKeyPair()
    var serverShortKey: [UInt8] = []
    var cookie: [UInt8] = []

    init(serverKey: [UInt8]) { self.serverKey = serverKey }

    func hello(nonce: UInt64 = 1, size: Int = 200) -> [UInt8] {
        let key = Sodium.sharedKey(publicKey: serverKey, secretKey: short.secretKey)!
        let box = Sodium.seal(
            [UInt8](repeating: 0, count: 64), nonce: CurveZMTP.shortNonce("CurveZMQHELLO---", nonce), sharedKey: key)
        var body = CurveZMTP.name("HELLO") + [1, 0] + [UInt8](repeating: 0, count: 72) + short.publicKey
        body += CurveZMTP.bigEndian(nonce) + box
        return Array((body + [UInt8](repeating: 0, count: max(0, size - body.count))).prefix(size))
    }

    mutating func readWelcome(_ frame: [UInt8]) {
        let body = Array(commandBody(frame))
        let key = Sodium.sharedKey(publicKey: serverKey, secretKey: short.secretKey)!
        let plain = Sodium.open(body[24...], nonce: CurveZMTP.longNonce("WELCOME-", body[8..<24]), sharedKey: key)!
        serverShortKey = Array(plain[0..<32])
        cookie = Array(plain[32..<128])
    }

    /// INITIATE; `vouchSigner` signs the vouch (the client's long-term secret unless a test says otherwise),
    /// `vouched` is what it vouches for (C' and S unless a test says otherwise).
    func initiate(
        nonce: UInt64 = 2, cookie overridden: [UInt8]? = nil, vouchSigner: [UInt8]? = nil, vouched: [UInt8]? = nil,
        metadata: [UInt8] = ZMTP.properties([("Socket-Type", Array("DEALER".utf8))])
    ) -> [UInt8] {
        let vouchKey = Sodium.sharedKey(publicKey: serverShortKey, secretKey: vouchSigner ?? long.secretKey)!
        let vouchNonce = Sodium.randomBytes(16)
        let vouch = Sodium.seal(
            vouched ?? (short.publicKey + serverKey), nonce: CurveZMTP.longNonce("VOUCH---", vouchNonce[...]),
            sharedKey: vouchKey)
        let key = Sodium.sharedKey(publicKey: serverShortKey, secretKey: short.secretKey)!
        let box = Sodium.seal(
            long.publicKey + vouchNonce + vouch + metadata, nonce: CurveZMTP.shortNonce("CurveZMQINITIATE", nonce),
            sharedKey: key)
        return CurveZMTP.name("INITIATE") + (overridden ?? cookie) + CurveZMTP.bigEndian(nonce) + box
    }
}

/// The body of a command frame (what follows its flags and size).
private func commandBody(_ frame: [UInt8]) -> ArraySlice<UInt8> {
    frame[(frame[0] & ZMTP.longFlag != 0 ? 9 : 2)...]
}

/// The bodies of the frames in `wire`.
private func frameBodies(_ wire: [UInt8]) throws -> [ArraySlice<UInt8>] {
    var bodies: [ArraySlice<UInt8>] = []
    var at = 0
    while let (header, _, size) = try ZMTP.frameHeader(in: wire, at: at, maxBytes: .max) {
        bodies.append(wire[at + header..<at + header + size])
        at += header + size
    }
    return bodies
}

private func violation(_ body: () throws -> Void) -> String? {
    do {
        try body()
        return nil
    } catch let error as ZMTP.Violation {
        return error.what
    } catch {
        return "\(error)"
    }
}

@Suite("CURVE (CurveZMQ, RFC 26) as the own engine speaks it: handshake, boxes, and what it refuses")
struct CurveMechanismTests {
    let server = Sodium.boxKeyPair()
    let cookieKeys = CurveCookieKeys()

    func serverHandshake() -> CurveServerHandshake {
        CurveServerHandshake(publicKey: server.publicKey, secretKey: server.secretKey)
    }

    /// A server and a hand-made client through WELCOME.
    func welcomed() throws -> (CurveServerHandshake, HandClient) {
        var handshake = serverHandshake()
        var client = HandClient(serverKey: server.publicKey)
        guard case .reply(let welcome) = try handshake.receive(client.hello()[...], cookieKeys: cookieKeys) else {
            throw ZMTP.Violation("no WELCOME")
        }
        client.readWelcome(welcome)
        return (handshake, client)
    }

    /// The own client and the own server through READY: both sides' boxes.
    func openPair() throws -> (server: CurveBoxes, client: CurveBoxes, clientKey: [UInt8], metadata: ZMTP.Ready) {
        let long = Sodium.boxKeyPair()
        var client = CurveClientHandshake(
            serverKey: server.publicKey, publicKey: long.publicKey, secretKey: long.secretKey,
            metadata: ZMTP.properties([("Socket-Type", Array("DEALER".utf8)), ("Identity", Array("w1".utf8))]))
        var handshake = serverHandshake()
        guard case .reply(let welcome) = try handshake.receive(commandBody(client.hello()!), cookieKeys: cookieKeys),
            case .reply(let initiate) = try client.receive(commandBody(welcome)),
            case .authorize(let clientKey, let metadata) = try handshake.receive(
                commandBody(initiate), cookieKeys: cookieKeys)
        else { throw ZMTP.Violation("the handshake went another way") }
        #expect(clientKey == long.publicKey)
        let (ready, serverBoxes) = handshake.accept(socketType: "ROUTER")
        guard case .ready(let serverMetadata, let clientBoxes) = try client.receive(commandBody(ready)) else {
            throw ZMTP.Violation("no READY")
        }
        #expect(serverMetadata.socketType == "ROUTER")
        return (serverBoxes, clientBoxes, clientKey, metadata)
    }

    @Test("the own client and server agree: the client's key and metadata reach the server, frames cross both ways")
    func handshakeAndMessages() throws {
        var (serverBoxes, clientBoxes, _, metadata) = try openPair()
        #expect(metadata.socketType == "DEALER")
        #expect(metadata.identity == Array("w1".utf8))
        var wire: [UInt8] = []
        try clientBoxes.seal(Array("hello".utf8), more: true, command: false, to: &wire)
        try clientBoxes.seal([], more: false, command: false, to: &wire)
        let bodies = try frameBodies(wire)
        #expect(bodies.count == 2)
        let first = try serverBoxes.open(bodies[0])
        #expect(first.more && !first.command && Array(first.frame) == Array("hello".utf8))
        let second = try serverBoxes.open(bodies[1])
        #expect(!second.more && second.frame.isEmpty)
        var back: [UInt8] = []
        try serverBoxes.seal(Array("PONG".utf8), more: false, command: true, to: &back)
        let reply = try clientBoxes.open(try frameBodies(back)[0])
        #expect(reply.command && Array(reply.frame) == Array("PONG".utf8))
    }

    @Test("each side's nonces start past the handshake's and rise by one per MESSAGE; none is used twice")
    func noncesIncrease() throws {
        var (serverBoxes, clientBoxes, _, _) = try openPair()
        #expect(clientBoxes.nextNonce == 3)  // HELLO 1, INITIATE 2
        #expect(serverBoxes.nextNonce == 2)  // READY 1
        var wire: [UInt8] = []
        for _ in 0..<3 { try serverBoxes.seal([1, 2, 3], more: false, command: false, to: &wire) }
        let nonces = try frameBodies(wire).map { CurveZMTP.readBigEndian($0.dropFirst(8).prefix(8)) }
        #expect(nonces == [2, 3, 4])
        for body in try frameBodies(wire) { _ = try clientBoxes.open(body) }
        #expect(clientBoxes.peerNonce == 4)
    }

    @Test("a replayed, reordered, forged, truncated or misnamed MESSAGE is refused")
    func badMessages() throws {
        var (serverBoxes, clientBoxes, _, _) = try openPair()
        var wire: [UInt8] = []
        try clientBoxes.seal(Array("one".utf8), more: false, command: false, to: &wire)
        try clientBoxes.seal(Array("two".utf8), more: false, command: false, to: &wire)
        let bodies = try frameBodies(wire)
        var forged = Array(bodies[1])
        forged[forged.count - 1] ^= 1
        #expect(violation { _ = try serverBoxes.open(forged[...]) }?.contains("does not open") == true)
        #expect(violation { _ = try serverBoxes.open(bodies[1].prefix(CurveZMTP.messageOverhead - 1)) } != nil)
        var renamed = Array(bodies[1])
        renamed[1] = UInt8(ascii: "X")
        #expect(violation { _ = try serverBoxes.open(renamed[...]) }?.contains("no MESSAGE") == true)
        _ = try serverBoxes.open(bodies[1])
        #expect(violation { _ = try serverBoxes.open(bodies[1]) }?.contains("nonce") == true)  // replayed
        #expect(violation { _ = try serverBoxes.open(bodies[0]) }?.contains("nonce") == true)  // older
    }

    @Test("after forget, the boxes seal and open nothing")
    func forgottenKeys() throws {
        var (serverBoxes, clientBoxes, _, _) = try openPair()
        var wire: [UInt8] = []
        try clientBoxes.seal([7], more: false, command: false, to: &wire)
        serverBoxes.forget()
        #expect(serverBoxes.forgotten)
        #expect(violation { _ = try serverBoxes.open(try frameBodies(wire)[0]) }?.contains("forgotten") == true)
        var out: [UInt8] = []
        #expect(violation { try serverBoxes.seal([1], more: false, command: false, to: &out) } != nil)
        #expect(out.isEmpty)
    }

    @Test("HELLO of the wrong size, version, name or server key is refused", arguments: [199, 201])
    func badHelloSize(size: Int) throws {
        var handshake = serverHandshake()
        let client = HandClient(serverKey: server.publicKey)
        #expect(violation { _ = try handshake.receive(client.hello(size: size)[...], cookieKeys: cookieKeys) } != nil)
    }

    @Test("HELLO boxed for another server key, of another version, or another command first, is refused")
    func badHello() throws {
        let other = Sodium.boxKeyPair()
        var handshake = serverHandshake()
        let stranger = HandClient(serverKey: other.publicKey)
        #expect(
            violation { _ = try handshake.receive(stranger.hello()[...], cookieKeys: cookieKeys) }?.contains(
                "another server key") == true)
        var version = HandClient(serverKey: server.publicKey).hello()
        version[6] = 2
        var fresh = serverHandshake()
        #expect(violation { _ = try fresh.receive(version[...], cookieKeys: cookieKeys) }?.contains("version") == true)
        var first = serverHandshake()
        #expect(
            violation {
                _ = try first.receive(
                    CurveZMTP.name("INITIATE")[...] + [UInt8](repeating: 0, count: 300), cookieKeys: cookieKeys)
            } != nil)
    }

    @Test("a good INITIATE asks for a decision about the client's long-term key")
    func goodInitiate() throws {
        var (handshake, client) = try welcomed()
        guard
            case .authorize(let key, let metadata) = try handshake.receive(
                client.initiate()[...], cookieKeys: cookieKeys)
        else {
            Issue.record("no decision asked")
            return
        }
        #expect(key == client.long.publicKey)
        #expect(metadata.socketType == "DEALER")
    }

    @Test("a truncated INITIATE, one whose nonce does not rise, or whose box was cut, is refused")
    func badInitiate() throws {
        var (short, client) = try welcomed()
        let initiate = client.initiate()
        #expect(
            violation { _ = try short.receive(initiate.prefix(256), cookieKeys: cookieKeys) }?.contains("bytes") == true
        )
        var (stale, staleClient) = try welcomed()
        #expect(
            violation { _ = try stale.receive(staleClient.initiate(nonce: 1)[...], cookieKeys: cookieKeys) }?.contains(
                "nonce") == true)
        var (cut, cutClient) = try welcomed()
        let whole = cutClient.initiate(metadata: ZMTP.properties([("Socket-Type", Array("DEALER".utf8))]))
        #expect(
            violation { _ = try cut.receive(whole.dropLast(3), cookieKeys: cookieKeys) }?.contains("does not open")
                == true)
        _ = client
    }

    @Test("a cookie of another connection (replayed) is refused")
    func replayedCookie() throws {
        let (_, first) = try welcomed()
        var (second, secondClient) = try welcomed()
        // The second connection's INITIATE, carrying the first's cookie.
        let replayed = secondClient.initiate(cookie: first.cookie)
        #expect(
            violation { _ = try second.receive(replayed[...], cookieKeys: cookieKeys) }?.contains("another connection")
                == true)
    }

    @Test("a cookie sealed with a key rotated away is refused as expired; one rotation later it still opens")
    func expiredCookie() throws {
        let start = ContinuousClock.now
        var keys = CurveCookieKeys(now: start)
        var handshake = serverHandshake()
        var client = HandClient(serverKey: server.publicKey)
        guard case .reply(let welcome) = try handshake.receive(client.hello()[...], cookieKeys: keys) else {
            Issue.record("no WELCOME")
            return
        }
        client.readWelcome(welcome)
        var late = handshake
        keys.rotateIfDue(now: start + .seconds(61))
        guard case .authorize = try handshake.receive(client.initiate()[...], cookieKeys: keys) else {
            Issue.record("a cookie one rotation old was refused")
            return
        }
        keys.rotateIfDue(now: start + .seconds(122))
        #expect(
            violation { _ = try late.receive(client.initiate()[...], cookieKeys: keys) }?.contains("expired") == true)
    }

    @Test("the cookie key rotates each lifetime, and the previous one is forgotten the lifetime after")
    func cookieRotation() {
        let start = ContinuousClock.now
        var keys = CurveCookieKeys(now: start)
        let first = keys.current
        keys.rotateIfDue(now: start + .seconds(30))
        #expect(keys.current == first && keys.previous == nil)
        keys.rotateIfDue(now: start + .seconds(60))
        #expect(keys.current != first && keys.previous == first)
        keys.rotateIfDue(now: start + .seconds(180))
        #expect(keys.previous == nil && keys.valid.count == 1)
    }

    @Test("a vouch signed by another long-term key, or vouching for another short-term key, is refused")
    func badVouch() throws {
        var (signed, signedClient) = try welcomed()
        let intruder = Sodium.boxKeyPair()
        #expect(
            violation {
                _ = try signed.receive(
                    signedClient.initiate(vouchSigner: intruder.secretKey)[...], cookieKeys: cookieKeys)
            }?.contains("vouch") == true)
        var (forOther, otherClient) = try welcomed()
        let elsewhere = Sodium.boxKeyPair().publicKey + server.publicKey
        #expect(
            violation {
                _ = try forOther.receive(otherClient.initiate(vouched: elsewhere)[...], cookieKeys: cookieKeys)
            }?.contains("another key") == true)
        _ = signedClient
    }

    @Test("a command after INITIATE is refused; the server's ERROR reaches the client as a refusal with its reason")
    func afterInitiateAndError() throws {
        var (handshake, client) = try welcomed()
        _ = try handshake.receive(client.initiate()[...], cookieKeys: cookieKeys)
        #expect(violation { _ = try handshake.receive(client.initiate(nonce: 3)[...], cookieKeys: cookieKeys) } != nil)
        let long = Sodium.boxKeyPair()
        var own = CurveClientHandshake(
            serverKey: server.publicKey, publicKey: long.publicKey, secretKey: long.secretKey,
            metadata: ZMTP.properties([("Socket-Type", Array("DEALER".utf8))]))
        guard case .refused(let reason) = try own.receive(commandBody(CurveZMTP.error(reason: "unknown key"))) else {
            Issue.record("ERROR was no refusal")
            return
        }
        #expect(reason == "unknown key")
        #expect(
            violation { _ = try own.receive(CurveZMTP.name("ERROR")[...] + [9, 65]) }?.contains("truncated") == true)
    }

    @Test("the own client refuses a WELCOME from a server with another key")
    func welcomeFromAnotherServer() throws {
        let impostor = Sodium.boxKeyPair()
        let long = Sodium.boxKeyPair()
        var client = CurveClientHandshake(
            serverKey: server.publicKey, publicKey: long.publicKey, secretKey: long.secretKey,
            metadata: ZMTP.properties([("Socket-Type", Array("DEALER".utf8))]))
        // The impostor cannot open HELLO; a WELCOME it makes up is boxed with its own key.
        var fake = CurveServerHandshake(publicKey: impostor.publicKey, secretKey: impostor.secretKey)
        let hand = HandClient(serverKey: impostor.publicKey)
        guard case .reply(let welcome) = try fake.receive(hand.hello()[...], cookieKeys: cookieKeys) else { return }
        #expect(violation { _ = try client.receive(commandBody(welcome)) }?.contains("another key") == true)
    }
}
