extension CoordinatorState {
    /// One invocation on its way through the bus: a client's REQUEST, or an invocation of a round.
    struct Request: Sendable {
        /// Who gets the outcome.
        let origin: Waiter
        /// For a fan-out: the one agent that must run it.
        var target: PeerID?
        /// Set when identical invocations of the round share this execution: the outcome goes to all of them.
        var shared: SingleFlight.ExecutionID?
        /// The client approved it (for a skill that needs confirmation).
        var confirmed = false
        /// Which attempt this is (CoordinatorState+Retries): 1, then one more for each retry.
        var attempt = 1
        /// Retries the client asked for (a round's `retries`); nil: as the skill's policy says.
        var retries: Int?
        /// Where it stands in the wait queue (PROTOCOL §4.14).
        var priority = InvocationPriority.normal
        /// The client connection it came from (a round's invocations: the round's), for its share of the wait
        /// queue and its rate limit; nil for calls no client made.
        var client: PeerID?
        /// Set for a pure skill with a cache lifetime: its `ok` outcome is stored under this key (§4.16).
        var cacheKey: ByteKey?
        /// Agents an earlier attempt failed on: a retry goes elsewhere when another provider is free.
        var avoid: [String] = []
        /// When the current attempt was sent to its agent.
        var attemptStarted: UInt64 = 0
        /// When the current attempt gives up, if before `deadline` (the skill's `attemptTimeoutMs`); 0: none.
        var attemptDeadline: UInt64 = 0
        // Kept as they came off the wire: they go out again in INVOKE and REPLY unchanged.
        let requestID: [UInt8]
        let roundID: [UInt8]
        let sessionID: [UInt8]
        let skill: String
        let parameters: [UInt8]
        let accepted: UInt64
        let deadline: UInt64

        var requestText: String { String(decoding: requestID, as: UTF8.self) }
        var roundText: String { String(decoding: roundID, as: UTF8.self) }
        var timeoutMs: UInt64 { (deadline &- accepted) / 1_000_000 }
        /// When the current attempt ends by time: its own deadline, or the request's.
        var attemptEnds: UInt64 { attemptDeadline != 0 ? min(attemptDeadline, deadline) : deadline }

        func isStep(of round: ByteKey) -> Bool {
            if case .step(let key, _) = origin { return key == round }
            return false
        }
    }
}
