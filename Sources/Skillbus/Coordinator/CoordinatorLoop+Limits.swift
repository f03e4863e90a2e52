import Dispatch
import SkillbusZMQ

/// The coordinator's thread at the edges: closed worker connections, feed subscriptions, and what is
/// refused for a limit (§9).
extension CoordinatorLoop {
    static let overLimitPublishedPerTick = 10

    /// Reads the bus ROUTER's monitor, then asks about the workers whose connection closed.
    func drainConnectionEvents(now: UInt64) {
        for event in watch.drain(now: now) { busGuard?.handshakeFailed(event, socket: "bus") }
        confirmLostConnections(now: now)
    }

    /// A suspect the ROUTER cannot reach any more (ROUTER_MANDATORY says EHOSTUNREACH for a closed pipe)
    /// is lost now, not after its missed heartbeats; the probe is a bus HEARTBEAT, harmless to a live one.
    func confirmLostConnections(now: UInt64) {
        guard watch.tracker.hasSuspects else { return }
        let probe = BusToWorkerMessage.heartbeat(intervalMs: state.settings.heartbeatMs).encoded()
        let lost = watch.tracker.confirm(now: now) { peer in
            do throws(ZMQError) {
                try router.send(routingID: peer, probe)
                return true
            } catch {
                return !error.hostUnreachable
            }
        }
        for peer in lost { perform(state.connectionClosed(peer, now: now)) }
    }

    /// Applies the subscriptions that are within `Wire.maxSubscriptionBytes` (the XPUB is in manual
    /// mode: nothing takes effect unless set here), refuses longer ones.
    func drainSubscriptions() {
        while let message = try? feed.receive(dontWait: true) {
            guard let frame = message.first else { continue }
            switch subscriptions.receive(frame) {
            case .subscribe(let prefixes):
                // Applies to the subscriber whose message was read last.
                for prefix in prefixes { try? feed.subscribe(bytes: prefix) }
            case .unsubscribe(let prefixes):
                for prefix in prefixes { try? feed.unsubscribe(bytes: prefix) }
            case .refused(let bytes):
                countOverLimit(
                    socket: "feed", limit: "maxSubscriptionBytes",
                    "feed subscription of \(bytes) bytes is longer than \(Wire.maxSubscriptionBytes) bytes; not applied")
            case .ignored:
                break
            }
        }
        // The operator endpoint counts request events and lists rounds, so both are built for it too.
        state.publishesRequestEvents = operatorEndpoint != nil || subscriptions.wantsRequestEvents
        state.publishesRoundEvents = operatorEndpoint != nil || subscriptions.wantsRoundEvents
        state.publishesTurnEvents = operatorEndpoint != nil || subscriptions.wantsTurnEvents
    }

    /// Answers a message over a limit (`message_too_large`, in the sender's dialect) and counts it.
    func refuseOverLimit(_ peer: PeerID, _ body: Multipart, limit: String, _ reason: String) {
        refuse(peer, body, SkillbusError(.messageTooLarge, reason))
        countOverLimit(socket: "bus", limit: limit, reason)
    }

    /// Counts a refusal for a limit and publishes it as `limits.refused`, at most a few per tick.
    func countOverLimit(socket: String, limit: String, _ reason: String) {
        overLimit += 1
        guard overLimitPublished < Self.overLimitPublishedPerTick else { return }
        overLimitPublished += 1
        if socket == "feed" { logger.warning("refused a feed subscription: \(reason)") }
        perform([.publish(.limitRefused(socket: socket, limit: limit, reason: reason, refused: overLimit))])
    }
}
