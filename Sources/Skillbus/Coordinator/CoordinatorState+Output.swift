/// Partial output (OUTPUT, PROTOCOL §3.9): a running invocation's parts go to everyone waiting for its
/// execution — the REQUEST's client, identical REQUESTs that joined it, the clients of a round whose
/// invocation it is — and on the feed. The bus keeps no output of its own, except what a round's document
/// holds, within `maxRoundOutputBytes`.
extension CoordinatorState {
    mutating func relayOutput(_ invocationID: String, _ batch: OutputBatch, from peer: PeerID) -> [CoordinatorAction] {
        let size = batch.byteCount
        guard
            let request = requests.noteOutput(invocationID, from: peer, bytes: size, limit: settings.maxOutputBytes)
        else { return [] }
        var waiters = [request.origin]
        if let shared = request.shared { waiters += singleFlight.joiners(of: shared) }
        var actions: [CoordinatorAction] = []
        for waiter in waiters {
            switch waiter {
            case .client(let client, let requestID):
                actions.append(.toClient(client, .output(requestID: requestID, invocation: "", batch)))
            case .step(let roundKey, let index):
                actions += stepOutput(roundKey, index, batch)
            case .claim, .offer:
                break  // a turn's own call, or one that joined it: its agent gets the outcome, not the output
            }
        }
        actions.append(
            .publish(
                .invocationOutput(
                    round: request.roundText, skill: request.skill, agent: workers[peer]?.name ?? "",
                    dispatch: invocationID, batch)))
        return actions
    }

    /// A round's invocation: the parts go into its document (while the round's budget lasts) and to the
    /// round's clients. One that reused an invocation of the same document shows that one's output instead.
    private mutating func stepOutput(_ roundKey: ByteKey, _ index: Int, _ batch: OutputBatch) -> [CoordinatorAction] {
        let limit = settings.maxRoundOutputBytes
        let target = rounds.update(roundKey) { run -> (String, [(client: PeerID, requestID: [UInt8])])? in
            guard run.invocations.indices.contains(index), !run.invocations[index].status.isDone,
                run.invocations[index].record.reusedFrom == nil
            else { return nil }
            var record = run.invocations[index].record
            // Kept only as a whole prefix: a batch after a gap (the invocation joined late, or the bus dropped
            // some) or over the budget ends what the document keeps.
            if !record.outputTruncated {
                if batch.first != record.output.count { record.outputTruncated = true }
                for part in batch.parts where !record.outputTruncated {
                    let bytes = part.serialized().count + 1
                    if run.outputBytes + bytes > limit {
                        record.outputTruncated = true
                    } else {
                        run.outputBytes += bytes
                        record.output.append(part)
                    }
                }
            }
            run.invocations[index].record = record
            return (record.id, run.clients)
        }
        guard let (invocation, clients) = target ?? nil else { return [] }
        return clients.map { .toClient($0.client, .output(requestID: $0.requestID, invocation: invocation, batch)) }
    }
}
