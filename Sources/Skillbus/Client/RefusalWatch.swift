import Foundation
import SkillbusZMQ
import Synchronization

/// Hears, for a client with keys, whether the coordinator refused its key: libzmq says so only to a socket
/// monitor (`HANDSHAKE_FAILED_AUTH`, the ERROR command's status 400), so the client's DEALER publishes that
/// event on `endpoint` and this PAIR, on a thread of its own by THE CONCURRENCY RULE, reads it. Then a
/// client that got no answer can say why instead of asking whether the coordinator runs, and a feed watcher
/// (`onRefused`) says so instead of printing nothing.
/// A client on the own DEALER is told the refusal directly (`init()`, then `noteRefusal()`), with no monitor.
final class RefusalWatch: Sendable {
    let endpoint = "inproc://skillbus-client-refusals-\(UUID().uuidString)"
    private let heard: Heard
    private let loop = Mutex<SocketLoop?>(nil)

    /// Set by the PAIR's thread, read by whoever reports an unanswered call.
    private final class Heard: Sendable {
        let refused = Atomic<Bool>(false)
        /// Called once, on the PAIR's thread, at the first refusal.
        let onRefused: (@Sendable () -> Void)?

        init(onRefused: (@Sendable () -> Void)?) { self.onRefused = onRefused }
    }

    /// Whether the coordinator has refused this client's key on some connection.
    var keyRefused: Bool { heard.refused.load(ordering: .acquiring) }

    /// For a client whose DEALER reports refusals itself (the own engine's `onRefused`).
    init() { heard = Heard(onRefused: nil) }

    /// The coordinator refused this client's key.
    func noteRefusal() { heard.refused.store(true, ordering: .releasing) }

    /// Connects the PAIR before the client's DEALER binds the monitor (inproc allows that order), so that no
    /// event is lost. The synchronous form blocks until the PAIR's thread has connected.
    init(context: ZMQContext, onRefused: (@Sendable () -> Void)? = nil) throws {
        heard = Heard(onRefused: onRefused)
        let socket = try SocketLoop(Self.pair(context, endpoint), name: "skillbus-client-refusals", onMessage: hear)
        loop.withLock { $0 = socket }
    }

    init(context: ZMQContext, onRefused: (@Sendable () -> Void)? = nil) async throws {
        heard = Heard(onRefused: onRefused)
        let socket = try await SocketLoop.start(
            Self.pair(context, endpoint), name: "skillbus-client-refusals", onMessage: hear)
        loop.withLock { $0 = socket }
    }

    private static func pair(_ context: ZMQContext, _ endpoint: String) -> SocketLoop.Socket {
        .zeroMQ(context, .pair) { socket in try socket.connect(endpoint) }
    }

    private var hear: @Sendable (Multipart) -> Void {
        { [heard] message in
            guard MonitorEvent(message: message)?.isRefusal == true else { return }
            if !heard.refused.exchange(true, ordering: .acquiringAndReleasing) { heard.onRefused?() }
        }
    }

    /// Makes `socket` (the client's DEALER, before it connects) report refusals here.
    func watch(_ socket: ZMQSocket) throws {
        try socket.monitor(MonitorEvent.refusedByServer, on: endpoint)
    }

    func stop() { loop.withLock { $0?.stop() } }
}
