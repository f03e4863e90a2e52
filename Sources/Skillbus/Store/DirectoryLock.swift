import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// The lock that makes one opener the only user of a store directory: `flock` on a lock file in it, held as long
/// as the file stays open. `flock` belongs to the open file, not to the process, so a second opener in the same
/// process is refused as surely as another process. The holder writes "pid <pid> agent <name>" into the file,
/// so that a refused opener can say who holds it.
final class DirectoryLock: Sendable {
    static let fileName = "store.lock"

    let path: String
    private let fd: Int32

    /// Takes the lock of `directory` for `agent`, or throws `store_refused` at once if someone holds it.
    init(directory: String, agent: String) throws(SkillbusError) {
        path = (directory as NSString).appendingPathComponent(Self.fileName)
        let fd = Glibc.open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0o644)
        guard fd >= 0 else {
            let reason = String(cString: strerror(errno))
            throw SkillbusError(
                .storageUnavailable, "cannot open the lock file \(path): \(reason)",
                details: ["path": .string(path), "errno": .number(Double(errno))])
        }
        guard Self.lock(fd) else {
            let busy = errno == EWOULDBLOCK
            let reason = String(cString: strerror(errno))
            let holder = Self.holder(fd)
            Glibc.close(fd)
            guard busy else {
                throw SkillbusError(
                    .storageUnavailable, "cannot lock \(path): \(reason)", details: ["path": .string(path)])
            }
            var details: [String: JSONValue] = ["directory": .string(directory), "reason": "locked"]
            if let holder { details["holder"] = .string(holder) }
            throw SkillbusError(
                .storeRefused,
                "the store in \(directory) is in use by \(Self.describe(holder)): stop that agent first, or give "
                    + "this one another data directory",
                details: .object(details))
        }
        self.fd = fd
        let note = Array("pid \(getpid()) agent \(agent)\n".utf8)
        _ = ftruncate(fd, 0)
        _ = pwrite(fd, note, note.count, 0)
    }

    /// Takes the `flock` of `fd`, false when someone holds it (errno says why). A lock file with no note in it
    /// was just released: the `flock` may outlive its holder's close for the moment a program another thread of
    /// that process starts holds a copy of the descriptor (until it runs the program, which closes it), so an
    /// opener right after a close tries again for up to 200 ms. A holder writes its note as soon as it locks.
    private static func lock(_ fd: Int32) -> Bool {
        for _ in 0..<40 {
            if flock(fd, LOCK_EX | LOCK_NB) == 0 { return true }
            guard errno == EWOULDBLOCK, holder(fd) == nil else { return false }
            usleep(5_000)
        }
        return flock(fd, LOCK_EX | LOCK_NB) == 0
    }

    /// Empties the lock file and releases the lock (closing the file releases the `flock`). Call once.
    func release() {
        _ = ftruncate(fd, 0)
        Glibc.close(fd)
    }

    /// What the holder wrote into the lock file, if anything.
    private static func holder(_ fd: Int32) -> String? {
        var buffer = [UInt8](repeating: 0, count: 256)
        let count = pread(fd, &buffer, buffer.count, 0)
        guard count > 0 else { return nil }
        let text = String(decoding: buffer.prefix(count), as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
        return text.isEmpty ? nil : text
    }

    private static func describe(_ holder: String?) -> String {
        guard let holder else { return "another opener" }
        if holder.hasPrefix("pid \(getpid()) ") { return "this process (\(holder))" }
        return "another process (\(holder))"
    }
}
