/// `{"$ref": "STEP.result.PATH"}`: the result of step STEP, as its result form (§5.5: `{"type": "text",
/// "text": …}` or `{"type": "json", "json": …}`), then PATH into it, dot-separated; array elements by
/// index. `fetch.result.text` is a text result's text; `stats.result.json.words` a field of a JSON result;
/// `fetch.result` the whole result form. `STEP.reply` is short for `STEP.result.text`: an ask step's reply
/// (a team round, PROTOCOL §3.5.10).
struct Reference: Sendable, Equatable {
    let text: String
    let step: String
    let path: [String]

    init?(_ value: JSONValue) {
        guard let object = value.objectValue, object.count == 1, let text = object["$ref"]?.stringValue else {
            return nil
        }
        let parts = text.split(separator: ".", omittingEmptySubsequences: false).map(String.init)
        self.text = text
        step = parts[0]
        if parts.count == 2 && parts[1] == "reply" {
            path = ["text"]
        } else {
            path = parts.count > 1 && parts[1] == "result" ? Array(parts.dropFirst(2)) : Array(parts.dropFirst(1))
        }
    }

    /// The referenced value, or why there is none.
    func resolve(in result: JSONValue) -> Result<JSONValue, SkillbusError> {
        var value = result
        for (depth, key) in path.enumerated() {
            let here = ([step, "result"] + path.prefix(depth)).joined(separator: ".")
            if let object = value.objectValue, let next = object[key] {
                value = next
            } else if let array = value.arrayValue, let index = Int(key), array.indices.contains(index) {
                value = array[index]
            } else {
                return .failure(
                    SkillbusError(
                        .invalidParameters,
                        "reference '\(text)': \(here) has no '\(key)' (it is \(value.typeName): \(value.jsonString.prefix(200)))",
                        details: ["reference": .string(text), "missing": .string(key)]))
            }
        }
        return .success(value)
    }
}

extension JSONValue {
    /// Whether a `{"$ref": …}` stands anywhere in this value.
    var containsReference: Bool {
        if Reference(self) != nil { return true }
        switch self {
        case .object(let object): return object.values.contains { $0.containsReference }
        case .array(let array): return array.contains { $0.containsReference }
        default: return false
        }
    }

    /// This value with every `{"$ref": …}` replaced by what it names in `results` (step id → result form).
    func resolvingReferences(_ results: [String: JSONValue]) -> Result<JSONValue, SkillbusError> {
        if let reference = Reference(self) {
            guard let result = results[reference.step] else {
                return .failure(SkillbusError(.invalidParameters, "reference '\(reference.text)': step has no result"))
            }
            return reference.resolve(in: result)
        }
        switch self {
        case .object(let object):
            var resolved: [String: JSONValue] = [:]
            for (key, value) in object {
                switch value.resolvingReferences(results) {
                case .success(let value): resolved[key] = value
                case .failure(let error): return .failure(error)
                }
            }
            return .success(.object(resolved))
        case .array(let array):
            var resolved: [JSONValue] = []
            for value in array {
                switch value.resolvingReferences(results) {
                case .success(let value): resolved.append(value)
                case .failure(let error): return .failure(error)
                }
            }
            return .success(.array(resolved))
        default:
            return .success(self)
        }
    }
}

