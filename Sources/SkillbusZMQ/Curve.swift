import CZeroMQ

/// A CURVE key pair as libzmq writes it: two Z85 strings of 40 characters (32 bytes each).
public struct CurveKeyPair: Sendable, Equatable {
    public let publicKey: String
    public let secretKey: String

    /// The pair of `secretKey`, or nil when it is no Z85 key.
    public init?(secretKey: String) {
        guard let publicKey = Curve.publicKey(forSecret: secretKey) else { return nil }
        self.publicKey = publicKey
        self.secretKey = secretKey
    }

    /// A new random pair.
    public static func generate() throws(ZMQError) -> CurveKeyPair {
        var publicKey = [CChar](repeating: 0, count: 41)
        var secretKey = [CChar](repeating: 0, count: 41)
        guard zmq_curve_keypair(&publicKey, &secretKey) == 0 else { throw ZMQError.last("zmq_curve_keypair") }
        guard let pair = CurveKeyPair(secretKey: Curve.string(secretKey)) else {
            preconditionFailure("libzmq made a secret key that it cannot read back")
        }
        return pair
    }
}

/// What the client side of a CURVE connection needs: the server's public key and its own pair.
public struct CurveCredentials: Sendable, Equatable {
    public let serverKey: String
    public let keys: CurveKeyPair

    public init(serverKey: String, keys: CurveKeyPair) {
        self.serverKey = serverKey
        self.keys = keys
    }
}

/// Z85 keys and what this libzmq can do with them.
public enum Curve {
    /// Whether this libzmq was built with CURVE (libsodium or its own tweetnacl).
    public static var isAvailable: Bool { zmq_has("curve") == 1 }

    /// The 32 bytes of a 40-character Z85 key, or nil when it is none.
    public static func decode(_ key: String) -> [UInt8]? {
        let text = Array(key.utf8)
        guard text.count == 40, text.allSatisfy(isZ85) else { return nil }
        var bytes = [UInt8](repeating: 0, count: 32)
        let decoded = key.withCString { zmq_z85_decode(&bytes, $0) }
        return decoded == nil ? nil : bytes
    }

    /// The 40-character Z85 form of 32 key bytes.
    public static func encode(_ bytes: [UInt8]) -> String {
        precondition(bytes.count == 32, "a CURVE key has 32 bytes")
        var text = [CChar](repeating: 0, count: 41)
        _ = zmq_z85_encode(&text, bytes, bytes.count)
        return string(text)
    }

    /// The public key of a Z85 secret key, or nil when it is none.
    public static func publicKey(forSecret secret: String) -> String? {
        guard decode(secret) != nil else { return nil }
        var publicKey = [CChar](repeating: 0, count: 41)
        guard secret.withCString({ zmq_curve_public(&publicKey, $0) }) == 0 else { return nil }
        return string(publicKey)
    }

    static func string(_ characters: [CChar]) -> String {
        String(decoding: characters.prefix(while: { $0 != 0 }).map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    /// The 85 characters of Z85 (ZeroMQ RFC 32): digits, letters and `.-:+=^!/*?&<>()[]{}@%$#`.
    private static func isZ85(_ byte: UInt8) -> Bool {
        switch byte {
        case UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "a")...UInt8(ascii: "z"),
            UInt8(ascii: "A")...UInt8(ascii: "Z"):
            true
        default: Array(".-:+=^!/*?&<>()[]{}@%$#".utf8).contains(byte)
        }
    }
}

extension ZMQSocket {
    /// Makes this socket a CURVE server with `secretKey`; every connection is then authenticated by the
    /// ZAP handler of the socket's context under `domain`. Call before bind.
    public func useCurveServer(secretKey: String, domain: String) throws(ZMQError) {
        guard let secret = Curve.decode(secretKey) else { throw ZMQError(operation: "CURVE secret key", errno: EINVAL) }
        try setOption(ZMQ_CURVE_SERVER, int32: 1)
        try setOption(ZMQ_CURVE_SECRETKEY, bytes: secret)
        try setOption(ZMQ_ZAP_DOMAIN, bytes: Array(domain.utf8))
        // Without a ZAP handler libzmq would let every key in; this option (a draft in 4.3) makes it refuse
        // instead. Older builds do not know it: the coordinator binds its handler first either way.
        try? setOption(Self.zapEnforceDomain, int32: 1)
    }

    /// Makes this socket a CURVE client of the server whose public key is `credentials.serverKey`.
    /// Call before connect.
    public func useCurveClient(_ credentials: CurveCredentials) throws(ZMQError) {
        guard let server = Curve.decode(credentials.serverKey), let own = Curve.decode(credentials.keys.publicKey),
            let secret = Curve.decode(credentials.keys.secretKey)
        else { throw ZMQError(operation: "CURVE keys", errno: EINVAL) }
        try setOption(ZMQ_CURVE_SERVERKEY, bytes: server)
        try setOption(ZMQ_CURVE_PUBLICKEY, bytes: own)
        try setOption(ZMQ_CURVE_SECRETKEY, bytes: secret)
    }

    /// ZMQ_ZAP_ENFORCE_DOMAIN, which zmq.h only declares for draft builds.
    static let zapEnforceDomain: Int32 = 93
}
