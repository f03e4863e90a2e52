import CSodium

/// The libsodium primitives the CURVE mechanism is made of (crypto_box over Curve25519, XSalsa20 and Poly1305;
/// crypto_secretbox; random bytes), over byte arrays. Nothing here is cryptography of its own: each function
/// is one libsodium call and the checks of its sizes.
enum Sodium {
    static let keyBytes = 32
    static let macBytes = 16
    static let nonceBytes = 24

    /// sodium_init, once per process; every entry point below goes through it.
    private static let initialised: Bool = sodium_init() >= 0

    private static func ready() { precondition(initialised, "libsodium could not initialise (sodium_init)") }

    static func randomBytes(_ count: Int) -> [UInt8] {
        ready()
        var bytes = [UInt8](repeating: 0, count: count)
        bytes.withUnsafeMutableBytes { randombytes_buf($0.baseAddress!, $0.count) }
        return bytes
    }

    /// A new short-term (or long-term) crypto_box key pair.
    static func boxKeyPair() -> (publicKey: [UInt8], secretKey: [UInt8]) {
        ready()
        var publicKey = [UInt8](repeating: 0, count: keyBytes)
        var secretKey = [UInt8](repeating: 0, count: keyBytes)
        guard crypto_box_keypair(&publicKey, &secretKey) == 0 else { preconditionFailure("crypto_box_keypair failed") }
        return (publicKey, secretKey)
    }

    /// The public key of a crypto_box secret key.
    static func publicKey(forSecret secretKey: [UInt8]) -> [UInt8]? {
        ready()
        guard secretKey.count == keyBytes else { return nil }
        var publicKey = [UInt8](repeating: 0, count: keyBytes)
        return crypto_scalarmult_base(&publicKey, secretKey) == 0 ? publicKey : nil
    }

    /// The key a box between `publicKey`'s owner and `secretKey`'s owner is sealed and opened with
    /// (crypto_box_beforenm); nil for a key of the wrong size or a public key libsodium refuses.
    static func sharedKey(publicKey: [UInt8], secretKey: [UInt8]) -> [UInt8]? {
        ready()
        guard publicKey.count == keyBytes, secretKey.count == keyBytes else { return nil }
        var key = [UInt8](repeating: 0, count: Int(crypto_box_BEFORENMBYTES))
        return crypto_box_beforenm(&key, publicKey, secretKey) == 0 ? key : nil
    }

    /// Appends the box of `plain` (its MAC, then the ciphertext: `plain.count + macBytes` bytes) to `output`.
    static func seal(
        _ plain: UnsafeRawBufferPointer, nonce: [UInt8], sharedKey: [UInt8], to output: inout [UInt8]
    ) {
        precondition(
            nonce.count == nonceBytes && sharedKey.count == keyBytes, "a box needs a 24-byte nonce, 32-byte key")
        let start = output.count
        output.append(contentsOf: repeatElement(0, count: plain.count + macBytes))
        let empty: UInt8 = 0  // an empty message still needs a pointer
        let rc = withUnsafePointer(to: empty) { emptyPointer in
            output.withUnsafeMutableBufferPointer { buffer in
                crypto_box_easy_afternm(
                    buffer.baseAddress! + start, plain.baseAddress?.assumingMemoryBound(to: UInt8.self) ?? emptyPointer,
                    UInt64(plain.count), nonce, sharedKey)
            }
        }
        precondition(rc == 0, "crypto_box_easy_afternm failed")
    }

    static func seal(_ plain: [UInt8], nonce: [UInt8], sharedKey: [UInt8]) -> [UInt8] {
        var output: [UInt8] = []
        plain.withUnsafeBytes { seal($0, nonce: nonce, sharedKey: sharedKey, to: &output) }
        return output
    }

    /// What `box` holds, or nil when it is too short or was not sealed with this nonce and key (forged,
    /// truncated, or for someone else).
    static func open(_ box: ArraySlice<UInt8>, nonce: [UInt8], sharedKey: [UInt8]) -> [UInt8]? {
        guard box.count >= macBytes, nonce.count == nonceBytes, sharedKey.count == keyBytes else { return nil }
        // One byte more than the message, so that an empty one still has somewhere to go.
        var plain = [UInt8](repeating: 0, count: box.count - macBytes + 1)
        let rc = box.withUnsafeBufferPointer { sealed in
            crypto_box_open_easy_afternm(&plain, sealed.baseAddress!, UInt64(sealed.count), nonce, sharedKey)
        }
        guard rc == 0 else { return nil }
        plain.removeLast()
        return plain
    }

    /// Opens `box` into `plain` (resized to the message, its storage reused from call to call); false when the
    /// box is too short or was not sealed with this nonce and key.
    static func open(_ box: ArraySlice<UInt8>, nonce: [UInt8], sharedKey: [UInt8], into plain: inout [UInt8]) -> Bool {
        guard box.count >= macBytes, nonce.count == nonceBytes, sharedKey.count == keyBytes else { return false }
        let count = box.count - macBytes
        // One byte more than the message, so that an empty one still has somewhere to go.
        if plain.count < count + 1 {
            plain.append(contentsOf: repeatElement(0, count: count + 1 - plain.count))
        } else {
            plain.removeLast(plain.count - count - 1)
        }
        let rc = box.withUnsafeBufferPointer { sealed in
            crypto_box_open_easy_afternm(&plain, sealed.baseAddress!, UInt64(sealed.count), nonce, sharedKey)
        }
        plain.removeLast()
        return rc == 0
    }

    /// A crypto_secretbox of `plain` (MAC, then ciphertext) under `key`.
    static func secretSeal(_ plain: [UInt8], nonce: [UInt8], key: [UInt8]) -> [UInt8] {
        ready()
        precondition(
            nonce.count == nonceBytes && key.count == keyBytes, "a secretbox needs a 24-byte nonce, 32-byte key")
        var output = [UInt8](repeating: 0, count: plain.count + macBytes)
        precondition(
            crypto_secretbox_easy(&output, plain, UInt64(plain.count), nonce, key) == 0, "crypto_secretbox_easy")
        return output
    }

    static func secretOpen(_ box: ArraySlice<UInt8>, nonce: [UInt8], key: [UInt8]) -> [UInt8]? {
        guard box.count >= macBytes, nonce.count == nonceBytes, key.count == keyBytes else { return nil }
        var plain = [UInt8](repeating: 0, count: box.count - macBytes + 1)
        let sealed = Array(box)
        guard crypto_secretbox_open_easy(&plain, sealed, UInt64(sealed.count), nonce, key) == 0 else { return nil }
        plain.removeLast()
        return plain
    }

    /// Overwrites `bytes` with zeros in a way the compiler may not drop (sodium_memzero).
    static func wipe(_ bytes: inout [UInt8]) {
        bytes.withUnsafeMutableBytes { if let base = $0.baseAddress { sodium_memzero(base, $0.count) } }
    }
}
