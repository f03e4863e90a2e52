import Foundation
import Synchronization

/// Reads a pipe line by line on a thread of its own until end of file.
///
/// FileHandle's `readabilityHandler` is a dispatch source on the descriptor; on Linux, closing the pipe
/// while that source is being cancelled can crash the process. A plain blocking `read` on a dedicated
/// thread has no such race, and it owns the pipe until the writer closes it.
///
/// It ships because `up` and `bench` read their children's output through `run`; the tests' process
/// harness spawns through the same `run`, so that one lock serializes every spawn of a process.
public enum LineReader {
    /// Calls `onLine` for each line (without its newline, a final unterminated line included), then `onEnd`.
    private static func start(
        _ pipe: Pipe, name: String,
        onLine: @escaping @Sendable (String) -> Void,
        onEnd: @escaping @Sendable () -> Void = {}
    ) {
        let thread = Thread {
            let fd = pipe.fileHandleForReading.fileDescriptor
            var buffer = [UInt8](repeating: 0, count: 65_536)
            var pending: [UInt8] = []
            while true {
                let count = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
                if count < 0 && errno == EINTR { continue }
                guard count > 0 else { break }
                pending.append(contentsOf: buffer[0..<count])
                while let newline = pending.firstIndex(of: UInt8(ascii: "\n")) {
                    onLine(String(decoding: pending[..<newline], as: UTF8.self))
                    pending.removeSubrange(...newline)
                }
            }
            if !pending.isEmpty { onLine(String(decoding: pending, as: UTF8.self)) }
            onEnd()
            withExtendedLifetime(pipe) {}
        }
        thread.name = name
        thread.start()
    }
}

extension LineReader {
    /// One spawn at a time, across the process: a child spawned while another's pipe ends are still open
    /// here would inherit them and hold them open, and the other's output would never reach end of file.
    private static let spawnLock = Mutex(())

    /// Runs `process` with standard input closed and its standard output and error read line by line
    /// (both streams to `onLine`); `onEnd` runs once both have reached end of file.
    public static func run(
        _ process: Process, name: String,
        onLine: @escaping @Sendable (String) -> Void,
        onEnd: @escaping @Sendable () -> Void = {}
    ) throws {
        let output = Pipe()
        let errors = Pipe()
        process.standardOutput = output
        process.standardError = errors
        process.standardInput = FileHandle.nullDevice
        let closed = Mutex(0)
        for pipe in [output, errors] {
            start(pipe, name: name, onLine: onLine) {
                if closed.withLock({ count -> Int in
                    count += 1
                    return count
                }) == 2 {
                    onEnd()
                }
            }
        }
        try spawnLock.withLock { _ in try process.run() }
    }
}
