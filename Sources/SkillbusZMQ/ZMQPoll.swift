import CZeroMQ

/// One thing to wait on: a ZeroMQ socket or a plain file descriptor.
public struct PollItem {
    public enum Source {
        case socket(ZMQSocket)
        case fileDescriptor(Int32)
    }

    public var source: Source
    public var wantsInput: Bool
    public var wantsOutput: Bool

    public init(_ source: Source, input: Bool = true, output: Bool = false) {
        self.source = source
        self.wantsInput = input
        self.wantsOutput = output
    }
}

/// What `poll` found ready, by the index of the item.
public struct PollResult {
    public var readable: [Bool]
    public var writable: [Bool]
}

/// Waits until an item is ready or `timeoutMs` passes (-1 waits forever). zmq_poll counts milliseconds.
public func poll(_ items: [PollItem], timeoutMs: Int) throws(ZMQError) -> PollResult {
    var raw = items.map { item -> zmq_pollitem_t in
        var events: Int16 = 0
        if item.wantsInput { events |= Int16(ZMQ_POLLIN) }
        if item.wantsOutput { events |= Int16(ZMQ_POLLOUT) }
        switch item.source {
        case .socket(let socket):
            return zmq_pollitem_t(socket: socket.handle, fd: 0, events: events, revents: 0)
        case .fileDescriptor(let fd):
            return zmq_pollitem_t(socket: nil, fd: fd, events: events, revents: 0)
        }
    }
    let rc = zmq_poll(&raw, Int32(raw.count), timeoutMs)
    if rc < 0 {
        let error = ZMQError.last("zmq_poll")
        // A signal interrupted the wait: report nothing ready and let the caller loop.
        if error.errno == EINTR {
            return PollResult(
                readable: Array(repeating: false, count: items.count),
                writable: Array(repeating: false, count: items.count))
        }
        throw error
    }
    return PollResult(
        readable: raw.map { $0.revents & Int16(ZMQ_POLLIN) != 0 },
        writable: raw.map { $0.revents & Int16(ZMQ_POLLOUT) != 0 }
    )
}
