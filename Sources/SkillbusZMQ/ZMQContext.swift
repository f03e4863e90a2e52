import CZeroMQ

/// A libzmq context. The context itself is thread-safe; sockets made from it are not.
public final class ZMQContext: @unchecked Sendable {  // the raw handle is thread-safe by libzmq's contract
    let handle: UnsafeMutableRawPointer

    public init(ioThreads: Int32 = 1) throws(ZMQError) {
        guard let handle = zmq_ctx_new() else { throw ZMQError.last("zmq_ctx_new") }
        zmq_ctx_set(handle, ZMQ_IO_THREADS, ioThreads)
        // Sockets must not outlive a failed peer forever; they are closed by their owning threads.
        zmq_ctx_set(handle, ZMQ_BLOCKY, 0)
        self.handle = handle
    }

    /// Makes every blocking call on this context's sockets return ETERM, so owning threads can leave.
    public func shutdown() {
        zmq_ctx_shutdown(handle)
    }

    deinit {
        zmq_ctx_term(handle)
    }

    /// The libzmq version this process runs with, for example "4.3.4".
    public static var libraryVersion: String {
        var major: Int32 = 0
        var minor: Int32 = 0
        var patch: Int32 = 0
        zmq_version(&major, &minor, &patch)
        return "\(major).\(minor).\(patch)"
    }
}
