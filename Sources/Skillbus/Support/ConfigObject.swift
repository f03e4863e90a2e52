import Foundation

/// A JSON object being read as configuration: every error names the file and the key's path.
struct ConfigObject {
    let file: String
    let path: String
    let values: [String: JSONValue]

    /// The file's top-level object, its `version` checked (and left out of `values`).
    static func load(path file: String) throws(SkillbusError) -> ConfigObject {
        guard let data = FileManager.default.contents(atPath: file) else {
            throw SkillbusError(.invalidConfiguration, "\(file): cannot read the file")
        }
        let value: JSONValue
        do {
            value = try JSONValue(parsing: Array(data))
        } catch {
            throw SkillbusError(.invalidConfiguration, "\(file): \(error)")
        }
        guard let values = value.objectValue else {
            throw SkillbusError(.invalidConfiguration, "\(file): the top level must be a JSON object")
        }
        let root = ConfigObject(file: file, path: "", values: values)
        guard let version = values["version"] else {
            throw root.error("version", "missing; this build reads version 1")
        }
        guard version.intValue == 1 else {
            throw root.error("version", "unsupported version \(version.jsonString); this build reads version 1")
        }
        return ConfigObject(file: file, path: "", values: values.filter { $0.key != "version" })
    }

    func keyPath(_ key: String) -> String { path.isEmpty ? key : "\(path).\(key)" }

    func error(_ key: String, _ message: String) -> SkillbusError {
        SkillbusError(.invalidConfiguration, "\(file): \(keyPath(key)): \(message)")
    }

    func checkKeys(_ allowed: Set<String>) throws(SkillbusError) {
        try Self.throwing(unknownKeys(allowed))
    }

    /// One problem for each key that is not `allowed`.
    func unknownKeys(_ allowed: Set<String>) -> [String] {
        values.keys.sorted().filter { !allowed.contains($0) }.map {
            error($0, "unknown key (allowed: \(allowed.sorted().joined(separator: ", ")))").message
        }
    }

    /// Nothing when there are no problems; else one error that lists them all, a line each (and in `details`,
    /// so that a reader of an enclosing object lists them among its own: `problems(in:)`).
    static func throwing(_ problems: [String]) throws(SkillbusError) {
        guard !problems.isEmpty else { return }
        let message = problems.count == 1 ? problems[0] : "\(problems.count) problems:\n" + problems.joined(separator: "\n")
        throw SkillbusError(.invalidConfiguration, message, details: .array(problems.map { .string($0) }))
    }

    /// The problems an error of `throwing` lists, or its message.
    static func problems(in error: SkillbusError) -> [String] {
        error.details?.arrayValue?.compactMap(\.stringValue) ?? [error.message]
    }

    func string(_ key: String) throws(SkillbusError) -> String? {
        guard let value = values[key] else { return nil }
        guard let text = value.stringValue else { throw error(key, "expected a string, got \(value.typeName)") }
        return text
    }

    func int(_ key: String, minimum: Int, maximum: Int = 1 << 40) throws(SkillbusError) -> Int? {
        guard let value = values[key] else { return nil }
        guard let number = value.intValue else { throw error(key, "expected an integer, got \(value.typeName)") }
        guard (minimum...maximum).contains(number) else {
            throw error(key, "must be from \(minimum) to \(maximum), got \(number)")
        }
        return number
    }

    /// `{"perSecond": R, "burst": B}`: R above 0 (at most a million), B from 1 (default: 1).
    func rateLimit(_ key: String) throws(SkillbusError) -> RateLimit? {
        guard let limit = try object(key, allowed: ["perSecond", "burst"]) else { return nil }
        guard case .number(let rate)? = limit.values["perSecond"], rate > 0, rate <= 1_000_000 else {
            throw limit.error("perSecond", "required: a number above 0 and at most 1000000")
        }
        let burst = try limit.int("burst", minimum: 1, maximum: 1_000_000) ?? 1
        return RateLimit(perSecond: rate, burst: burst)
    }

    /// `{"skills": {ID: rate, …}, "clients": rate}` (PROTOCOL §4.15).
    func rateLimits(_ key: String) throws(SkillbusError) -> RateLimits? {
        guard let limits = try object(key, allowed: ["skills", "clients"]) else { return nil }
        var rateLimits = RateLimits()
        if let skills = limits.values["skills"] {
            guard let entries = skills.objectValue else {
                throw limits.error("skills", "expected an object of skill identifiers, got \(skills.typeName)")
            }
            let table = ConfigObject(file: limits.file, path: limits.keyPath("skills"), values: entries)
            for skill in entries.keys.sorted() {
                rateLimits.skills[skill] = try table.rateLimit(skill)
            }
        }
        rateLimits.perClient = try limits.rateLimit("clients")
        return rateLimits
    }

    /// A number above 0 and at most 1.
    func fraction(_ key: String) throws(SkillbusError) -> Double? {
        guard let value = values[key] else { return nil }
        guard case .number(let number) = value else { throw error(key, "expected a number, got \(value.typeName)") }
        guard number > 0, number <= 1 else { throw error(key, "must be above 0 and at most 1, got \(number)") }
        return number
    }

    func bool(_ key: String) throws(SkillbusError) -> Bool? {
        guard let value = values[key] else { return nil }
        guard let flag = value.boolValue else { throw error(key, "expected true or false, got \(value.typeName)") }
        return flag
    }

    func endpoint(_ key: String) throws(SkillbusError) -> String? {
        guard let text = try string(key) else { return nil }
        if let problem = Endpoint.problem(text) { throw error(key, problem) }
        return text
    }

    /// Endpoints of a coordinator group: a comma list, or a JSON array of strings; returned as a comma list.
    func endpointList(_ key: String) throws(SkillbusError) -> String? {
        guard let value = values[key] else { return nil }
        if let text = value.stringValue {
            if let problem = Endpoint.listProblem(text) { throw error(key, problem) }
            return text
        }
        guard let entries = try stringArray(key) else { return nil }
        let (list, problem) = Endpoint.joined(entries)
        if let problem { throw error(key, problem) }
        return list
    }

    func stringArray(_ key: String) throws(SkillbusError) -> [String]? {
        guard let value = values[key] else { return nil }
        guard let array = value.arrayValue else {
            throw error(key, "expected an array of strings, got \(value.typeName)")
        }
        var strings: [String] = []
        for (index, item) in array.enumerated() {
            guard let text = item.stringValue else {
                throw error("\(key)[\(index)]", "expected a string, got \(item.typeName)")
            }
            strings.append(text)
        }
        return strings
    }

    /// The object at `key`, its keys checked against `allowed` (nil: by whoever reads it).
    func object(_ key: String, allowed: Set<String>?) throws(SkillbusError) -> ConfigObject? {
        guard let value = values[key] else { return nil }
        guard let object = value.objectValue else { throw error(key, "expected an object, got \(value.typeName)") }
        let child = ConfigObject(file: file, path: keyPath(key), values: object)
        if let allowed { try child.checkKeys(allowed) }
        return child
    }

    func objects(_ key: String, allowed: Set<String>?) throws(SkillbusError) -> [ConfigObject]? {
        guard let value = values[key] else { return nil }
        guard let array = value.arrayValue else { throw error(key, "expected an array, got \(value.typeName)") }
        var children: [ConfigObject] = []
        for (index, item) in array.enumerated() {
            guard let object = item.objectValue else {
                throw error("\(key)[\(index)]", "expected an object, got \(item.typeName)")
            }
            let child = ConfigObject(file: file, path: keyPath("\(key)[\(index)]"), values: object)
            if let allowed { try child.checkKeys(allowed) }
            children.append(child)
        }
        return children
    }
}
