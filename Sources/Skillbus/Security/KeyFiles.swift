import Foundation
import SkillbusZMQ

/// CURVE key files: `NAME.pub` holds the public key and `NAME.key` the secret one, each as one line of Z85
/// text (40 characters). A secret key file must be readable by its owner alone (mode 0600).
public enum KeyFiles {
    /// Where `generate` put a pair.
    public struct Written: Sendable {
        public let publicFile: String
        public let secretFile: String
        public let keys: CurveKeyPair
    }

    /// Writes a new pair as `directory/NAME.pub` (0644) and `directory/NAME.key` (0600). Never overwrites a
    /// file: a secret key that is lost cannot be made again.
    public static func generate(name: String, directory: String) throws(SkillbusError) -> Written {
        guard SkillDescriptor.isValidIdentifier(name) else {
            throw SkillbusError(.invalidConfiguration, "key name '\(name)': 1-128 of a-z A-Z 0-9 . _ -")
        }
        let (publicFile, secretFile) = (directory + "/\(name).pub", directory + "/\(name).key")
        for file in [publicFile, secretFile] where FileManager.default.fileExists(atPath: file) {
            throw SkillbusError(
                .invalidConfiguration,
                "\(file) already exists; keys are never overwritten (remove both files first to replace the pair)")
        }
        do {
            try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        } catch {
            throw SkillbusError(.invalidConfiguration, "cannot create \(directory): \(error.localizedDescription)")
        }
        let keys: CurveKeyPair
        do {
            keys = try CurveKeyPair.generate()
        } catch {
            throw SkillbusError(.invalidConfiguration, "cannot make a key pair: \(error)")
        }
        // The secret first, created with its final mode, so that it is never readable by others even briefly.
        try create(secretFile, keys.secretKey, mode: 0o600)
        try create(publicFile, keys.publicKey, mode: 0o644)
        return Written(publicFile: publicFile, secretFile: secretFile, keys: keys)
    }

    /// The pair `directory/NAME.key` holds, made first when neither of its files exists (`skillbus up --keys`
    /// keeps its keys across runs, so that names stay bound to the same keys).
    public static func existingOrNew(name: String, directory: String) throws(SkillbusError) -> Written {
        let (publicFile, secretFile) = (directory + "/\(name).pub", directory + "/\(name).key")
        guard FileManager.default.fileExists(atPath: secretFile) else {
            return try generate(name: name, directory: directory)
        }
        return Written(publicFile: publicFile, secretFile: secretFile, keys: try loadSecret(secretFile))
    }

    /// The pair of a secret key file. Refused: a file that others may read, a public key file, a file
    /// whose key does not match the `.pub` beside it, anything but one Z85 key.
    public static func loadSecret(_ path: String) throws(SkillbusError) -> CurveKeyPair {
        if path.hasSuffix(".pub") {
            throw SkillbusError(
                .invalidConfiguration, "\(path) is a public key file; give the secret key file (NAME.key) instead")
        }
        var info = stat()
        guard stat(path, &info) == 0 else {
            throw SkillbusError(.invalidConfiguration, "cannot read secret key file \(path): \(String(cString: strerror(errno)))")
        }
        if info.st_mode & 0o077 != 0 {
            throw SkillbusError(
                .invalidConfiguration,
                "secret key file \(path) may be read by others (mode \(String(info.st_mode & 0o777, radix: 8))); "
                    + "run: chmod 600 \(path)")
        }
        let text = try readKey(path, what: "secret key")
        guard let keys = CurveKeyPair(secretKey: text) else {
            throw SkillbusError(.invalidConfiguration, "\(path) holds no CURVE key (one line of 40 Z85 characters)")
        }
        let beside = String(path.dropLast(path.hasSuffix(".key") ? 4 : 0)) + ".pub"
        if path.hasSuffix(".key"), FileManager.default.fileExists(atPath: beside),
            let stated = try? readKey(beside, what: "public key"), stated != keys.publicKey
        {
            throw SkillbusError(
                .invalidConfiguration, "\(path) does not belong to \(beside): that file holds another public key")
        }
        return keys
    }

    /// A public key given as its 40 Z85 characters, or as the path of a file that holds them.
    public static func loadPublic(_ value: String) throws(SkillbusError) -> String {
        if Curve.decode(value) != nil, !FileManager.default.fileExists(atPath: value) { return value }
        return try loadPublic(file: value)
    }

    /// The public key in the file at `path`.
    static func loadPublic(file path: String) throws(SkillbusError) -> String {
        let text = try readKey(path, what: "public key")
        guard Curve.decode(text) != nil else {
            throw SkillbusError(.invalidConfiguration, "\(path) holds no CURVE key (one line of 40 Z85 characters)")
        }
        return text
    }

    /// What a client or worker connects with: the server's public key (a key or its file) and its own
    /// secret key file.
    public static func credentials(serverKey: String, key: String) throws(SkillbusError) -> CurveCredentials {
        guard Curve.isAvailable else {
            throw SkillbusError(.invalidConfiguration, "this libzmq was built without CURVE; keys cannot be used")
        }
        return CurveCredentials(serverKey: try loadPublic(serverKey), keys: try loadSecret(key))
    }

    private static func readKey(_ path: String, what: String) throws(SkillbusError) -> String {
        guard let data = FileManager.default.contents(atPath: path), let text = String(data: data, encoding: .utf8)
        else { throw SkillbusError(.invalidConfiguration, "cannot read \(what) file \(path)") }
        return text.trimmingCharacters(in: .whitespacesAndNewlines)
    }

    private static func create(_ path: String, _ key: String, mode: mode_t) throws(SkillbusError) {
        let fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode)
        guard fd >= 0 else {
            throw SkillbusError(.invalidConfiguration, "cannot create \(path): \(String(cString: strerror(errno)))")
        }
        defer { close(fd) }
        // The umask may have taken bits off a public key's mode; a secret key's can only lose some.
        _ = fchmod(fd, mode)
        let bytes = Array((key + "\n").utf8)
        guard write(fd, bytes, bytes.count) == bytes.count else {
            throw SkillbusError(.invalidConfiguration, "cannot write \(path): \(String(cString: strerror(errno)))")
        }
    }
}
