#if canImport(Glibc)
    import Glibc
#endif

/// A self-pipe that lets any thread wake a socket's owning thread out of `zmq_poll`.
public struct WakePipe: Sendable {
    public let readEnd: Int32
    private let writeEnd: Int32

    public init() throws(ZMQError) {
        var fds: [Int32] = [0, 0]
        guard pipe(&fds) == 0 else { throw ZMQError(operation: "pipe", errno: errno) }
        for fd in fds {
            _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK)
            _ = fcntl(fd, F_SETFD, FD_CLOEXEC)
        }
        readEnd = fds[0]
        writeEnd = fds[1]
    }

    /// Never blocks: a full pipe already means "wake up".
    public func wake() {
        var byte: UInt8 = 1
        _ = write(writeEnd, &byte, 1)
    }

    /// Empties the pipe after a wake-up so the next poll waits again.
    public func drain() {
        var buffer = [UInt8](repeating: 0, count: 256)
        while read(readEnd, &buffer, buffer.count) > 0 {}
    }

    public func close() {
        _ = Glibc.close(readEnd)
        _ = Glibc.close(writeEnd)
    }
}
