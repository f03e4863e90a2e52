/// The ROUND body most rounds have, `{"invoke":{"params":{…},"skill":"…"}}`, read when it already is in
/// canonical form (compact, keys sorted: as Skillbus's clients and the Python package write it). Then the body
/// is its own canonical form and its `params` are the bytes the invocation sends, so neither the outer objects
/// are built nor anything written again. Anything else — another shape, `retries`, `priority` or `noCache`,
/// spaces, keys out of order, a reference to resolve — gives nil, and the general reader takes the body: both
/// read the same bodies the same way (CanonicalInvokeBodyTests).
struct CanonicalInvokeBody {
    let skill: String
    let parameters: JSONValue
    /// The `params` object as it stands in the body: canonical already.
    let parameterBytes: [UInt8]

    private static let head = Array(#"{"invoke":{"params":"#.utf8)
    private static let skillKey = Array(#","skill":""#.utf8)
    private static let tail = Array(#""}}"#.utf8)

    init?(_ body: [UInt8]) {
        let (head, skillKey, tail) = (Self.head, Self.skillKey, Self.tail)
        guard body.count > head.count + skillKey.count + tail.count, body.starts(with: head),
            body[(body.count - tail.count)...].elementsEqual(tail)
        else { return nil }
        // The skill is the last member and an identifier holds no quote, so the last `,"skill":"` is its key.
        let skillEnd = body.count - tail.count
        var keyStart = skillEnd - skillKey.count
        while keyStart > head.count, !body[keyStart..<keyStart + skillKey.count].elementsEqual(skillKey) {
            keyStart -= 1
        }
        guard keyStart > head.count else { return nil }
        let skill = String(decoding: body[(keyStart + skillKey.count)..<skillEnd], as: UTF8.self)
        guard SkillDescriptor.isValidIdentifier(skill) else { return nil }
        let parameterBytes = Array(body[head.count..<keyStart])
        guard parameterBytes.first == UInt8(ascii: "{"),
            CanonicalJSON.object(parameterBytes, defaults: [], after: []) == parameterBytes,
            let parameters = try? JSONValue(parsing: parameterBytes), !parameters.containsReference
        else { return nil }
        (self.skill, self.parameters, self.parameterBytes) = (skill, parameters, parameterBytes)
    }
}
