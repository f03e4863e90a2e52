import Foundation
import SkillbusZMQ

/// The bus's ROUTER as the coordinator's loop uses it. On a TCP endpoint (IPv4, IPv6 or a host name) it is
/// Skillbus's own (`ZMTPRouter`: ZMTP on the loop's thread, no libzmq I/O thread in between), NULL or, with
/// keys, CURVE; on another transport (ipc, inproc), libzmq's. `SKILLBUS_BUS_ENGINE=libzmq` keeps libzmq's in
/// every case (and the workers' DEALER too: `AgentWorker.busSocket`); it is for tests and measurements only.
protocol BusRouter: AnyObject {
    var lastEndpoint: String { get }
    /// Which engine serves the bus, for the startup log: "own ZMTP engine" or "libzmq".
    var engine: String { get }
    var pollItem: PollItem { get }
    /// Messages already read from the network but not received yet (libzmq's ROUTER: none it tells of).
    var hasBufferedMessages: Bool { get }
    /// The next whole message, or nil when none waits.
    func receiveMessage(limits: ReceiveLimits, readUserID: Bool) -> ReceivedMessage?
    func send(routingID: PeerID, _ frames: Multipart) throws(ZMQError)
    /// From now on, messages to this peer go folded into one frame (PROTOCOL §2.1; libzmq's ROUTER keeps no
    /// state per peer, so it sends them as they are, which every peer reads too).
    func foldFrames(for routingID: PeerID)
    func foldsFrames(for routingID: PeerID) -> Bool
    /// From now on, messages to this peer wait for the flush and go batched (PROTOCOL §2.2; libzmq's ROUTER
    /// sends them one by one, which every peer reads too).
    func batchFrames(for routingID: PeerID)
    /// Whether a send only queues, and `flush` writes: then holding sends back for a batch gains nothing.
    var writesOnFlush: Bool { get }
    /// Hands what was sent to the network (libzmq's I/O thread does that by itself).
    func flush()
    /// Connections closed since the last call, by descriptor (libzmq's come from a socket monitor instead).
    func takeClosedDescriptors() -> [Int32]
    /// CURVE handshakes that failed since the last call (libzmq's come from a socket monitor instead).
    func takeHandshakeFailures() -> [ZMTPRouter.HandshakeFailure]
    /// Closes connections whose handshake took too long (libzmq's ZMQ_HANDSHAKE_IVL does it by itself).
    func expireHandshakes(now: ContinuousClock.Instant)
    func close()
}

enum BusEngine {
    /// False only with `SKILLBUS_BUS_ENGINE=libzmq`: a test or a measurement that compares the engines.
    static var ownAllowed: Bool { ProcessInfo.processInfo.environment["SKILLBUS_BUS_ENGINE"] != "libzmq" }
}

extension ZMQSocket: BusRouter {
    var engine: String { "libzmq" }
    var pollItem: PollItem { PollItem(.socket(self)) }

    func receiveMessage(limits: ReceiveLimits, readUserID: Bool) -> ReceivedMessage? {
        try? receive(dontWait: true, limits: limits, readUserID: readUserID, routed: true)
    }

    func send(routingID: PeerID, _ frames: Multipart) throws(ZMQError) {
        try send(routingID: routingID, frames, dontWait: true)
    }

    func foldFrames(for routingID: PeerID) {}
    func foldsFrames(for routingID: PeerID) -> Bool { false }
    func batchFrames(for routingID: PeerID) {}
    var hasBufferedMessages: Bool { false }
    var writesOnFlush: Bool { false }
    func flush() {}
    func takeClosedDescriptors() -> [Int32] { [] }
    func takeHandshakeFailures() -> [ZMTPRouter.HandshakeFailure] { [] }
    func expireHandshakes(now: ContinuousClock.Instant) {}
}

extension ZMTPRouter: BusRouter {
    var engine: String { "own ZMTP engine" }
    var pollItem: PollItem { PollItem(.fileDescriptor(pollDescriptor)) }
    var writesOnFlush: Bool { true }

    func receiveMessage(limits: ReceiveLimits, readUserID: Bool) -> ReceivedMessage? { receive(limits: limits) }
}
