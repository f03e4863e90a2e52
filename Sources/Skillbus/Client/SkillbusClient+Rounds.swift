import Foundation
import SkillbusZMQ

/// Rounds: sent, and sent again until answered, so that a restart of the coordinator costs a resend and never
/// a second execution (PROTOCOL §3.5.9).
extension SkillbusClient {
    /// How often a ROUND not yet answered is sent again.
    public static let resendInterval: Duration = .seconds(1)

    /// Runs a whole round (one invocation, a fan-out or a plan) and returns its document. A round that
    /// failed comes back as a document with `status: error`; this throws only when no answer came.
    /// `retries`, when given, is how many times the bus may retry each invocation instead of what its skill
    /// declares (0: never), within the skill's rules of what is retryable (PROTOCOL §4.13).
    /// `priority` places its invocations in the bus's wait queue (PROTOCOL §4.14); `noCache` runs them even
    /// when the bus's result cache holds their answer (§4.16).
    /// `onOutput` hears the partial output of the round's invocations as it arrives (the invocation's id in
    /// the document, and the batch), all of it before the document (on the client's socket thread).
    /// `requestID` is the id this client's messages of the round carry (a `Confirmation` names it); nil: a new one.
    /// A nil `timeout` sends none: the bus applies the skill's own `defaultTimeoutMs`, or its default (§3.5.6),
    /// and the client waits for its answer as long as the bus may take (`Wire.maxTimeoutMs`).
    public func round(
        _ spec: RoundSpec, roundID: String = UUID().uuidString.lowercased(), sessionID: String = "",
        timeout: Duration? = .seconds(15), retries: Int? = nil, priority: InvocationPriority = .normal, noCache: Bool = false,
        requestID: String? = nil, onOutput: (@Sendable (String, OutputBatch) -> Void)? = nil
    ) async throws(SkillbusError) -> RoundDocument {
        let requestID = requestID ?? makeRequestID()
        if let onOutput { partials.outputs.withLock { $0[requestID] = onOutput } }
        defer { if onOutput != nil { partials.outputs.withLock { _ = $0.removeValue(forKey: requestID) } } }
        let body = spec.body(retries: retries, priority: priority, noCache: noCache).serialized()
        let wait = timeout ?? .milliseconds(Wire.maxTimeoutMs)
        let deadline = ContinuousClock.now + wait
        // Sent again (same round id) until answered: a round the bus already has is joined or answered from its
        // journal, so a restart of the coordinator costs a resend, never a second execution. Each copy carries
        // the time the caller has left, so the bus never works past the caller's deadline.
        // Without a timeout of the caller's, every copy goes without one: the bus's deadline stands.
        let request = { @Sendable (left: Duration) in
            RoundRequest(
                requestID: requestID, roundID: roundID, sessionID: sessionID,
                timeoutMs: timeout == nil ? nil : max(1, Int(left / .milliseconds(1))), body: body)
        }
        let copy = { @Sendable (now: ContinuousClock.Instant) -> Multipart? in
            guard now < deadline else { return nil }
            return ClientMessage.round(request(deadline - now)).encoded()
        }
        let resend = PendingReplies.Resend(
            interval: Self.resendInterval, next: .now + Self.resendInterval, message: copy)
        let answer = try await exchange(
            .round(request(wait)), requestID: requestID, waitFor: wait + .seconds(1), cancelsOnBus: true,
            resend: resend, again: PendingReplies.Again(afterMove: true, message: copy))
        switch answer {
        case .round(_, _, let document):
            return try RoundDocument(parsing: document)
        case .error(_, let error): throw error
        default: throw unreachable(after: wait + .seconds(1))
        }
    }
}
