import Dispatch
import SkillbusZMQ

/// The coordinator's thread on the way in: reading the bus in bounded passes, splitting batches, checking each
/// message's limits and dialect, and handing it to the state machine.
extension CoordinatorLoop {
    func drainBus() {
        // Frames past these are read and dropped, not kept (the routing id is apart, and not counted).
        // A batch may take up to maxBatchBytes whatever the limit: §9 holds for each message in it (§2.2).
        let limits = ReceiveLimits(frames: Wire.maxFrames, bytes: max(maxMessageBytes, Wire.maxBatchBytes))
        // Only under load, and only for libzmq's ROUTER (the own one writes at the flush anyway): a lone
        // message's answer goes out before the read that finds nothing more.
        if lastBatch > 1 && !router.writesOnFlush { heldSends = [] }
        var received = 0
        defer {
            lastBatch = received
            sendHeld()
            heldSends = nil
            let closed = router.takeClosedDescriptors()
            if !closed.isEmpty {
                let now = DispatchTime.now().uptimeNanoseconds
                watch.closed(closed, now: now)
                confirmLostConnections(now: now)
            }
        }
        // Bounded batch so that ticks still run under a flood.
        while received < 10_000 {
            // With keys, each message says whose it is: the user id the policy gave its connection.
            guard let message = router.receiveMessage(limits: limits, readUserID: busGuard != nil) else { return }
            received += 1
            handle(message)
            if received % 32 == 0 { sendHeld() }
        }
    }

    /// Sends what a batch held back. libzmq's I/O thread then finds several messages per peer at once, and
    /// writes them in fewer system calls than when each was handed over as it was made.
    private func sendHeld() {
        guard let held = heldSends, !held.isEmpty else { return }
        heldSends = []
        heldSends?.reserveCapacity(held.count)
        for (peer, frames) in held { sendNow(to: peer, frames) }
    }

    /// A peer that sends its messages folded into one frame gets its own folded too (PROTOCOL §2.1).
    private func answerFolded(_ peer: PeerID, _ body: Multipart, _ layout: Wire.Layout) {
        if body.count == 1, !router.foldsFrames(for: peer), Wire.isFolded(body, layout) { router.foldFrames(for: peer) }
    }

    /// A batch (PROTOCOL §2.2): each of its messages handled as if it had come alone, and from now on what goes
    /// to its sender goes batched. A malformed batch is refused whole (with no request id: it has none) and
    /// nothing of it is handled.
    private func handleBatch(_ batch: ReceivedMessage, from peer: PeerID) {
        let messages: Multipart
        do throws(SkillbusError) {
            messages = try Wire.unbatched(batch.frames) ?? []
        } catch {
            return refuse(peer, [Array(batch.frames[0].prefix(5))], error)
        }
        router.batchFrames(for: peer)
        for frame in messages {
            var message = batch
            message.frames = [frame]
            message.frameCount = 1
            message.byteCount = frame.count
            handle(message)
        }
    }

    private func handle(_ message: ReceivedMessage) {
        let (body, userID, sourceFD) = (message.frames, message.userID, message.sourceFD)
        guard let peer = message.routingID else { return }
        // A batch first: each of its messages goes through all that follows as if it had come alone (a standby
        // refuses each with its own request id). One over both bounds is refused below as too large.
        if body.count == 1, Wire.isBatch(body[0]), message.byteCount <= max(maxMessageBytes, Wire.maxBatchBytes) {
            return handleBatch(message, from: peer)
        }
        let now = DispatchTime.now().uptimeNanoseconds
        // A standby serves nobody; a leader serves only while its lease holds by its own clock.
        if let election, journal == nil || !election.serving(now) { return refuseAsStandby(peer, body) }
        guard let header = body.first else {
            return refuse(peer, body, SkillbusError(.malformedMessage, "empty message (no protocol header frame)"))
        }
        // The sizes count every frame, kept or not (the receive stopped keeping them past its limits).
        let frames = message.frameCount
        if frames > Wire.maxFrames {
            return refuseOverLimit(
                peer, body, limit: "maxFrames",
                "message of \(frames) frames exceeds the limit of \(Wire.maxFrames) frames (maxFrames)")
        }
        let size = message.byteCount
        if size > maxMessageBytes {
            return refuseOverLimit(
                peer, body, limit: "maxMessageBytes",
                "message of \(size) bytes exceeds the limit of \(maxMessageBytes) bytes (maxMessageBytes)")
        }
        do throws(SkillbusError) {
            if header.starts(with: Wire.clientHeaderBytes) {
                let message = try ClientMessage.decode(body)
                answerFolded(peer, body, ClientMessage.layout)
                if let refusal = busGuard?.policy.refusal(of: message, from: userID) { throw refusal }
                switch message {
                case .invoke(let request):
                    perform(state.handleInvoke(request, from: peer, now: now))
                case .listSkills(let requestID):
                    send(to: peer, BusToClientMessage.skills(requestID: requestID, catalog: state.catalog()).encoded())
                case .snapshot(let requestID):
                    perform(state.snapshot(requestID: requestID, for: peer))
                case .round(let request):
                    perform(state.handleRound(request, from: peer, now: now))
                case .query(let request):
                    perform(state.handleQuery(request, from: peer, now: now))
                case .ask(let request):
                    perform(state.handleAsk(request, from: peer, now: now))
                case .cancel(let requestID):
                    perform(state.handleCancel(requestID: requestID, from: peer, now: now))
                case .cancelRound(let requestID, let roundID):
                    perform(state.handleCancelRound(requestID: requestID, roundID: roundID, from: peer, now: now))
                case .approve(let confirmationID, let approved):
                    perform(state.handleApprove(confirmationID, approved: approved, from: peer, now: now))
                case .listAgents(let requestID):
                    let listing = state.agentsListing(now: now)
                    send(to: peer, BusToClientMessage.agents(requestID: requestID, listing: listing).encoded())
                }
            } else if header.starts(with: Wire.workerHeaderBytes) {
                watch.tracker.heard(worker: peer, on: sourceFD)
                let message = try WorkerMessage.decode(body)
                answerFolded(peer, body, WorkerMessage.layout)
                if let refusal = busGuard?.policy.refusal(of: message, from: userID) {
                    return refuseWorker(peer, body, message, refusal)
                }
                perform(state.handleWorker(message, from: peer, now: now))
            } else {
                let shown = String(decoding: header.prefix(5), as: UTF8.self)
                throw SkillbusError(
                    .unsupportedProtocol,
                    "protocol '\(shown)' is not supported; this bus speaks \(Wire.clientHeader) (clients) and "
                        + "\(Wire.workerHeader) (workers), wire version 2")
            }
        } catch {
            refuse(peer, body, error)
        }
    }
}
