#if canImport(Glibc)
    import Glibc
#endif

/// The router's way out: what each peer takes (folded, batched), queueing a message for it, and the flush that
/// writes what a pass queued, one write per peer.
extension ZMTPRouter {
    /// From now on, messages to the peer with `routingID` go folded into one frame (while its connection lasts).
    public func foldFrames(for routingID: RoutingID) {
        guard let fd = peers[routingID] else { return }
        connections[fd]?.foldsFrames = true
    }

    /// Whether messages to the peer with `routingID` are folded.
    public func foldsFrames(for routingID: RoutingID) -> Bool {
        guard let fd = peers[routingID] else { return false }
        return connections[fd]?.foldsFrames ?? false
    }

    /// From now on, messages to the peer with `routingID` wait for the flush and go out batched, folded (while
    /// its connection lasts).
    public func batchFrames(for routingID: RoutingID) {
        guard frameBatching != nil, let fd = peers[routingID], let connection = connections[fd] else { return }
        connection.foldsFrames = true
        connection.batchesFrames = true
    }

    /// Queues a message for the peer with `routingID`; it goes out at the next `flush`.
    public func send(routingID: RoutingID, _ frames: Multipart) throws(ZMQError) {
        guard let fd = peers[routingID], let connection = connections[fd] else {
            throw ZMQError(operation: "send", errno: EHOSTUNREACH)
        }
        guard connection.unsentBytes < ZMTP.maxUnsentBytes else { throw ZMQError(operation: "send", errno: EAGAIN) }
        do throws(ZMTP.Violation) {
            if connection.batchesFrames, let batching = frameBatching {
                connection.holdForBatch(frames, batching)
            } else if connection.foldsFrames, frames.count > 1, let batching = frameBatching {
                try connection.queueMessage([batching.fold(frames)])
            } else {
                try connection.queueMessage(frames)
            }
        } catch {
            drop(connection)
            throw ZMQError(operation: "send", errno: EHOSTUNREACH)
        }
        markUnflushed(connection)
    }

    /// Writes what was queued, one write per peer; what a peer cannot take yet waits for it to drain.
    public func flush() {
        let pending = unflushed
        unflushed.removeAll(keepingCapacity: true)
        for connection in pending {
            connection.queued = false
            if connection.batchesFrames, let batching = frameBatching {
                do throws(ZMTP.Violation) {
                    try connection.queueBatch(batching)
                } catch {
                    drop(connection)
                    continue
                }
            }
            write(connection)
        }
    }

    func write(_ connection: ZMTPConnection) {
        // The same object: a closed connection's descriptor may already belong to a new one.
        guard connections[connection.fd] === connection, !connection.waitingToWrite else { return }
        switch connection.writeOutput() {
        case .progress: if connection.closing { drop(connection) }
        case .wouldBlock:
            connection.waitingToWrite = true
            watch(connection.fd, output: true)
        case .closed: drop(connection)
        }
    }

    func markUnflushed(_ connection: ZMTPConnection) {
        guard !connection.queued else { return }
        connection.queued = true
        unflushed.append(connection)
    }
}
