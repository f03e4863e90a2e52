import Dispatch
import SkillbusZMQ

/// What the coordinator's thread sends: refusals, the actions of the state machine (answers, feed events, journal
/// entries), and sends to one peer that count a peer gone.
extension CoordinatorLoop {
    /// Answers a message the bus cannot accept, in the sender's own dialect where it can tell.
    func refuse(_ peer: PeerID, _ body: Multipart, _ error: SkillbusError) {
        rejected += 1
        operatorEndpoint?.refused(error)
        // A flood of garbage must not become a flood of log lines: the first few per tick, then a count.
        if refusalsLogged < Self.refusalsLoggedPerTick {
            refusalsLogged += 1
            logger.warning("refused a message from peer \(hex(peer)): \(error)")
        } else {
            refusalsSuppressed += 1
        }
        if let refusal = Wire.v1Refusal(body, error) { return send(to: peer, refusal) }
        let header = body.first ?? []
        // Another version of the worker protocol (SKB3W, say) is answered as a worker would expect.
        let speaksWorker = header.count >= 5 && header.starts(with: Array("SKB".utf8)) && header[4] == UInt8(ascii: "W")
        if speaksWorker {
            send(to: peer, BusToWorkerMessage.error(error).encoded())
        } else {
            send(to: peer, BusToClientMessage.error(requestID: Wire.requestID(of: body), error).encoded())
        }
    }

    /// Hands the journal what this pass gave it (the loop's thread never waits for the disk: `submit` only
    /// appends under a short lock and wakes the journal's thread).
    func submitJournalEntries() {
        guard !journalEntries.isEmpty else { return }
        journal?.submit(journalEntries)
        journalEntries.removeAll(keepingCapacity: true)
    }

    func perform(_ actions: [CoordinatorAction]) {
        if answerAfterCommit { holdAnswers(of: actions) }
        for action in actions {
            switch action {
            case .journal(let entry): journalEntries.append(entry)
            case .toClient(let peer, let message):
                if !heldAnswersByRound.isEmpty, case .round(_, let roundID, _) = message,
                    heldAnswersByRound[ByteKey(roundID)] != nil
                {
                    heldAnswersByRound[ByteKey(roundID)]!.append((peer, message.encoded()))
                    continue
                }
                send(to: peer, message.encoded())
            case .toWorker(let peer, let message):
                send(to: peer, message.encoded())
                // A turn waits for its VERDICT, and the turns that join its call wait for that call: out now, not
                // after the rest of the pass (an asks round's three bursts, say).
                if case .verdict = message { router.flush() }
            case .publish(let event):
                logEvent(event)
                operatorEndpoint?.record(event)
                guard !subscriptions.isEmpty else { continue }
                let topic = Array(event.topic.utf8)
                let batches = subscriptions.batches(taking: topic)
                let single = subscriptions.wants(topic)
                guard single || !batches.isEmpty else { continue }
                let frames = event.encoded(timestamp: feedClock.now())
                if single { try? feed.send(frames, dontWait: true) }
                for batch in batches { addToFeedBatch(batch, frames[1]) }
            }
        }
    }

    /// Adds an event's body to the batch named `batch` (PROTOCOL §7: one line each); a batch goes out at the end
    /// of the pass (`sendFeedBatches`), or at once when it has grown past `feedBatchBytes`.
    private func addToFeedBatch(_ batch: [UInt8], _ body: [UInt8]) {
        let index = feedBatches.firstIndex { $0.topic == batch } ?? {
            feedBatches.append((batch, []))
            return feedBatches.count - 1
        }()
        feedBatches[index].body += body
        feedBatches[index].body.append(UInt8(ascii: "\n"))
        if feedBatches[index].body.count >= Self.feedBatchBytes {
            try? feed.send([batch, feedBatches[index].body], dontWait: true)
            feedBatches[index].body.removeAll(keepingCapacity: true)
        }
    }

    /// Sends every batch the pass filled: one message per batch subscription, its events in the order they
    /// were published. The next pass starts anew (a subscription gone since leaves nothing behind).
    func sendFeedBatches() {
        for (topic, body) in feedBatches where !body.isEmpty { try? feed.send([topic, body], dontWait: true) }
        feedBatches.removeAll(keepingCapacity: true)
    }

    func logEvent(_ event: FeedEvent) {
        switch event {
        case .agentJoined(let agent, let skills, let capacity):
            logger.info("agent '\(agent)' joined with \(skills.count) skill(s), capacity \(capacity)")
        case .agentLeft(let agent, let reason):
            logger.info("agent '\(agent)' left: \(reason)")
        case .registrationRefused(let agent, let error):
            logger.warning("registration of '\(agent)' refused: \(error)")
        default:
            break
        }
    }

    func send(to peer: PeerID, _ frames: Multipart) {
        if heldSends != nil {
            heldSends!.append((peer, frames))
        } else {
            sendNow(to: peer, frames)
        }
    }

    func sendNow(to peer: PeerID, _ frames: Multipart) {
        do {
            try router.send(routingID: peer, frames)
        } catch {
            // The peer vanished (or is hopelessly behind): count it and keep serving everyone else.
            unroutable += 1
            logger.debug("could not deliver to peer \(hex(peer)): \(error)")
        }
    }

    func hex(_ peer: PeerID) -> String {
        peer.bytes.prefix(8).map { String(format: "%02x", $0) }.joined()
    }
}
