import Foundation
import Synchronization

// THE CONCURRENCY RULE. Every socket in Skillbus keeps it; ARCHITECTURE.md may quote this block as it is.
//
// 1. Each ZeroMQ socket has one owning thread. That thread creates the socket, configures it, polls it,
//    sends and receives on it, and closes it. No other thread touches the socket, and no actor holds one.
// 2. Other code talks to the owning thread through a lock-protected outbox plus a wake-up (a pipe polled
//    beside the socket). Handing over a message takes one short lock and never waits for the socket.
// 3. Nothing that runs on Swift's cooperative thread pool blocks: no semaphore waits, no blocking zmq
//    calls, no thread joins. Async code awaits instead: a continuation that the owning thread resumes
//    (see `start` and `stopAndWait`). Synchronous forms exist only for synchronous callers and say so.
// 4. Every loop that waits has a way out: cancellation, a deadline, or shutdown.

/// Owns one ZeroMQ socket on a dedicated thread, by the rule above.
///
/// The thread creates the socket, polls it, sends and receives on it, and closes it. Any other code
/// hands messages to `send` (a lock-protected outbox plus a wake-up pipe) and reads inbound messages
/// from `messages`.
///
/// The loop is also a `TaskExecutor`: a task created with `executorPreference: loop.executor` runs on
/// the socket's own thread, so a quick handler can answer a message with no thread hop at all. A job
/// that reaches a stopped loop runs on a Dispatch thread instead, so no such task is ever stranded.
public final class SocketLoop: Sendable {
    public let messages: AsyncStream<Multipart>
    /// The endpoint the socket bound or connected to last (with the real port after binding `:*`).
    public let endpoint: String
    private let shared: Shared

    /// Runs tasks that prefer it on the socket's thread, between polls.
    public var executor: any TaskExecutor { shared }

    /// What the owning thread reports once the socket is configured: its endpoint, or what went wrong.
    private typealias Startup = @Sendable (Result<String, any Error>) -> Void

    private init(messages: AsyncStream<Multipart>, endpoint: String, shared: Shared) {
        self.messages = messages
        self.endpoint = endpoint
        self.shared = shared
    }

    /// What a loop owns: a libzmq socket of a type, set up by `configure` on the owning thread (set options,
    /// bind or connect), or Skillbus's own DEALER (`ZMTPDealer`), which speaks ZMTP on that thread itself.
    public enum Socket: Sendable {
        case zeroMQ(ZMQContext, ZMQSocketType, configure: @Sendable (ZMQSocket) throws -> Void)
        case ownDealer(ZMTPDealer.Options)
    }

    /// Starts the thread and opens `socket` on it; returns once that is done, without blocking the caller's
    /// thread: the owning thread resumes it. Throws what opening threw, so a bad endpoint is reported to the
    /// caller, not lost on a thread.
    ///
    /// Inbound messages go to `messages`, or, when `onMessage` is given, straight to that handler on the
    /// owning thread (one hop less; the handler must be quick and must not block). `beforeWait` runs on
    /// the owning thread each time the loop has drained its work and is about to wait; it returns how long
    /// the loop may wait at most before it runs again (nil: until a message or a wake-up comes), which is
    /// how a loop keeps deadlines without a timer thread.
    public static func start(
        _ socket: Socket, name: String, onMessage: (@Sendable (Multipart) -> Void)? = nil,
        beforeWait: (@Sendable () -> Duration?)? = nil
    ) async throws -> SocketLoop {
        let (stream, continuation) = AsyncStream.makeStream(of: Multipart.self)
        let shared = Shared(wakePipe: try WakePipe())
        return try await withCheckedThrowingContinuation { started in
            launch(
                shared: shared, inbound: continuation, socket: socket, name: name, onMessage: onMessage,
                beforeWait: beforeWait
            ) { outcome in
                started.resume(with: outcome.map { SocketLoop(messages: stream, endpoint: $0, shared: shared) })
            }
        }
    }

    /// `start` with a libzmq socket of `type`, set up by `configure`.
    public static func start(
        context: ZMQContext,
        type: ZMQSocketType,
        name: String,
        configure: @escaping @Sendable (ZMQSocket) throws -> Void,
        onMessage: (@Sendable (Multipart) -> Void)? = nil,
        beforeWait: (@Sendable () -> Duration?)? = nil
    ) async throws -> SocketLoop {
        try await start(
            .zeroMQ(context, type, configure: configure), name: name, onMessage: onMessage, beforeWait: beforeWait)
    }

    /// The synchronous form of `start`, for synchronous callers only: it blocks the calling thread until
    /// the owning thread has opened the socket. Async code uses `start`.
    public convenience init(
        _ socket: Socket, name: String, onMessage: (@Sendable (Multipart) -> Void)? = nil,
        beforeWait: (@Sendable () -> Duration?)? = nil
    ) throws {
        let (stream, continuation) = AsyncStream.makeStream(of: Multipart.self)
        let shared = Shared(wakePipe: try WakePipe())
        let started = DispatchSemaphore(value: 0)
        let startup = Mutex<Result<String, any Error>>(.success(""))
        Self.launch(
            shared: shared, inbound: continuation, socket: socket, name: name, onMessage: onMessage,
            beforeWait: beforeWait
        ) { outcome in
            startup.withLock { $0 = outcome }
            started.signal()
        }
        started.wait()
        self.init(messages: stream, endpoint: try startup.withLock { $0 }.get(), shared: shared)
    }

    /// The synchronous `init` with a libzmq socket of `type`, set up by `configure`.
    public convenience init(
        context: ZMQContext,
        type: ZMQSocketType,
        name: String,
        configure: @escaping @Sendable (ZMQSocket) throws -> Void,
        onMessage: (@Sendable (Multipart) -> Void)? = nil,
        beforeWait: (@Sendable () -> Duration?)? = nil
    ) throws {
        try self.init(
            .zeroMQ(context, type, configure: configure), name: name, onMessage: onMessage, beforeWait: beforeWait)
    }

    /// Starts the owning thread; it calls `started` once, from itself, when the socket is open.
    private static func launch(
        shared: Shared, inbound: AsyncStream<Multipart>.Continuation, socket kind: Socket, name: String,
        onMessage: (@Sendable (Multipart) -> Void)?, beforeWait: (@Sendable () -> Duration?)?, started: @escaping Startup
    ) {
        let thread = Thread {
            shared.loopThread.store(UInt(pthread_self()), ordering: .releasing)
            defer {
                inbound.finish()
                shared.exited()
            }
            let socket: any LoopSocket
            do {
                switch kind {
                case .zeroMQ(let context, let type, let configure):
                    let zmqSocket = try ZMQSocket(context: context, type: type)
                    try configure(zmqSocket)
                    socket = zmqSocket
                case .ownDealer(let options):
                    socket = try ZMTPDealer(options)
                }
            } catch {
                started(.failure(error))
                return
            }
            started(.success(socket.lastEndpoint))
            let deliver = onMessage ?? { inbound.yield($0) }
            shared.run(socket: socket, deliver: deliver, beforeWait: beforeWait ?? { nil })
            socket.closeSocket()
        }
        thread.name = name
        thread.start()
    }

    /// Queues `message` for the owning thread to send. Never blocks.
    public func send(_ message: Multipart) {
        shared.submit { $0.pending.append(message) }
    }

    /// Makes the loop run `beforeWait` soon, from any thread.
    public func wake() {
        shared.submit { _ in }
    }

    /// Asks the owning thread to stop: it hands what the outbox holds to the socket (its linger bounds
    /// that flush), closes the socket and ends `messages`. Returns at once and never blocks, so it
    /// is safe anywhere: in `deinit`, in `defer`, on the cooperative pool. Only the first call counts.
    public func stop() {
        let first = shared.outbox.withLock { box -> Bool in
            defer { box.stopping = true }
            return !box.stopping
        }
        if first { shared.wakePipe.wake() }
    }

    /// Stops the loop and returns once its thread has closed the socket and left. Awaits (the owning
    /// thread resumes it), never blocks; the wait is bounded by whatever handler the thread is running.
    public func stopAndWait() async {
        stop()
        await shared.waitForExit()
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
        let loopThread = Atomic<UInt>(0)
        /// Whether the owning thread has left, and who awaits that.
        private let departure = Mutex<(done: Bool, waiters: [CheckedContinuation<Void, Never>])>((false, []))

        init(wakePipe: WakePipe) { self.wakePipe = wakePipe }

        /// The pipe closes when nobody can write to it any more: whoever could wake the loop holds `self`.
        deinit { wakePipe.close() }

        /// Called by the owning thread as it leaves: resumes whoever awaits that, and hands the jobs it
        /// will never run to a Dispatch thread.
        func exited() {
            let jobs = outbox.withLock { box in
                box.stopping = true
                defer { box.jobs.removeAll() }
                return box.jobs
            }
            for job in jobs { runElsewhere(job) }
            let waiters = departure.withLock { departure in
                departure.done = true
                defer { departure.waiters.removeAll() }
                return departure.waiters
            }
            for waiter in waiters { waiter.resume() }
        }

        func waitForExit() async {
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                let done = departure.withLock { departure in
                    if !departure.done { departure.waiters.append(continuation) }
                    return departure.done
                }
                if done { continuation.resume() }
            }
        }

        var onLoopThread: Bool {
            loopThread.load(ordering: .acquiring) == UInt(pthread_self())
        }

        /// Changes the outbox and wakes the loop, unless the caller is the loop (it looks again anyway).
        /// Returns false, changing nothing, once the loop is stopping.
        @discardableResult
        func submit(_ change: (inout Outbox) -> Void) -> Bool {
            let inside = onLoopThread
            let (accepted, needsWake) = outbox.withLock { box -> (Bool, Bool) in
                guard !box.stopping else { return (false, false) }
                change(&box)
                guard !inside, !box.woken else { return (true, false) }
                box.woken = true
                return (true, true)
            }
            if needsWake { wakePipe.wake() }
            return accepted
        }

        func enqueue(_ job: consuming ExecutorJob) {
            let job = UnownedJob(job)
            if !submit({ $0.jobs.append(job) }) { runElsewhere(job) }
        }

        /// A job for a loop that will not run it: a task resumed after its loop stopped must still finish.
        private func runElsewhere(_ job: UnownedJob) {
            DispatchQueue.global().async { job.runSynchronously(on: self.asUnownedTaskExecutor()) }
        }

        /// A wait limit as poll's timeout: whole milliseconds, rounded up so that a deadline has passed
        /// when the loop wakes for it.
        static func pollMilliseconds(_ limit: Duration) -> Int {
            guard limit > .zero else { return 0 }
            let (seconds, attoseconds) = limit.components
            let milliseconds = seconds * 1000 + (attoseconds + 999_999_999_999_999) / 1_000_000_000_000_000
            return Int(clamping: min(milliseconds, Int64(Int32.max)))
        }

        /// The shorter of two wait limits (nil: none).
        static func sooner(_ first: Duration?, _ second: Duration?) -> Duration? {
            guard let first, let second else { return first ?? second }
            return min(first, second)
        }

        func run(socket: any LoopSocket, deliver: (Multipart) -> Void, beforeWait: () -> Duration?) {
            var unsent: [Multipart] = []  // taken from the outbox, waiting for the socket to accept them
            var unsentStart = 0
            var moreWork = false
            var waitLimit: Duration?
            // Made once; each round only refreshes the socket's item (a DEALER's descriptor changes on reconnect).
            var items = [socket.pollItem(wantsOutput: false), PollItem(.fileDescriptor(wakePipe.readEnd))]
            while true {
                items[0] = socket.pollItem(wantsOutput: unsentStart < unsent.count)
                let limit = Self.sooner(waitLimit, socket.waitLimit)
                let timeoutMs = moreWork || socket.hasBufferedMessages ? 0 : limit.map(Self.pollMilliseconds) ?? -1
                guard let ready = try? poll(items, timeoutMs: timeoutMs) else { return }
                if ready.readable[1] { wakePipe.drain() }
                socket.polled(readable: ready.readable[0] || ready.failed[0], writable: ready.writable[0])
                // Receive everything queued, whatever woke us: one extra EAGAIN is cheaper than a missed message.
                while true {
                    do {
                        guard let message = try socket.receiveNow() else { break }
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
                waitLimit = beforeWait()
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
                    // Hand the last messages (a DISCONNECT, say) over; closing lingers a bounded time to write them.
                    for message in unsent[unsentStart...] { try? socket.sendNow(message) }
                    return
                }
                while unsentStart < unsent.count {
                    do {
                        try socket.sendNow(unsent[unsentStart])
                        unsentStart += 1
                    } catch {
                        if error.wouldBlock { break }  // high-water mark: wait for POLLOUT
                        if error.contextTerminated { return }
                        unsentStart += 1  // unroutable or refused: drop this one, keep the rest
                    }
                }
                socket.flushSends()
                if unsentStart == unsent.count {
                    unsent.removeAll(keepingCapacity: true)
                    unsentStart = 0
                }
            }
        }
    }
}

/// What a loop's thread drives: a libzmq socket, or the own DEALER. Only the owning thread calls these.
protocol LoopSocket: AnyObject {
    var lastEndpoint: String { get }
    func pollItem(wantsOutput: Bool) -> PollItem
    /// How long the loop may wait at most for the socket's own timers; nil: no limit.
    var waitLimit: Duration? { get }
    /// Messages already read and parsed, which poll cannot report.
    var hasBufferedMessages: Bool { get }
    /// Poll's findings for the socket's item (both false after a timeout): do the I/O they allow.
    func polled(readable: Bool, writable: Bool)
    func receiveNow() throws(ZMQError) -> Multipart?
    func sendNow(_ message: Multipart) throws(ZMQError)
    /// Writes what the sends queued (libzmq's I/O thread does that by itself).
    func flushSends()
    func closeSocket()
}

extension ZMQSocket: LoopSocket {
    func pollItem(wantsOutput: Bool) -> PollItem { PollItem(.socket(self), output: wantsOutput) }
    var waitLimit: Duration? { nil }
    var hasBufferedMessages: Bool { false }
    func polled(readable: Bool, writable: Bool) {}
    func receiveNow() throws(ZMQError) -> Multipart? { try receive(dontWait: true) }
    func sendNow(_ message: Multipart) throws(ZMQError) { try send(message, dontWait: true) }
    func flushSends() {}
    func closeSocket() { close() }
}

extension ZMTPDealer: LoopSocket {
    func pollItem(wantsOutput: Bool) -> PollItem {
        PollItem(.fileDescriptor(pollDescriptor), output: self.wantsOutput)
    }
    func polled(readable: Bool, writable: Bool) { handle(readable: readable, writable: writable) }
    func receiveNow() throws(ZMQError) -> Multipart? { receive() }
    func sendNow(_ message: Multipart) throws(ZMQError) { try send(message) }
    func flushSends() { flush() }
    func closeSocket() { close() }
}
