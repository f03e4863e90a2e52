/// The documents that refuse a round: nothing of it runs, or its clients get the journal's word instead of its own.
extension CoordinatorState {
    /// The document that refuses a round, to each of its clients.
    func refuseRound(
        _ roundID: [UInt8], shape: String?, _ error: SkillbusError, to clients: [(client: PeerID, requestID: [UInt8])]
    ) -> [CoordinatorAction] {
        let document = RoundDocument.refusal(
            round: String(decoding: roundID, as: UTF8.self), shape: shape, error
        ).serialized()
        return clients.map {
            .toClient($0.client, .round(requestID: $0.requestID, roundID: roundID, document: document))
        }
    }

    func refuseConflict(
        _ request: RoundRequest, _ spec: RoundSpec, to clients: [(client: PeerID, requestID: [UInt8])]
    ) -> [CoordinatorAction] {
        refuseRound(request.$roundID, shape: spec.shape, Self.conflictError(request.roundID), to: clients)
    }

    static func conflictError(_ round: String) -> SkillbusError {
        SkillbusError(.roundConflict, "round '\(round)' was already sent with a different body; use a new round id")
    }

    static func interruptedError(_ round: String) -> SkillbusError {
        SkillbusError(
            .interrupted,
            "round '\(round)' was running when the coordinator stopped, and not every skill of it "
                + "is idempotent, so it is not run again; send it with a new round id to run it",
            details: ["round": .string(round)])
    }
}
