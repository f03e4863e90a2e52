/// Reads the keys of one JSON object of a document, naming the object and key in every error.
struct DocumentReader {
    let object: [String: JSONValue]
    let name: String
    let isObject: Bool

    init(_ json: JSONValue, _ name: String) {
        self.object = json.objectValue ?? [:]
        self.name = name
        self.isObject = json.objectValue != nil
    }

    func problem(_ message: String) -> SkillbusError { SkillbusError(.malformedMessage, "\(name): \(message)") }

    /// The value, nil when absent or null.
    func optional(_ key: String) -> JSONValue? {
        guard let value = object[key], value != .null else { return nil }
        return value
    }

    private func required(_ key: String, _ type: String) throws(SkillbusError) -> JSONValue {
        guard isObject else { throw problem("expected an object") }
        guard let value = optional(key) else { throw problem("'\(key)' is missing; expected \(type)") }
        return value
    }

    func string(_ key: String) throws(SkillbusError) -> String {
        guard let value = try required(key, "a string").stringValue else { throw problem("'\(key)' must be a string") }
        return value
    }

    func optionalString(_ key: String) throws(SkillbusError) -> String? {
        guard let value = optional(key) else { return nil }
        guard let text = value.stringValue else { throw problem("'\(key)' must be a string or null") }
        return text
    }

    func number(_ key: String) throws(SkillbusError) -> Double {
        guard let value = try required(key, "a number").doubleValue else { throw problem("'\(key)' must be a number") }
        return value
    }

    func int(_ key: String) throws(SkillbusError) -> Int {
        guard let value = try required(key, "an integer").intValue else {
            throw problem("'\(key)' must be an integer")
        }
        return value
    }

    func bool(_ key: String) throws(SkillbusError) -> Bool {
        guard let value = try required(key, "a boolean").boolValue else { throw problem("'\(key)' must be a boolean") }
        return value
    }

    /// One of an enumeration's raw values, e.g. a status.
    func oneOf<Value: RawRepresentable & CaseIterable>(_ key: String) throws(SkillbusError) -> Value
    where Value.RawValue == String {
        let name = try string(key)
        guard let value = Value(rawValue: name) else {
            let names = Value.allCases.map(\.rawValue)
            throw problem("'\(key)' must be \(names.dropLast().joined(separator: ", ")) or \(names.last ?? ""), got '\(name.prefix(64))'")
        }
        return value
    }

    func array(_ key: String) throws(SkillbusError) -> [JSONValue] {
        guard let value = try required(key, "an array").arrayValue else { throw problem("'\(key)' must be an array") }
        return value
    }
}
