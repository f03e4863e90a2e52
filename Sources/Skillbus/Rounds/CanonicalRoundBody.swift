/// The ROUND bodies most rounds have, `{"invoke":{"params":{…},"skill":"…"}}`,
/// `{"fanout":{"agents":"all","aggregate":"…","params":{…},"skill":"…"}}` and
/// `{"plan":{"onFailure":"…","steps":[{"after":[…],"id":"…","params":{…},"skill":"…"},…]}}`, read when they already
/// are in canonical form (compact, keys sorted: as Skillbus's clients and the Python package write them). Then the
/// body is its own canonical form and its `params` are the bytes each invocation sends, so neither the outer objects
/// are built nor anything written again. Anything else — another shape, a list of agents, an ask step, `retries`,
/// `priority` or `noCache`, spaces, keys out of order, a reference in an invoke or fan-out, a plan with a problem —
/// gives nil, and the general reader takes the body (and names the problem): both read the same bodies the same way
/// (CanonicalRoundBodyTests).
struct CanonicalRoundBody {
    let spec: RoundSpec
    /// Each `params` object as it stands in the body: canonical already.
    let parameterBytes: SentParameters

    private static let invokeHead = Array(#"{"invoke":{"params":"#.utf8)
    private static let fanoutHeads = RoundSpec.Aggregation.allCases.map { aggregate in
        (aggregate, Array(#"{"fanout":{"agents":"all","aggregate":"\#(aggregate.rawValue)","params":"#.utf8))
    }
    private static let skillKey = Array(#","skill":""#.utf8)
    private static let tail = Array(#""}}"#.utf8)
    private static let planHeads = [false, true].map { continueOnFailure in
        let failure = continueOnFailure ? "continue" : "stop"
        return (continueOnFailure, Array(#"{"plan":{"onFailure":"\#(failure)","steps":["#.utf8))
    }

    init?(_ body: [UInt8], stepLimit: Int) {
        if body.starts(with: Self.invokeHead) {
            guard let (skill, parameters, bytes) = Self.skillAndParameters(body, after: Self.invokeHead.count)
            else { return nil }
            (spec, parameterBytes) = (.invoke(skill: skill, parameters: parameters), .shared(bytes))
        } else if let (aggregate, head) = Self.fanoutHeads.first(where: { body.starts(with: $0.1) }) {
            guard let (skill, parameters, bytes) = Self.skillAndParameters(body, after: head.count) else { return nil }
            (spec, parameterBytes) = (
                .fanout(skill: skill, parameters: parameters, agents: nil, aggregate: aggregate), .shared(bytes)
            )
        } else if let (continueOnFailure, head) = Self.planHeads.first(where: { body.starts(with: $0.1) }) {
            guard let (steps, bytes) = Self.planSteps(body, after: head.count, stepLimit: stepLimit) else { return nil }
            (spec, parameterBytes) = (.plan(steps: steps, continueOnFailure: continueOnFailure), .steps(bytes))
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

    /// Reads a canonical plan's steps after its head, each a skill step with its members in key order, and what
    /// follows the last one; nil for anything else, more steps than `stepLimit`, or steps with a problem that the
    /// general reader names (a duplicate id, a dependency on no step, a cycle).
    private static func planSteps(
        _ body: [UInt8], after headCount: Int, stepLimit: Int
    ) -> (steps: [PlanStep], parameterBytes: [[UInt8]])? {
        // Canonical: no escapes and no white space anywhere, so a quote ends every string and a scan finds each
        // member.
        guard CanonicalJSON.isCanonical(body) else { return nil }
        var index = headCount
        func skip(_ literal: StaticString) -> Bool {
            let count = literal.utf8CodeUnitCount
            guard index + count <= body.count,
                literal.withUTF8Buffer({ body[index..<index + count].elementsEqual($0) })
            else { return false }
            index += count
            return true
        }
        func string() -> String? {
            guard index < body.count, body[index] == UInt8(ascii: "\""),
                let close = body[(index + 1)...].firstIndex(of: UInt8(ascii: "\""))
            else { return nil }
            defer { index = close + 1 }
            return String(decoding: body[(index + 1)..<close], as: UTF8.self)
        }
        var steps: [PlanStep] = []
        var parameterBytes: [[UInt8]] = []
        repeat {
            guard steps.count < stepLimit, skip(#"{"after":["#) else { return nil }
            var after: [String] = []
            if !skip("]") {
                repeat {
                    guard let id = string() else { return nil }
                    after.append(id)
                } while skip(",")
                guard skip("]") else { return nil }
            }
            guard skip(#","id":"#), let id = string(), !id.isEmpty, skip(#","params":"#), index < body.count,
                body[index] == UInt8(ascii: "{"), let end = CanonicalJSON.valueEnd(in: body, from: index)
            else { return nil }
            let bytes = Array(body[index..<end])
            index = end
            guard skip(#","skill":"#), let skill = string(), SkillDescriptor.isValidIdentifier(skill), skip("}"),
                let parameters = try? JSONValue(parsing: bytes)
            else { return nil }
            steps.append(PlanStep(id: id, skill: skill, parameters: parameters, after: after))
            parameterBytes.append(bytes)
        } while skip(",")
        guard skip("]}}"), index == body.count, RoundSpec.graphProblems(steps).isEmpty else { return nil }
        return (steps, parameterBytes)
    }
}

/// A round's parameters as its body holds them, when that is their canonical form: the bytes each invocation sends,
/// not written again.
enum SentParameters: Sendable, Equatable {
    /// An invoke's or a fan-out's (every invocation of a fan-out sends the same).
    case shared([UInt8])
    /// Each plan step's, in step order.
    case steps([[UInt8]])
}
