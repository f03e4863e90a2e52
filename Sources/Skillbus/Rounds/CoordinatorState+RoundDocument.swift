/// The document that answers a ROUND, built from the round as it ended (PROTOCOL §5.14).
extension CoordinatorState {
    /// Status, result (aggregated for a fan-out), every invocation with its agent, status, duration and
    /// whether it was deduplicated, and a summary.
    func roundDocument(_ run: RoundRun, now: UInt64) -> RoundDocument {
        let invocations = run.invocations.map(\.record)
        let totalMs = Double((now &- run.accepted) / 1000) / 1000
        var document = RoundDocument(
            round: run.roundText, shape: run.spec.shape, status: .ok, durationMs: totalMs, invocations: invocations,
            summary: RoundDocument.Summary(invocations, totalMs: totalMs))
        // The round's own invocations; sub-calls come after them and never decide the outcome.
        let asked =
            run.subCalls == 0 ? invocations : run.invocations.filter { $0.subCallRequest == nil }.map(\.record)
        switch run.spec {
        case .invoke, .ask:
            let only = asked[0]
            document.agent = only.agent
            document.resultJSON = only.resultJSON ?? .value(.null)
            if only.status != .ok {
                document.error = only.error ?? SkillbusError(.internalError, "'\(only.id)' ended without an error")
            }
        case .fanout(_, _, _, let aggregation):
            Self.aggregate(asked, aggregation, into: &document)
        case .asks(_, _, let aggregation):
            Self.aggregate(asked, aggregation, into: &document, comparing: Self.replyKey)
        case .plan:
            document.resultJSON = RoundDocument.stepResults(asked)
            // The error that stopped the plan, not a step skipped because of it.
            if let first = asked.first(where: \.status.isFailure) ?? asked.first(where: { $0.status != .ok }) {
                let counted = asked.count(where: \.status.isFailure)
                document.error = SkillbusError(
                    first.error?.code ?? .internalError,
                    "\(counted) of \(asked.count) step(s) failed; first: '\(first.id)' \(first.status.documentName)"
                        + (first.error.map { ": \($0.message)" } ?? ""),
                    details: ["step": .string(first.id)])
            }
        }
        if let cancelled = run.cancelled { document.error = cancelled }
        document.status = document.error == nil ? .ok : .error
        return document
    }

    /// all: every result in agent order; first: the winner's; majority: the value most agents returned, compared
    /// by `comparing` (as canonical JSON unless told otherwise; an asks body compares replies trimmed and
    /// lower-cased). A majority's result is that of the first agent of its group.
    static func aggregate(
        _ asked: [RoundDocument.Invocation], _ mode: RoundSpec.Aggregation, into document: inout RoundDocument,
        comparing key: (RoundDocument.Invocation) -> [UInt8] = { ($0.resultJSON ?? .value(.null)).canonicalBytes }
    ) {
        let succeeded = asked.filter { $0.status == .ok }
        switch mode {
        case .all:
            document.resultJSON = RoundDocument.agentEntries(asked)
            guard succeeded.count < asked.count else { return }
            let failures = asked.filter { $0.status != .ok }.map(\.id)
            document.error = SkillbusError(
                .skillFailed, "\(failures.count) of \(asked.count) agent(s) failed: \(failures.joined(separator: ", "))",
                details: ["failed": .array(failures.map { .string($0) })])
        case .first:
            guard let winner = succeeded.first else {
                document.error = SkillbusError(.skillFailed, "none of the \(asked.count) agent(s) succeeded")
                return
            }
            document.agent = winner.id
            document.resultJSON = winner.resultJSON ?? .value(.null)
        case .majority:
            // By default results compared as canonical JSON: the serialized form sorts keys and spells numbers one
            // way.
            var groups: [[UInt8]: RoundDocument.Vote.Group] = [:]
            for invocation in succeeded {
                let json = invocation.resultJSON ?? .value(.null)
                groups[key(invocation), default: .init(result: json.value, agents: [])].agents.append(invocation.id)
            }
            // Most votes first; equal votes by the name of each group's first agent (every group has one).
            let split = groups.values.sorted {
                $0.agents.count != $1.agents.count
                    ? $0.agents.count > $1.agents.count : $0.agents.lexicographicallyPrecedes($1.agents)
            }
            var vote = RoundDocument.Vote(of: asked.count, votes: nil, split: split)
            defer { document.vote = vote }
            guard let top = split.first, top.agents.count * 2 > asked.count else {
                let description = split.map { "\($0.agents.count) for \($0.result.jsonString.prefix(60))" }
                    .joined(separator: ", ")
                document.error = SkillbusError(
                    .noMajority,
                    "no result has a majority of the \(asked.count) agent(s): "
                        + (description.isEmpty ? "no successes" : description),
                    details: ["split": vote.json["split"] ?? []])
                return
            }
            vote.votes = top.agents.count
            document.result = top.result
        }
    }
}
