extension CoordinatorState {
    /// The answer to a ROUND: status, result (aggregated for a fan-out), every invocation with its agent,
    /// status, duration and whether it was deduplicated, and a summary.
    func roundDocument(_ run: RoundRun, now: UInt64) -> JSONValue {
        let invocations = run.invocations
        let failed = invocations.filter { $0.status == "error" }
        let deduplicated = invocations.filter(\.deduplicated).count
        let totalMicros = Int((now &- run.accepted) / 1000)
        var document: [String: JSONValue] = [
            "round": .string(run.roundText), "shape": .string(run.spec.shape),
            "durationMs": .number(Double(totalMicros) / 1000), "invocations": .array(invocations.map(\.json)),
            "summary": [
                "invocations": .number(Double(invocations.count)),
                "executions": .number(Double(invocations.count { !$0.deduplicated && $0.agent != "" })),
                "deduplicated": .number(Double(deduplicated)), "failed": .number(Double(failed.count)),
                "totalMs": .number(Double(totalMicros) / 1000),
            ],
        ]
        var error: SkillbusError?
        var result: JSONValue = .null
        switch run.spec {
        case .invoke:
            let only = invocations[0]
            document["agent"] = only.agent.isEmpty ? .null : .string(only.agent)
            result = only.result ?? .null
            if only.status != "ok" { error = SkillbusError(json: only.error ?? .null) }
        case .fanout(_, _, _, let aggregate):
            let asked = invocations.filter { $0.subCallRequest == nil }
            (result, error) = Self.aggregate(asked, aggregate, into: &document)
        case .plan:
            var results: [String: JSONValue] = [:]
            for step in invocations where step.subCallRequest == nil && step.status == "ok" {
                results[step.id] = step.result ?? .null
            }
            result = .object(results)
            // The error that stopped the plan, not a step skipped because of it.
            let steps = invocations.filter { $0.subCallRequest == nil }
            if let first = steps.first(where: { $0.status == "error" || $0.status == "cancelled" })
                ?? steps.first(where: { $0.status != "ok" })
            {
                let counted = steps.filter { $0.status == "error" || $0.status == "cancelled" }
                error = SkillbusError(
                    SkillbusError(json: first.error ?? .null).code,
                    "\(counted.count) of \(steps.count) step(s) failed; "
                        + "first: '\(first.id)' \(first.status)"
                        + (first.error?["message"]?.stringValue.map { ": \($0)" } ?? ""),
                    details: ["step": .string(first.id)])
            }
        }
        document["status"] = error == nil ? "ok" : "error"
        document["result"] = result
        document["error"] = error?.json ?? .null
        return .object(document)
    }

    /// all: every result in agent order; first: the winner's; majority: the value most agents returned.
    static func aggregate(
        _ asked: [RoundInvocation], _ mode: RoundSpec.Aggregation, into document: inout [String: JSONValue]
    ) -> (JSONValue, SkillbusError?) {
        let succeeded = asked.filter { $0.status == "ok" }
        switch mode {
        case .all:
            let result = JSONValue.array(
                asked.map {
                    [
                        "agent": .string($0.id), "status": .string($0.status), "result": $0.result ?? .null,
                        "error": $0.error ?? .null,
                    ]
                })
            guard succeeded.count < asked.count else { return (result, nil) }
            let failures = asked.filter { $0.status != "ok" }.map(\.id)
            return (
                result,
                SkillbusError(
                    .skillFailed,
                    "\(failures.count) of \(asked.count) agent(s) failed: \(failures.joined(separator: ", "))",
                    details: ["failed": .array(failures.map { .string($0) })])
            )
        case .first:
            guard let winner = succeeded.first else {
                return (.null, SkillbusError(.skillFailed, "none of the \(asked.count) agent(s) succeeded"))
            }
            document["agent"] = .string(winner.id)
            return (winner.result ?? .null, nil)
        case .majority:
            // Results compared as canonical JSON: the serialized form sorts keys and spells numbers one way.
            var votes: [[UInt8]: (value: JSONValue, agents: [String])] = [:]
            for invocation in succeeded {
                let value = invocation.result ?? .null
                votes[value.serialized(), default: (value, [])].agents.append(invocation.id)
            }
            let split = votes.values.sorted {
                $0.agents.count > $1.agents.count
                    || ($0.agents.count == $1.agents.count && $0.agents.first! < $1.agents.first!)
            }
            let splitJSON = JSONValue.array(
                split.map {
                    [
                        "result": $0.value, "votes": .number(Double($0.agents.count)),
                        "agents": .array($0.agents.map { .string($0) }),
                    ]
                })
            var aggregate: [String: JSONValue] = [
                "mode": "majority", "of": .number(Double(asked.count)), "split": splitJSON,
            ]
            defer { document["aggregate"] = .object(aggregate) }
            guard let top = split.first, top.agents.count * 2 > asked.count else {
                let description = split.map { "\($0.agents.count) for \($0.value.jsonString.prefix(60))" }.joined(
                    separator: ", ")
                return (
                    .null,
                    SkillbusError(
                        .noMajority,
                        "no result has a majority of the \(asked.count) agent(s): \(description.isEmpty ? "no successes" : description)",
                        details: ["split": splitJSON])
                )
            }
            aggregate["votes"] = .number(Double(top.agents.count))
            return (top.value, nil)
        }
    }
}
