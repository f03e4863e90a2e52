/// A worker may leave out the STATEs and STEPs of a turn it had not sent when the turn ended (PROTOCOL §3.7):
/// the turn document in its TURNEND holds every state and call of the turn, in order. The bus handles the ones it
/// did not get as if they had come just before the TURNEND, so a watcher and a following client still see each
/// one; while nobody would see them, it does not read the document at all.
extension CoordinatorState {
    mutating func unsentReports(of turnID: String, _ answer: RelayedAnswer, from peer: PeerID) -> [CoordinatorAction] {
        guard let (entry, standing) = turns.reporting(turnID, of: peer),
            publishesTurnEvents || follower(of: turnID, on: peer) != nil,
            let body = try? JSONValue(parsing: answer.body)
        else { return [] }
        let document = answer.status == .ok ? body : body["details"]
        let states = document?["states"]?.arrayValue ?? []
        let calls = document?["calls"]?.arrayValue ?? []
        guard standing.statesSent < states.count || standing.stepsSent < calls.count else { return [] }
        var actions: [CoordinatorAction] = []
        // The calls begun so far (each starts with selectingSkill or delegating) and those whose STEP was handled.
        var begun = 0
        var stepped = 0
        func steps(through count: Int) {
            while stepped < min(count, calls.count) {
                if stepped >= standing.stepsSent, let call = try? TurnCall(json: calls[stepped]) {
                    actions += noteStep(turnID, call, from: peer)
                }
                stepped += 1
            }
        }
        for (index, json) in states.enumerated() {
            guard let state = try? AgentState(json: json) else { continue }
            var ref = TurnRef(session: entry.session, turn: turnID)
            switch state {
            case .executingSkill:
                // The call it runs is the one begun last; its STEP comes after it.
                if begun > 0, begun <= calls.count { ref.parameters = calls[begun - 1]["parameters"] }
            case .selectingSkill, .delegating:
                steps(through: begun)
                begun += 1
            default:
                steps(through: begun)
            }
            if index >= standing.statesSent { actions += noteTurnState(state, ref, from: peer) }
        }
        steps(through: calls.count)
        return actions
    }
}
