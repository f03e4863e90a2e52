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

/// What `poll` found ready, by the index of the item: one array of the events each item reported, read
/// through `readable` and `writable` (a poll allocates that array and nothing else).
public struct PollResult {
    let events: [Int16]

    public var readable: Flags { Flags(events: events, mask: Int16(ZMQ_POLLIN)) }
    public var writable: Flags { Flags(events: events, mask: Int16(ZMQ_POLLOUT)) }
    /// An error or a hang-up on a file descriptor (never for a ZeroMQ socket).
    public var failed: Flags { Flags(events: events, mask: Int16(ZMQ_POLLERR)) }

    /// One Bool per item: whether it reported the event.
    public struct Flags: RandomAccessCollection {
        let events: [Int16]
        let mask: Int16
        public var startIndex: Int { 0 }
        public var endIndex: Int { events.count }
        public subscript(index: Int) -> Bool { events[index] & mask != 0 }
    }
}

/// Waits until an item is ready or `timeoutMs` passes (-1 waits forever). zmq_poll counts milliseconds.
public func poll(_ items: [PollItem], timeoutMs: Int) throws(ZMQError) -> PollResult {
    var events = [Int16](repeating: 0, count: items.count)
    // libzmq's item array lives on the stack for the call.
    let rc = withUnsafeTemporaryAllocation(of: zmq_pollitem_t.self, capacity: items.count) { raw -> Int32 in
        for (index, item) in items.enumerated() {
            var wanted: Int16 = 0
            if item.wantsInput { wanted |= Int16(ZMQ_POLLIN) }
            if item.wantsOutput { wanted |= Int16(ZMQ_POLLOUT) }
            raw[index] =
                switch item.source {
                case .socket(let socket): zmq_pollitem_t(socket: socket.handle, fd: 0, events: wanted, revents: 0)
                case .fileDescriptor(let fd): zmq_pollitem_t(socket: nil, fd: fd, events: wanted, revents: 0)
                }
        }
        let rc = zmq_poll(raw.baseAddress, Int32(items.count), timeoutMs)
        if rc > 0 { for index in 0..<items.count { events[index] = raw[index].revents } }
        return rc
    }
    if rc < 0 {
        let error = ZMQError.last("zmq_poll")
        // A signal interrupted the wait: report nothing ready and let the caller loop.
        if error.errno == EINTR { return PollResult(events: events) }
        throw error
    }
    return PollResult(events: events)
}
