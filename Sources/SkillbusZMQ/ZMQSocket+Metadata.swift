import CZeroMQ

extension ZMQSocket {
    /// Receives one whole multipart message, as `receive` does, with the "User-Id" its connection was
    /// given by the ZAP handler (nil on a connection without one). `receive` stays the path for sockets
    /// that do not authenticate: it reads no metadata at all.
    public func receiveWithUserID(dontWait: Bool = false) throws(ZMQError) -> (message: Multipart, userID: String?)? {
        var userID: String?
        let frames = try receiveParts(dontWait: dontWait) { message in
            // Every part read from a connection carries its metadata; a ROUTER's routing-id part may not.
            if userID == nil, let value = zmq_msg_gets(&message, "User-Id") { userID = String(cString: value) }
        }
        return frames.map { ($0, userID) }
    }

    /// Publishes this socket's handshake failures on a PAIR socket bound at `endpoint` (inproc), which
    /// the same owning thread then connects and polls (`MonitorEvent` reads what arrives).
    public func monitorHandshakeFailures(on endpoint: String) throws(ZMQError) {
        let events = ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL | ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL
        guard zmq_socket_monitor(handle, endpoint, events) == 0 else { throw ZMQError.last("zmq_socket_monitor") }
    }
}

/// One event of a socket monitor (libzmq's version 1 format): what happened, a value, and the endpoint.
public struct MonitorEvent: Sendable, Equatable {
    public let event: UInt16
    public let value: UInt32
    /// For a bound socket the endpoint it listens on, not the peer's address.
    public let endpoint: String

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
