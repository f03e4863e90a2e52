/// Invocations of skills that need confirmation: held before routing until the client that asked (or, for
/// a turn's call, the client that asked for the turn) approves them, refuses them, or lets 60 s pass.
extension CoordinatorState {
    /// How long an invocation waits for its approval.
    static let confirmationNanos: UInt64 = 60_000_000_000

    /// Whether `request` must wait for an approval before it may be routed.
    func needsConfirmation(_ request: Request) -> Bool {
        !request.confirmed && ledger.registry.skills[request.skill]?.descriptor.needsConfirmation == true
    }

    /// The client to ask, and the request id it knows: the ASK of the turn whose call this is, the ROUND
    /// whose invocation it is, or the REQUEST itself.
    func asker(of request: Request) -> (client: PeerID, requestID: String)? {
        switch request.origin {
        case .client(let client, let requestID):
            if let (_, turn) = turns.turn(inRound: request.roundID) { return (turn.client, turn.requestID) }
            return (client, String(decoding: requestID, as: UTF8.self))
        case .step(let round, _):
            return rounds[round]?.clients.first.map { ($0.client, String(decoding: $0.requestID, as: UTF8.self)) }
        case .claim, .offer:
            return nil  // a turn never claims or offers a skill that needs confirmation
        }
    }

    /// Holds `request` and asks for approval; it is published as pending with its skill and parameters.
    mutating func holdForConfirmation(_ request: Request, now: UInt64) -> [CoordinatorAction] {
        guard let (client, requestID) = asker(of: request) else {
            return fail(
                request, SkillbusError(.confirmationRequired, "nobody can approve '\(request.skill)' here"),
                agent: "", executed: false, now: now)
        }
        // Only the client asked may approve it (RequestTable.approve).
        let id = requests.confirm(
            request, asking: client, deadline: min(request.deadline, now &+ Self.confirmationNanos))
        return [
            .toClient(
                client,
                .confirm(requestID: requestID, confirmationID: id, skill: request.skill, parameters: request.parameters)),
            .publish(
                .confirmationPending(
                    round: request.roundText, confirmation: id, skill: request.skill,
                    parameters: (try? JSONValue(parsing: request.parameters)) ?? .null)),
        ]
    }

    /// APPROVE from the client that was asked: the invocation is routed, or refused.
    public mutating func handleApprove(
        _ confirmationID: String, approved: Bool, from client: PeerID, now: UInt64
    ) -> [CoordinatorAction] {
        guard var request = requests.approve(confirmationID, by: client) else { return [] }
        let done = FeedEvent.confirmationDone(confirmation: confirmationID, approved: approved)
        guard approved else {
            let error = SkillbusError(
                .confirmationRequired, "'\(request.skill)' needs confirmation, and the client did not approve it")
            return [.publish(done)] + fail(request, error, agent: "", executed: false, now: now)
        }
        request.confirmed = true
        return [.publish(done)] + route(request, now: now)
    }

    /// Approvals that did not come in time.
    mutating func expireConfirmations(now: UInt64) -> [CoordinatorAction] {
        var actions: [CoordinatorAction] = []
        for (id, request) in requests.removeExpiredConfirmations(now: now) {
            let error = SkillbusError(
                .confirmationRequired, "'\(request.skill)' needs confirmation, and no answer came in time")
            actions.append(.publish(.confirmationDone(confirmation: id, approved: false)))
            actions += fail(request, error, agent: "", executed: false, now: now)
        }
        return actions
    }
}
