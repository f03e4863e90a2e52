import Foundation
import Synchronization

/// Owns one ZeroMQ socket on a dedicated thread.
///
/// The thread creates the socket, polls it, sends and receives on it, and closes it. Any other code
/// hands messages to `send` (a lock-protected outbox plus a wake-up pipe) and reads inbound messages
/// from `messages`. Nothing here ever blocks Swift's cooperative thread pool.
public final class SocketLoop: Sendable {
    public let messages: AsyncStream<Multipart>
    /// The endpoint the socket bound or connected to last (with the real port after binding `:*`).
    public let endpoint: String
    private let continuation: AsyncStream<Multipart>.Continuation
    private let shared: Shared

    private struct Outbox: Sendable {
        var pending: [Multipart] = []
        var stopping = false
    }

    /// What the owning thread and the callers both touch.
    private final class Shared: Sendable {
        let outbox = Mutex(Outbox())
        let wakePipe: WakePipe
        let stopped = DispatchSemaphore(value: 0)
        init(wakePipe: WakePipe) { self.wakePipe = wakePipe }
    }

    /// Starts the thread and runs `configure` on it (set options, bind or connect) before returning.
    /// Throws what `configure` threw, so a bad endpoint is reported to the caller, not lost on a thread.
    ///
    /// Inbound messages go to `messages`, or, when `onMessage` is given, straight to that handler on the
    /// owning thread (one hop less; the handler must be quick and must not block).
    public init(
        context: ZMQContext,
        type: ZMQSocketType,
        name: String,
        configure: @escaping @Sendable (ZMQSocket) throws -> Void,
        onMessage: (@Sendable (Multipart) -> Void)? = nil
    ) throws {
        let (stream, continuation) = AsyncStream.makeStream(of: Multipart.self)
        self.messages = stream
        self.continuation = continuation
        let shared = Shared(wakePipe: try WakePipe())
        self.shared = shared

        let started = DispatchSemaphore(value: 0)
        let startup = Mutex<Result<String, any Error>>(.success(""))
        let thread = Thread {
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
            SocketLoop.run(socket: socket, shared: shared, deliver: deliver)
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
        let accepted = shared.outbox.withLock { box -> Bool in
            guard !box.stopping else { return false }
            box.pending.append(message)
            return box.pending.count == 1  // only the first message of a batch needs a wake-up
        }
        if accepted { shared.wakePipe.wake() }
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

    private static func run(
        socket: ZMQSocket,
        shared: Shared,
        deliver: (Multipart) -> Void
    ) {
        var unsent: [Multipart] = []  // taken from the outbox, waiting for the socket to accept them
        var unsentStart = 0
        let wakePipe = shared.wakePipe
        while true {
            let items = [
                PollItem(.socket(socket), input: true, output: unsentStart < unsent.count),
                PollItem(.fileDescriptor(wakePipe.readEnd)),
            ]
            guard let ready = try? poll(items, timeoutMs: -1) else { return }
            if ready.readable[1] {
                wakePipe.drain()
                let (batch, stopping) = shared.outbox.withLock { box in
                    defer { box.pending.removeAll(keepingCapacity: true) }
                    return (box.pending, box.stopping)
                }
                unsent.append(contentsOf: batch)
                if stopping {
                    // Hand the last messages (a DISCONNECT, say) to libzmq; the socket's linger bounds the flush.
                    for message in unsent[unsentStart...] { try? socket.send(message, dontWait: true) }
                    return
                }
            }
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
