/// The JSON types a skill parameter may have.
public enum ParameterType: String, Sendable, CaseIterable {
    /// `any`: every JSON value but `null` (a memory value, say).
    case string, integer, number, boolean, array, object, any

    /// Whether `value` is of this type. An integer is a whole number; any number is a `number`.
    public func accepts(_ value: JSONValue) -> Bool {
        switch (self, value) {
        case (.string, .string), (.boolean, .bool), (.array, .array), (.object, .object), (.number, .number):
            true
        case (.any, let value):
            value != .null
        case (.integer, .number(let number)):
            number.isWholeNumber
        default:
            false
        }
    }
}

/// One parameter a skill takes.
public struct ParameterField: Sendable, Equatable {
    public var name: String
    public var type: ParameterType
    public var required: Bool
    public var description: String
    /// Used when the caller leaves an optional parameter out; nil when there is none. `.null` is not
    /// "none": a schema holding it has a problem (`problems`), and a registration refuses it.
    public var defaultValue: JSONValue?

    public init(
        _ name: String, _ type: ParameterType, required: Bool = true, description: String = "",
        default defaultValue: JSONValue? = nil
    ) {
        self.name = name
        self.type = type
        self.required = required
        self.description = description
        self.defaultValue = defaultValue
    }
}

/// The parameters a skill accepts. Validation reports every problem at once.
public struct ParameterSchema: Sendable, Equatable {
    public var fields: [ParameterField]

    public init(_ fields: [ParameterField]) { self.fields = fields }

    /// Whether both accept exactly the same parameters: the same names with the same types, requiredness
    /// and defaults. Descriptions and field order do not matter.
    public func accepts(sameParametersAs other: ParameterSchema) -> Bool {
        func shape(_ schema: ParameterSchema) -> [String: JSONValue] {
            Dictionary(
                schema.fields.map { field in
                    (
                        field.name,
                        [
                            "type": .string(field.type.rawValue), "required": .bool(field.required),
                            "default": field.defaultValue ?? .null,
                        ]
                    )
                }, uniquingKeysWith: { first, _ in first })
        }
        return fields.count == other.fields.count && shape(self) == shape(other)
    }

    /// Checks `parameters` and returns them with defaults applied.
    /// Throws `invalid_parameters` listing every missing, mistyped and unknown field together.
    public func validate(_ parameters: [String: JSONValue], skill: String) throws(SkillbusError) -> [String: JSONValue]
    {
        let (result, problems) = check(parameters, decidedLater: nil)
        guard problems.isEmpty else {
            throw SkillbusError(
                .invalidParameters,
                "invalid parameters for '\(skill)': " + problems.joined(separator: "; "),
                details: .array(problems.map { .string($0) })
            )
        }
        return result
    }

    /// Every problem with `parameters`, and them with defaults applied. A value `decidedLater` accepts (a
    /// plan's reference to an earlier step) counts as present, of any type.
    func check(
        _ parameters: [String: JSONValue], decidedLater: ((JSONValue) -> Bool)?
    ) -> (parameters: [String: JSONValue], problems: [String]) {
        var problems: [String] = []
        var result = parameters
        for field in fields {
            if let value = parameters[field.name] {
                if !field.type.accepts(value), decidedLater?(value) != true {
                    problems.append("parameter '\(field.name)' must be \(field.type.rawValue), got \(value.typeName)")
                }
            } else if field.required {
                problems.append("missing required parameter '\(field.name)' (\(field.type.rawValue))")
            } else if let defaultValue = field.defaultValue {
                result[field.name] = defaultValue
            }
        }
        // Fields are few: a linear look-up beats building a set on every call.
        let unknown = parameters.keys.filter { name in !fields.contains { $0.name == name } }
        for name in unknown.sorted() {
            let expected = fields.isEmpty ? "none" : fields.map(\.name).joined(separator: ", ")
            problems.append("unknown parameter '\(name)' (expected: \(expected))")
        }
        return (result, problems)
    }

    /// Problems with the schema itself (duplicate or empty names, defaults of the wrong type).
    public var problems: [String] {
        var seen = Set<String>()
        var problems: [String] = []
        for field in fields {
            if field.name.isEmpty { problems.append("a parameter has an empty name") }
            if !seen.insert(field.name).inserted { problems.append("parameter '\(field.name)' is declared twice") }
            if field.defaultValue == .null {
                // Not "no default": a default of null would be inserted and then fail every type check.
                problems.append(
                    "default of '\(field.name)' is null, which no type accepts (leave 'default' out for no default)")
            } else if let value = field.defaultValue, !field.type.accepts(value) {
                problems.append("default of '\(field.name)' is not \(field.type.rawValue)")
            }
        }
        return problems
    }
}

// MARK: - Wire form

extension ParameterField {
    public var json: JSONValue {
        var object: [String: JSONValue] = [
            "name": .string(name), "type": .string(type.rawValue), "required": .bool(required),
            "description": .string(description),
        ]
        if let defaultValue { object["default"] = defaultValue }
        return .object(object)
    }

    public init(json: JSONValue) throws(SkillbusError) {
        guard let name = json["name"]?.stringValue else {
            throw SkillbusError(.invalidRegistration, "a parameter has no string 'name'")
        }
        guard let typeName = json["type"]?.stringValue, let type = ParameterType(rawValue: typeName) else {
            let allowed = ParameterType.allCases.map(\.rawValue).joined(separator: ", ")
            throw SkillbusError(.invalidRegistration, "parameter '\(name)' has an unknown type (allowed: \(allowed))")
        }
        var required = true
        if let value = json["required"] {
            guard let flag = value.boolValue else {
                throw SkillbusError(.invalidRegistration, "parameter '\(name)': 'required' must be true or false")
            }
            required = flag
        }
        self.init(
            name, type, required: required, description: json["description"]?.stringValue ?? "",
            default: json["default"])
    }
}

extension ParameterSchema {
    public var json: JSONValue { .array(fields.map(\.json)) }

    public init(json: JSONValue) throws(SkillbusError) {
        guard let array = json.arrayValue else {
            throw SkillbusError(.invalidRegistration, "'parameters' must be an array of fields")
        }
        var fields: [ParameterField] = []
        for item in array { fields.append(try ParameterField(json: item)) }
        self.init(fields)
    }
}

extension ParameterSchema {
    /// The JSON Schema of one object of these parameters, as a planner's model and an MCP client read it.
    /// `any` is every JSON type but null, as our validation has it; unknown parameters are refused there,
    /// hence `additionalProperties: false`.
    public var jsonSchema: JSONValue {
        var properties: [String: JSONValue] = [:]
        for field in fields {
            var property: [String: JSONValue] = [:]
            switch field.type {
            case .any: property["type"] = ["string", "number", "boolean", "array", "object"]
            default: property["type"] = .string(field.type.rawValue)
            }
            if !field.description.isEmpty { property["description"] = .string(field.description) }
            if let value = field.defaultValue { property["default"] = value }
            properties[field.name] = .object(property)
        }
        return [
            "type": "object", "properties": .object(properties),
            "required": .array(fields.filter(\.required).map { .string($0.name) }),
            "additionalProperties": false,
        ]
    }
}
