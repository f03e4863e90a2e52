import CZeroMQ

/// Bounds on one inbound message, applied while its parts are read (libzmq's ZMQ_MAXMSGSIZE bounds
/// each part, not how many there are).
public struct ReceiveLimits: Sendable, Equatable {
    public var frames: Int
    public var bytes: Int

    public init(frames: Int, bytes: Int) {
        self.frames = frames
        self.bytes = bytes
    }

    /// When the first frame alone passes a limit, this much of it is kept all the same: enough of an envelope
    /// to answer in the sender's dialect with its request id, never the whole of a giant frame.
    public static let keptOfFirstFrame = 512
}

/// One message as a serving socket receives it, with what libzmq knows of its connection.
public struct ReceivedMessage {
    /// Every frame, or when `overLimit` only those read before a limit was passed (at least the start of the
    /// first, `ReceiveLimits.keptOfFirstFrame`); after the routing id when the message was received `routed`.
    public var frames: Multipart
    /// The sender's routing id, when the message was received `routed` (a ROUTER's); nil otherwise.
    public var routingID: RoutingID?
    /// The "User-Id" the ZAP handler gave the connection (nil without one, or when not asked for).
    public var userID: String?
    /// The file descriptor of the TCP connection it came on (-1 when unknown), as socket monitors name it.
    public var sourceFD: Int32
    /// How many frames and bytes the whole message had, kept or not.
    public var frameCount: Int
    public var byteCount: Int
    public var overLimit: Bool
}

extension ZMQSocket {
    /// Receives one whole multipart message, as `receive` does, within `limits`, with its connection's
    /// descriptor and (when `readUserID`) the User-Id the ZAP handler gave it. `receive` stays the path
    /// for sockets that need neither: it reads no metadata at all. With `routed` (on a ROUTER), the first
    /// part is the sender's routing id: `routingID`, outside the frames, the limits and the sizes.
    public func receive(
        dontWait: Bool = false, limits: ReceiveLimits, readUserID: Bool, routed: Bool = false
    ) throws(ZMQError) -> ReceivedMessage? {
        var userID: String?
        var sourceFD: Int32 = -1
        let parts = try receiveParts(dontWait: dontWait, limits: limits, routed: routed) { message in
            // Every part read from a connection carries its metadata; a ROUTER's routing-id part may not.
            if sourceFD < 0 { sourceFD = zmq_msg_get(&message, ZMQ_SRCFD) }
            if readUserID, userID == nil, let value = zmq_msg_gets(&message, "User-Id") {
                userID = String(cString: value)
            }
        }
        return parts.map {
            ReceivedMessage(
                frames: $0.frames, routingID: $0.routingID, userID: userID, sourceFD: sourceFD, frameCount: $0.count,
                byteCount: $0.bytes, overLimit: $0.overLimit)
        }
    }

    /// Receives one whole multipart message, as `receive` does, with the "User-Id" its connection was
    /// given by the ZAP handler (nil on a connection without one).
    public func receiveWithUserID(dontWait: Bool = false) throws(ZMQError) -> (message: Multipart, userID: String?)? {
        let limits = ReceiveLimits(frames: .max, bytes: .max)
        return try receive(dontWait: dontWait, limits: limits, readUserID: true).map { ($0.frames, $0.userID) }
    }

    /// Publishes this socket's `events` (ZMQ_EVENT_… bits) on a PAIR socket bound at `endpoint` (inproc),
    /// which the same owning thread then connects and polls (`MonitorEvent` reads what arrives). A socket
    /// has one monitor: a second call replaces the first.
    public func monitor(_ events: Int32, on endpoint: String) throws(ZMQError) {
        guard zmq_socket_monitor(handle, endpoint, events) == 0 else { throw ZMQError.last("zmq_socket_monitor") }
    }

    /// Publishes this socket's handshake failures (see `monitor`).
    public func monitorHandshakeFailures(on endpoint: String) throws(ZMQError) {
        try monitor(MonitorEvent.handshakeFailures, on: endpoint)
    }
}

/// One event of a socket monitor (libzmq's version 1 format): what happened, a value, and the endpoint.
public struct MonitorEvent: Sendable, Equatable {
    public let event: UInt16
    public let value: UInt32
    /// For a bound socket the endpoint it listens on, not the peer's address.
    public let endpoint: String

    /// The events that say a handshake failed.
    public static let handshakeFailures = ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL | ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL
    /// A connection closed (by the peer, or an error); `value` is its descriptor, already closed.
    public static let disconnected = ZMQ_EVENT_DISCONNECTED

    public var isDisconnect: Bool { Int32(event) == ZMQ_EVENT_DISCONNECTED }

    /// A CURVE client's server refused its key: the server's ZAP status code (400) in `value`.
    public static let refusedByServer = ZMQ_EVENT_HANDSHAKE_FAILED_AUTH

    public var isRefusal: Bool { Int32(event) == ZMQ_EVENT_HANDSHAKE_FAILED_AUTH }

    public init?(message: Multipart) {
        guard message.count == 2, message[0].count == 6 else { return nil }
        let head = message[0]
        event = UInt16(head[0]) | UInt16(head[1]) << 8
        value = UInt32(head[2]) | UInt32(head[3]) << 8 | UInt32(head[4]) << 16 | UInt32(head[5]) << 24
        endpoint = String(decoding: message[1], as: UTF8.self)
    }

    /// A handshake that was not a CURVE one with our server key, in words.
    public var handshakeProblem: String? {
        switch Int32(event) {
        case ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL:
            switch Int32(bitPattern: value) {
            case ZMQ_PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH: "no CURVE handshake (the peer has no keys)"
            case ZMQ_PROTOCOL_ERROR_ZMTP_CRYPTOGRAPHIC: "CURVE handshake failed (wrong server key?)"
            default: "handshake failed (protocol error 0x\(String(value, radix: 16)))"
            }
        case ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL: "handshake failed (no CURVE hello, or the peer left during it)"
        default: nil
        }
    }
}
