import CZeroMQ
import Dispatch
import Foundation
import Synchronization

/// A libzmq context. The context itself is thread-safe; sockets made from it are not.
public final class ZMQContext: @unchecked Sendable {  // the raw handle is thread-safe by libzmq's contract
    let handle: UnsafeMutableRawPointer
    private let terminated = Atomic<Bool>(false)

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

    /// Ends the context once every socket is closed, after their linger has flushed what they still
    /// hold (a worker's goodbye, say). Waits at most `limit`: a socket left open must not hang an exit.
    public func terminate(within limit: DispatchTimeInterval) {
        let done = DispatchSemaphore(value: 0)
        Thread.detachNewThread {
            self.terminate()
            done.signal()
        }
        _ = done.wait(timeout: .now() + limit)
    }

    private func terminate() {
        guard !terminated.exchange(true, ordering: .acquiringAndReleasing) else { return }
        zmq_ctx_term(handle)
    }

    deinit {
        terminate()
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
