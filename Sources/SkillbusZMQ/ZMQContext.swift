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
    /// Never blocks: `zmq_ctx_shutdown` only marks the context.
    public func shutdown() {
        zmq_ctx_shutdown(handle)
    }

    /// Ends the context once every socket is closed, after their linger has flushed what they still
    /// hold (a worker's goodbye, say). Returns when that is done or after `limit`, whichever comes first:
    /// a socket left open must not hang an exit. Awaits, never blocks: `zmq_ctx_term` runs on a thread
    /// of its own, which resumes the caller.
    public func terminate(within limit: Duration) async {
        let once = Once()
        Thread.detachNewThread {
            self.terminate()
            once.resume()
        }
        await withTaskGroup(of: Void.self) { group in
            group.addTask { await once.wait() }
            group.addTask {
                // Cancelled once the context ended; a cancelled caller stops waiting at once.
                try? await Task.sleep(for: limit)
                once.resume()
            }
            await group.next()
            group.cancelAll()
        }
    }

    private func terminate() {
        guard !terminated.exchange(true, ordering: .acquiringAndReleasing) else { return }
        zmq_ctx_term(handle)
    }

    /// Terminates synchronously: it returns once every socket is closed and their linger has run out.
    /// Every `SocketLoop` holds its context until its thread has closed the socket, so this never waits
    /// for an open socket; end a context explicitly with `await terminate(within:)` to bound the linger.
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

/// Resumes one waiter once, whoever calls `resume` first (the waiter may also come after).
private final class Once: Sendable {
    private let state = Mutex<(resumed: Bool, waiter: CheckedContinuation<Void, Never>?)>((false, nil))

    func resume() {
        let waiter = state.withLock { state -> CheckedContinuation<Void, Never>? in
            guard !state.resumed else { return nil }
            state.resumed = true
            defer { state.waiter = nil }
            return state.waiter
        }
        waiter?.resume()
    }

    func wait() async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let resumed = state.withLock { state -> Bool in
                if !state.resumed { state.waiter = continuation }
                return state.resumed
            }
            if resumed { continuation.resume() }
        }
    }
}
