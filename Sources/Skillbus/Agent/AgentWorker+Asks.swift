import SkillbusZMQ

/// A turn that asks another agent (PROTOCOL §3.7.1) sends its ASK on the worker's own connection: the bus takes
/// client messages from any peer and answers on the connection they came on (§1). The ASK, its answer and a
/// CANCEL then pass no other socket and no other thread of this process; on the agent's client connection each
/// delegation cost two hand-overs between threads.
extension AgentWorker {
    /// The nested turn's agent and document; throws the error it (or the bus) ended with. Cancelled (the asking
    /// turn was), it cancels the ASK on the bus and throws `cancelled` at once: the bus stops the nested turn.
    func askOnWorkerConnection(_ request: AskRequest) async throws(SkillbusError) -> (
        agent: String, document: JSONValue
    ) {
        let (socket, id) = (self.socket, request.requestID)
        // Bounded without a timer of its own: the bus answers by the ASK's timeout, and the asking turn is
        // cancelled at its deadline, which the ASK's timeout never passes; cancelled, the wait ends at once.
        let answer = await asks.exchange(
            id, until: .now + .milliseconds(request.timeoutMs ?? Wire.maxTimeoutMs),
            send: { self.sendAfterTurnReports(ClientMessage.ask(request).encoded()) },
            cancel: { socket.send(ClientMessage.cancel(requestID: id).encoded()) }, grace: nil)
        switch answer {
        case .message(.turn(_, let agent, .ok(let document))): return (agent, document)
        case .message(.turn(_, _, .error(let error))), .message(.error(_, let error)): throw error
        case .cancelled: throw SkillbusError(.cancelled, "the turn that asked was cancelled")
        case .message, .timedOut:
            throw SkillbusError(.timeout, "the coordinator did not answer the ASK to '\(request.agent)'")
        }
    }

    /// A client message on the worker connection: the answer to one of this agent's ASKs. A nested turn's call
    /// that needs confirmation is refused, as the agent's client refuses it: nobody here can approve it.
    func answeredAsk(_ message: Multipart) {
        let decoded: BusToClientMessage
        do {
            decoded = try BusToClientMessage.decode(message)
        } catch {
            return logger.warning("ignored a bad answer from the coordinator: \(error)")
        }
        switch decoded {
        case .turn(let id, _, _), .error(let id, _): asks.finish(id, with: .message(decoded))
        case .confirm(_, let confirmationID, _, _):
            socket.send(ClientMessage.approve(confirmationID: confirmationID, approved: false).encoded())
        default: break  // an ASK of this agent's asks for no progress and no stream
        }
    }
}
