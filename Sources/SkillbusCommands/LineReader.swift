import Foundation
import Skillbus
import Synchronization

/// Reads a pipe line by line on a thread of its own until end of file.
///
/// FileHandle's `readabilityHandler` is a dispatch source on the descriptor; on Linux, closing the pipe
/// while that source is being cancelled can crash the process. A plain blocking `read` on a dedicated
/// thread has no such race, and it owns the pipe until the writer closes it.
///
/// It ships because `up` and `bench` read their children's output through `run`; the tests' process
/// harness starts its children through the same `run`.
public enum LineReader {
    /// Calls `onLine` for each line (without its newline, a final unterminated line included), then closes
    /// `descriptor` and calls `onEnd`.
    private static func start(
        _ descriptor: Int32, name: String,
        onLine: @escaping @Sendable (String) -> Void,
        onEnd: @escaping @Sendable () -> Void = {}
    ) {
        let thread = Thread {
            var buffer = [UInt8](repeating: 0, count: 65_536)
            var pending: [UInt8] = []
            while true {
                let count = buffer.withUnsafeMutableBytes { read(descriptor, $0.baseAddress, $0.count) }
                if count < 0 && errno == EINTR { continue }
                guard count > 0 else { break }
                pending.append(contentsOf: buffer[0..<count])
                while let newline = pending.firstIndex(of: UInt8(ascii: "\n")) {
                    onLine(String(decoding: pending[..<newline], as: UTF8.self))
                    pending.removeSubrange(...newline)
                }
            }
            if !pending.isEmpty { onLine(String(decoding: pending, as: UTF8.self)) }
            close(descriptor)
            onEnd()
        }
        thread.name = name
        thread.start()
    }
}

extension LineReader {
    /// Starts `executable` with `arguments` and exactly `environment` (in `directory`, else ours), standard
    /// input closed, its standard output and error read line by line (both streams to `onLine`); `onEnd` runs
    /// once both have reached end of file, `onExit` once it has ended (each on a thread of its own).
    public static func run(
        _ executable: String, _ arguments: [String], environment: [String: String], directory: String? = nil,
        name: String,
        onLine: @escaping @Sendable (String) -> Void,
        onEnd: @escaping @Sendable () -> Void = {},
        onExit: @escaping @Sendable (ChildProcess.Termination) -> Void = { _ in }
    ) throws -> ChildProcess {
        let pipes = try ChildProcess.pipes(2)
        let (output, errors) = (pipes[0], pipes[1])
        let child: ChildProcess
        do {
            child = try ChildProcess.spawn(
                executable, arguments, environment: environment, directory: directory, output: output[1],
                errors: errors[1], onExit: onExit)
        } catch {
            for fd in output + errors { close(fd) }
            throw error
        }
        // The write ends are the child's now.
        close(output[1])
        close(errors[1])
        let closed = Mutex(0)
        for descriptor in [output[0], errors[0]] {
            start(descriptor, name: name, onLine: onLine) {
                if closed.withLock({ count -> Int in
                    count += 1
                    return count
                }) == 2 {
                    onEnd()
                }
            }
        }
        return child
    }
}
