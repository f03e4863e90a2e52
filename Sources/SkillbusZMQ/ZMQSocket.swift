import CZeroMQ

/// The socket types Skillbus uses.
public enum ZMQSocketType: Sendable {
    case router, dealer, pub, xpub, sub, pair, rep

    var rawValue: Int32 {
        switch self {
        case .router: ZMQ_ROUTER
        case .dealer: ZMQ_DEALER
        case .pub: ZMQ_PUB
        case .xpub: ZMQ_XPUB
        case .sub: ZMQ_SUB
        case .pair: ZMQ_PAIR
        case .rep: ZMQ_REP
        }
    }
}

/// One message: its frames in order.
public typealias Multipart = [[UInt8]]

/// A libzmq socket. Not thread-safe: create, use and close it on one thread (see `SocketLoop`).
public final class ZMQSocket {
    let handle: UnsafeMutableRawPointer
    public let type: ZMQSocketType
    private var closed = false

    public init(context: ZMQContext, type: ZMQSocketType) throws(ZMQError) {
        guard let handle = zmq_socket(context.handle, type.rawValue) else { throw ZMQError.last("zmq_socket") }
        self.handle = handle
        self.type = type
        // Never let close or context termination wait for unsent messages.
        try setOption(ZMQ_LINGER, int32: 0)
    }

    deinit { close() }

    public func close() {
        guard !closed else { return }
        closed = true
        zmq_close(handle)
    }

    // MARK: Options

    public func setOption(_ option: Int32, int32 value: Int32) throws(ZMQError) {
        var value = value
        guard zmq_setsockopt(handle, option, &value, MemoryLayout<Int32>.size) == 0 else {
            throw ZMQError.last("zmq_setsockopt(\(option))")
        }
    }

    public func setOption(_ option: Int32, int64 value: Int64) throws(ZMQError) {
        var value = value
        guard zmq_setsockopt(handle, option, &value, MemoryLayout<Int64>.size) == 0 else {
            throw ZMQError.last("zmq_setsockopt(\(option))")
        }
    }

    public func setOption(_ option: Int32, bytes: [UInt8]) throws(ZMQError) {
        let rc = bytes.withUnsafeBytes { zmq_setsockopt(handle, option, $0.baseAddress, $0.count) }
        guard rc == 0 else { throw ZMQError.last("zmq_setsockopt(\(option))") }
    }

    /// How long close may wait to flush unsent messages (0, the default here, drops them).
    public func setLinger(ms: Int32) throws(ZMQError) { try setOption(ZMQ_LINGER, int32: ms) }

    public func subscribe(_ prefix: String) throws(ZMQError) {
        try setOption(ZMQ_SUBSCRIBE, bytes: Array(prefix.utf8))
    }

    /// On a SUB: asks for `prefix`. On an XPUB in manual mode: applies `prefix` to the subscriber whose
    /// (un)subscription was received last.
    public func subscribe(bytes prefix: [UInt8]) throws(ZMQError) { try setOption(ZMQ_SUBSCRIBE, bytes: prefix) }
    public func unsubscribe(bytes prefix: [UInt8]) throws(ZMQError) { try setOption(ZMQ_UNSUBSCRIBE, bytes: prefix) }
    /// An XPUB hands every (un)subscription to its owner, and applies only those the owner applies.
    public func setManualSubscriptions() throws(ZMQError) { try setOption(ZMQ_XPUB_MANUAL, int32: 1) }

    /// Largest inbound message part accepted; a peer sending more is disconnected by libzmq.
    public func setMaxMessageSize(_ bytes: Int64) throws(ZMQError) { try setOption(ZMQ_MAXMSGSIZE, int64: bytes) }
    /// Makes an unroutable ROUTER send fail with EHOSTUNREACH instead of dropping silently.
    public func setRouterMandatory(_ on: Bool) throws(ZMQError) {
        try setOption(ZMQ_ROUTER_MANDATORY, int32: on ? 1 : 0)
    }
    public func setSendHighWaterMark(_ count: Int32) throws(ZMQError) { try setOption(ZMQ_SNDHWM, int32: count) }
    public func setReceiveHighWaterMark(_ count: Int32) throws(ZMQError) { try setOption(ZMQ_RCVHWM, int32: count) }
    /// Reconnect delay after a lost connection, and the ceiling it doubles up to.
    public func setReconnectInterval(ms: Int32, maxMs: Int32) throws(ZMQError) {
        try setOption(ZMQ_RECONNECT_IVL, int32: ms)
        try setOption(ZMQ_RECONNECT_IVL_MAX, int32: maxMs)
    }

    /// The endpoint actually bound or connected last, with the real port after binding to `:*`.
    public var lastEndpoint: String {
        var buffer = [CChar](repeating: 0, count: 1024)
        var size = buffer.count
        guard zmq_getsockopt(handle, ZMQ_LAST_ENDPOINT, &buffer, &size) == 0 else { return "" }
        return String(decoding: buffer.prefix(while: { $0 != 0 }).map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    // MARK: Endpoints

    public func bind(_ endpoint: String) throws(ZMQError) {
        guard zmq_bind(handle, endpoint) == 0 else { throw ZMQError.last("bind \(endpoint)") }
    }

    public func connect(_ endpoint: String) throws(ZMQError) {
        guard zmq_connect(handle, endpoint) == 0 else { throw ZMQError.last("connect \(endpoint)") }
    }

    // MARK: Messages

    /// Sends every frame of `message` as one multipart message.
    /// With `dontWait`, throws an error whose `wouldBlock` is true instead of waiting at the high-water mark.
    public func send(_ message: Multipart, dontWait: Bool = false) throws(ZMQError) {
        let last = message.count - 1
        for (index, frame) in message.enumerated() {
            var flags: Int32 = index < last ? ZMQ_SNDMORE : 0
            if dontWait { flags |= ZMQ_DONTWAIT }
            let rc = frame.withUnsafeBytes { zmq_send(handle, $0.baseAddress, $0.count, flags) }
            // libzmq is atomic for multipart: either the first part fails, or all parts queue.
            guard rc >= 0 else { throw ZMQError.last("zmq_send") }
        }
    }

    /// Sends `routingID` and then `message` as one multipart message (for a ROUTER), without copying frames.
    public func send(routingID: RoutingID, _ message: Multipart, dontWait: Bool = false) throws(ZMQError) {
        let flags: Int32 = ZMQ_SNDMORE | (dontWait ? ZMQ_DONTWAIT : 0)
        let rc = routingID.withUnsafeBytes { zmq_send(handle, $0.baseAddress, $0.count, flags) }
        guard rc >= 0 else { throw ZMQError.last("zmq_send") }
        try send(message, dontWait: dontWait)
    }

    /// Receives one whole multipart message, or nil when `dontWait` is set and nothing is queued.
    /// Uses zmq_msg_t so that no frame is ever truncated to a buffer size.
    public func receive(dontWait: Bool = false) throws(ZMQError) -> Multipart? {
        try receiveParts(dontWait: dontWait, limits: nil) { _ in }?.frames
    }

    /// The receive loop every receive shares; `inspect` sees each part before it is copied out (its
    /// metadata, say). Past `limits` no further part is copied: the rest of the message is read and
    /// dropped, and `overLimit` says so, so one giant message never becomes a giant array here.
    /// With `routed` (a ROUTER's messages), the first part is the routing id: it becomes `routingID`, not
    /// a frame, and is counted in neither the limits nor the sizes.
    @inline(__always)
    func receiveParts(
        dontWait: Bool, limits: ReceiveLimits?, routed: Bool = false, _ inspect: (inout zmq_msg_t) -> Void
    ) throws(ZMQError) -> (frames: Multipart, routingID: RoutingID?, count: Int, bytes: Int, overLimit: Bool)? {
        var frames: Multipart = []
        // Room for a routing id (unless `routed`) and the most frames a message of the protocol has (four),
        // at once: growing one by one reallocated it per message.
        frames.reserveCapacity(5)
        var count = 0
        var bytes = 0
        var overLimit = false
        var routingID: RoutingID?
        var message = zmq_msg_t()
        zmq_msg_init(&message)
        defer { zmq_msg_close(&message) }
        repeat {
            let rc = zmq_msg_recv(&message, handle, dontWait ? ZMQ_DONTWAIT : 0)
            if rc < 0 {
                // Nothing queued ends every drain: answered before an error (and its text) is made.
                if zmq_errno() == EAGAIN && count == 0 && routingID == nil { return nil }
                throw ZMQError.last("zmq_msg_recv")
            }
            let size = zmq_msg_size(&message)
            if routed && routingID == nil {
                routingID = RoutingID(UnsafeRawBufferPointer(start: zmq_msg_data(&message), count: size))
                continue
            }
            count += 1
            bytes += size
            if let limits, !overLimit, count > limits.frames || bytes > limits.bytes { overLimit = true }
            if overLimit {
                if count == 1, let data = zmq_msg_data(&message) {
                    frames.append(Array(UnsafeRawBufferPointer(start: data, count: min(size, ReceiveLimits.keptOfFirstFrame))))
                }
                continue
            }
            inspect(&message)
            if let data = zmq_msg_data(&message), size > 0 {
                frames.append(Array(UnsafeRawBufferPointer(start: data, count: size)))
            } else {
                frames.append([])
            }
        } while zmq_msg_more(&message) == 1
        return (frames, routingID, count, bytes, overLimit)
    }
}

extension ZMQSocket {
    /// Runs libzmq's built-in proxy between this socket and `other` until the context ends.
    public func proxy(to other: ZMQSocket) throws(ZMQError) {
        guard zmq_proxy(handle, other.handle, nil) == 0 else { throw ZMQError.last("zmq_proxy") }
    }
}
