import Foundation

/// Asking agents through the bus: a question about an agent's context (QUERY) and a turn (ASK). The
/// client's requests, rounds and listings are in SkillbusClient.swift.
extension SkillbusClient {
    /// Asks one agent about its context (its sessions, a session's history, its memory) through the bus;
    /// `agent` empty asks the agent the query's session went to last. Returns the agent that answered and
    /// its answer; throws the error the agent (or the bus) answered with.
    public func query(
        _ query: AgentQuery, agent: String = "", timeout: Duration = .seconds(5)
    ) async throws(SkillbusError) -> (agent: String, answer: JSONValue) {
        let requestID = makeRequestID()
        let request = QueryRequest(
            requestID: requestID, agent: agent, timeoutMs: max(1, Int(timeout / .milliseconds(1))), query: query)
        // The bus answers `timeout` itself at the deadline; the extra second is for that answer to arrive.
        switch try await exchange(.query(request), requestID: requestID, waitFor: timeout + .seconds(1)) {
        case .answer(_, let agent, .ok(let body)): return (agent, body)
        case .answer(_, _, .error(let error)), .error(_, let error): throw error
        default: throw unreachable(after: timeout + .seconds(1))
        }
    }

    /// Asks an agent to take a turn: it answers `message`, calling skills as its planner decides, in round
    /// `roundID`. `agent` empty: the session's agent, else the least loaded agent with a planner. Returns
    /// the agent and its turn document; throws the error the turn (or the bus) ended with.
    /// `onPiece` hears the reply's pieces as they stream in, `onProgress` each state of the turn and each
    /// call as it ends (both on the client's socket thread: keep them quick).
    /// `requestID` is the id of the ASK (a `Confirmation` of the turn's calls names it); nil: a new one.
    /// A caller that is cancelled cancels the turn on its agent, and returns once the turn has ended
    /// (as `cancelled`), 5 s after the cancellation at the latest.
    public func ask(
        _ message: String, agent: String = "", sessionID: String = "", roundID: String = UUID().uuidString.lowercased(),
        timeout: Duration = .seconds(30), onPiece: (@Sendable (String) -> Void)? = nil,
        onProgress: (@Sendable (_ agent: String, TurnProgress) -> Void)? = nil, parentTurnID: String = "",
        requestID: String? = nil
    ) async throws(SkillbusError) -> (agent: String, document: JSONValue) {
        let requestID = requestID ?? makeRequestID()
        let request = AskRequest(
            requestID: requestID, roundID: roundID, sessionID: sessionID, agent: agent,
            timeoutMs: max(1, Int(timeout / .milliseconds(1))), message: message, progress: onProgress != nil,
            parentTurnID: parentTurnID)
        if let onPiece { partials.replyPieces.withLock { $0[requestID] = onPiece } }
        if let onProgress { partials.progress.withLock { $0[requestID] = onProgress } }
        defer {
            partials.replyPieces.withLock { _ = $0.removeValue(forKey: requestID) }
            partials.progress.withLock { _ = $0.removeValue(forKey: requestID) }
        }
        // A caller that gives up cancels the turn on its agent, and then waits (5 s at most) for the turn's
        // end, which says the agent has stopped: so the CANCEL is known to have arrived before it returns.
        let links = self.links
        let wait = Task { () async -> Result<BusToClientMessage?, SkillbusError> in
            do throws(SkillbusError) {
                return .success(try await exchange(.ask(request), requestID: requestID, waitFor: timeout + .seconds(1)))
            } catch {
                return .failure(error)
            }
        }
        let outcome = await withTaskCancellationHandler {
            await wait.value
        } onCancel: {
            links.send(ClientMessage.cancel(requestID: requestID).encoded())
            Task {
                try? await Task.sleep(for: .seconds(5))
                wait.cancel()
            }
        }
        switch try outcome.get() {
        case .turn(_, let agent, .ok(let document)): return (agent, document)
        case .turn(_, _, .error(let error)), .error(_, let error): throw error
        default: throw unreachable(after: timeout + .seconds(1))
        }
    }
}
