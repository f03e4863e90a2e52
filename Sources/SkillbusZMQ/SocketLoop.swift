import Foundation
import Synchronization

/// Owns one ZeroMQ socket on a dedicated thread.
///
/// The thread creates the socket, polls it, sends and receives on it, and closes it. Any other code
/// hands messages to `send` (a lock-protected outbox plus a wake-up pipe) and reads inbound messages
/// from `messages`. Nothing here ever blocks Swift's cooperative thread pool.
///
/// The loop is also a `TaskExecutor`: a task created with `executorPreference: loop.executor` runs on
/// the socket's own thread, so a quick handler can answer a message with no thread hop at all.
public final class SocketLoop: Sendable {
    public let messages: AsyncStream<Multipart>
    /// The endpoint the socket bound or connected to last (with the real port after binding `:*`).
    public let endpoint: String
    private let shared: Shared

    /// Runs tasks that prefer it on the socket's thread, between polls.
    public var executor: any TaskExecutor { shared }

    /// Starts the thread and runs `configure` on it (set options, bind or connect) before returning.
    /// Throws what `configure` threw, so a bad endpoint is reported to the caller, not lost on a thread.
    ///
    /// Inbound messages go to `messages`, or, when `onMessage` is given, straight to that handler on the
    /// owning thread (one hop less; the handler must be quick and must not block). `beforeWait` runs on
    /// the owning thread each time the loop has drained its work and is about to wait.
    public init(
        context: ZMQContext,
        type: ZMQSocketType,
        name: String,
        configure: @escaping @Sendable (ZMQSocket) throws -> Void,
        onMessage: (@Sendable (Multipart) -> Void)? = nil,
        beforeWait: (@Sendable () -> Void)? = nil
    ) throws {
        let (stream, continuation) = AsyncStream.makeStream(of: Multipart.self)
        self.messages = stream
        let shared = Shared(wakePipe: try WakePipe())
        self.shared = shared

        let started = DispatchSemaphore(value: 0)
        let startup = Mutex<Result<String, any Error>>(.success(""))
        let thread = Thread {
            shared.loopThread.store(UInt(pthread_self()), ordering: .releasing)
            let socket: ZMQSocket
            do {
                socket = try ZMQSocket(context: context, type: type)
                try configure(socket)
                let endpoint = socket.lastEndpoint
                startup.withLock { $0 = .success(endpoint) }
            } catch {
                startup.withLock { $0 = .failure(error) }
                started.signal()
                continuation.finish()
                shared.stopped.signal()
                return
            }
            started.signal()
            let deliver = onMessage ?? { continuation.yield($0) }
            shared.run(socket: socket, deliver: deliver, beforeWait: beforeWait ?? {})
            socket.close()
            continuation.finish()
            shared.stopped.signal()
        }
        thread.name = name
        thread.start()
        started.wait()
        switch startup.withLock({ $0 }) {
        case .success(let endpoint): self.endpoint = endpoint
        case .failure(let error):
            shared.wakePipe.close()
            throw error
        }
    }

    /// Queues `message` for the owning thread to send. Never blocks.
    public func send(_ message: Multipart) {
        shared.submit { $0.pending.append(message) }
    }

    /// Makes the loop run `beforeWait` soon, from any thread.
    public func wake() {
        shared.submit { _ in }
    }

    /// Stops the thread, closes the socket and ends `messages`. Waits for the thread to leave.
    public func stop() {
        let first = shared.outbox.withLock { box -> Bool in
            defer { box.stopping = true }
            return !box.stopping
        }
        guard first else { return }
        shared.wakePipe.wake()
        shared.stopped.wait()
        shared.wakePipe.close()
    }
}

extension SocketLoop {
    struct Outbox: Sendable {
        var pending: [Multipart] = []
        var jobs: [UnownedJob] = []
        var stopping = false
        /// A wake-up is on its way, so further submissions need not write to the pipe.
        var woken = false
    }

    /// What the owning thread and everybody else share: the outbox, the job queue and the wake-up.
    final class Shared: TaskExecutor, Sendable {
        let outbox = Mutex(Outbox())
        let wakePipe: WakePipe
        let stopped = DispatchSemaphore(value: 0)
        let loopThread = Atomic<UInt>(0)

        init(wakePipe: WakePipe) { self.wakePipe = wakePipe }

        var onLoopThread: Bool {
            loopThread.load(ordering: .acquiring) == UInt(pthread_self())
        }

        /// Changes the outbox and wakes the loop, unless the caller is the loop (it looks again anyway).
        func submit(_ change: (inout Outbox) -> Void) {
            let inside = onLoopThread
            let needsWake = outbox.withLock { box -> Bool in
                guard !box.stopping else { return false }
                change(&box)
                guard !inside, !box.woken else { return false }
                box.woken = true
                return true
            }
            if needsWake { wakePipe.wake() }
        }

        func enqueue(_ job: consuming ExecutorJob) {
            let job = UnownedJob(job)
            submit { $0.jobs.append(job) }
        }

        func run(socket: ZMQSocket, deliver: (Multipart) -> Void, beforeWait: () -> Void) {
            var unsent: [Multipart] = []  // taken from the outbox, waiting for the socket to accept them
            var unsentStart = 0
            var moreWork = false
            while true {
                let items = [
                    PollItem(.socket(socket), input: true, output: unsentStart < unsent.count),
                    PollItem(.fileDescriptor(wakePipe.readEnd)),
                ]
                guard let ready = try? poll(items, timeoutMs: moreWork ? 0 : -1) else { return }
                if ready.readable[1] { wakePipe.drain() }
                // Receive everything queued, whatever woke us: one extra EAGAIN is cheaper than a missed message.
                while true {
                    do {
                        guard let message = try socket.receive(dontWait: true) else { break }
                        deliver(message)
                    } catch {
                        if error.contextTerminated { return }
                        break
                    }
                }
                // Run the tasks that prefer this thread; jobs they enqueue wait for the next round.
                let jobs = outbox.withLock { box in
                    defer { box.jobs.removeAll(keepingCapacity: true) }
                    return box.jobs
                }
                for job in jobs { job.runSynchronously(on: asUnownedTaskExecutor()) }
                beforeWait()
                let (batch, stopping, jobsLeft) = outbox.withLock { box in
                    defer {
                        box.pending.removeAll(keepingCapacity: true)
                        box.woken = false
                    }
                    return (box.pending, box.stopping, !box.jobs.isEmpty)
                }
                unsent.append(contentsOf: batch)
                moreWork = jobsLeft
                if stopping {
                    // Hand the last messages (a DISCONNECT, say) to libzmq; the socket's linger bounds the flush.
                    for message in unsent[unsentStart...] { try? socket.send(message, dontWait: true) }
                    return
                }
                while unsentStart < unsent.count {
                    do {
                        try socket.send(unsent[unsentStart], dontWait: true)
                        unsentStart += 1
                    } catch {
                        if error.wouldBlock { break }  // high-water mark: wait for POLLOUT
                        if error.contextTerminated { return }
                        unsentStart += 1  // unroutable or refused: drop this one, keep the rest
                    }
                }
                if unsentStart == unsent.count {
                    unsent.removeAll(keepingCapacity: true)
                    unsentStart = 0
                }
            }
        }
    }
}
