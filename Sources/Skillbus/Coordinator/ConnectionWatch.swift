import Foundation
import SkillbusZMQ

/// Which worker speaks on which TCP connection, and whose connection has just closed. A socket monitor
/// names a closed connection only by its descriptor, which the kernel may hand to the next connection at
/// once; so a worker whose descriptor closed is only a suspect until the ROUTER confirms that it can no
/// longer reach it. No sockets here: `ConnectionWatch` feeds it.
struct DisconnectTracker {
    private var workerOnDescriptor: [Int32: PeerID] = [:]
    /// Suspects and when their connection was reported closed.
    private var suspects: [PeerID: UInt64] = [:]
    /// How long a suspect the ROUTER still reaches stays one (its pipe may close a moment after the event).
    static let suspicionNanos: UInt64 = 1_000_000_000

    var hasSuspects: Bool { !suspects.isEmpty }

    /// A worker message came on descriptor `fd`.
    mutating func heard(worker peer: PeerID, on fd: Int32) {
        guard fd >= 0, workerOnDescriptor[fd] != peer else { return }
        workerOnDescriptor[fd] = peer
    }

    /// The connection on `fd` closed: the worker last heard on it becomes a suspect.
    mutating func closed(_ fd: Int32, now: UInt64) {
        guard let peer = workerOnDescriptor.removeValue(forKey: fd) else { return }
        suspects[peer] = now
    }

    /// Asks `reachable` about every suspect: those it cannot reach are lost (returned, and forgotten);
    /// those it still reaches after `suspicionNanos` are forgiven (a descriptor reused by a live worker).
    mutating func confirm(now: UInt64, reachable: (PeerID) -> Bool) -> [PeerID] {
        var lost: [PeerID] = []
        for (peer, since) in suspects {
            if !reachable(peer) {
                lost.append(peer)
                suspects[peer] = nil
            } else if now &- since > Self.suspicionNanos {
                suspects[peer] = nil
            }
        }
        return lost
    }
}

/// The bus ROUTER's socket monitor, on the coordinator's thread: closed connections go to a
/// `DisconnectTracker`; with keys, failed handshakes are handed on to `BusGuard` (a socket has only one
/// monitor, so this one watches both). Skillbus's own router (`ZMTPRouter`) has no monitor: it reports
/// closed connections itself, to `closed`.
final class ConnectionWatch {
    private let monitor: ZMQSocket?
    var tracker = DisconnectTracker()

    init() { monitor = nil }

    init(router: ZMQSocket, context: ZMQContext, handshakes: Bool) throws {
        let endpoint = "inproc://skillbus-monitor-bus-\(UUID().uuidString)"
        let events = MonitorEvent.disconnected | (handshakes ? MonitorEvent.handshakeFailures : 0)
        try router.monitor(events, on: endpoint)
        let monitor = try ZMQSocket(context: context, type: .pair)
        try monitor.connect(endpoint)
        self.monitor = monitor
    }

    /// The monitor; without one a descriptor poll skips (-1).
    var pollItem: PollItem { monitor.map { PollItem(.socket($0)) } ?? PollItem(.fileDescriptor(-1)) }

    /// Connections that closed, by descriptor, as the router itself saw them.
    func closed(_ descriptors: [Int32], now: UInt64) {
        for fd in descriptors { tracker.closed(fd, now: now) }
    }

    /// Reads what the monitor reported: closed connections to the tracker; the other events (failed
    /// handshakes) are returned.
    func drain(now: UInt64) -> [MonitorEvent] {
        var others: [MonitorEvent] = []
        guard let monitor else { return others }
        while let message = try? monitor.receive(dontWait: true) {
            guard let event = MonitorEvent(message: message) else { continue }
            if event.isDisconnect {
                tracker.closed(Int32(bitPattern: event.value), now: now)
            } else {
                others.append(event)
            }
        }
        return others
    }

    func close() { monitor?.close() }
}
