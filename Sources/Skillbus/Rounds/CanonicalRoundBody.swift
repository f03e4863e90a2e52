/// The ROUND bodies most rounds have, `{"invoke":{"params":{…},"skill":"…"}}` and
/// `{"fanout":{"agents":"all","aggregate":"…","params":{…},"skill":"…"}}`, read when they already are in
/// canonical form (compact, keys sorted: as Skillbus's clients and the Python package write them). Then the body
/// is its own canonical form and its `params` are the bytes each invocation sends, so neither the outer objects
/// are built nor anything written again. Anything else — another shape, a list of agents, `retries`, `priority`
/// or `noCache`, spaces, keys out of order, a reference to resolve — gives nil, and the general reader takes the
/// body: both read the same bodies the same way (CanonicalRoundBodyTests).
struct CanonicalRoundBody {
    let spec: RoundSpec
    /// The `params` object as it stands in the body: canonical already.
    let parameterBytes: [UInt8]

    private static let invokeHead = Array(#"{"invoke":{"params":"#.utf8)
    private static let fanoutHeads = RoundSpec.Aggregation.allCases.map { aggregate in
        (aggregate, Array(#"{"fanout":{"agents":"all","aggregate":"\#(aggregate.rawValue)","params":"#.utf8))
    }
    private static let skillKey = Array(#","skill":""#.utf8)
    private static let tail = Array(#""}}"#.utf8)

    init?(_ body: [UInt8]) {
        if body.starts(with: Self.invokeHead) {
            guard let (skill, parameters, bytes) = Self.skillAndParameters(body, after: Self.invokeHead.count)
            else { return nil }
            (spec, parameterBytes) = (.invoke(skill: skill, parameters: parameters), bytes)
        } else if let (aggregate, head) = Self.fanoutHeads.first(where: { body.starts(with: $0.1) }) {
            guard let (skill, parameters, bytes) = Self.skillAndParameters(body, after: head.count) else { return nil }
            (spec, parameterBytes) = (
                .fanout(skill: skill, parameters: parameters, agents: nil, aggregate: aggregate), bytes
            )
        } else {
            return nil
        }
    }

    /// Reads what follows a head that ends with `"params":`: the parameters object, then the skill as the last
    /// member, then the ends of both objects.
    private static func skillAndParameters(
        _ body: [UInt8], after headCount: Int
    ) -> (skill: String, parameters: JSONValue, bytes: [UInt8])? {
        let (skillKey, tail) = (Self.skillKey, Self.tail)
        guard body.count > headCount + skillKey.count + tail.count,
            body[(body.count - tail.count)...].elementsEqual(tail)
        else { return nil }
        // The skill is the last member and an identifier holds no quote, so the last `,"skill":"` is its key.
        let skillEnd = body.count - tail.count
        var keyStart = skillEnd - skillKey.count
        while keyStart > headCount, !body[keyStart..<keyStart + skillKey.count].elementsEqual(skillKey) {
            keyStart -= 1
        }
        guard keyStart > headCount else { return nil }
        let skill = String(decoding: body[(keyStart + skillKey.count)..<skillEnd], as: UTF8.self)
        guard SkillDescriptor.isValidIdentifier(skill) else { return nil }
        let parameterBytes = Array(body[headCount..<keyStart])
        guard parameterBytes.first == UInt8(ascii: "{"),
            CanonicalJSON.isCanonical(parameterBytes),
            let parameters = try? JSONValue(parsing: parameterBytes), !parameters.containsReference
        else { return nil }
        return (skill, parameters, parameterBytes)
    }
}
