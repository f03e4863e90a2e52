import Testing

@testable import Skillbus

@Suite("Parameter validation")
struct ParameterSchemaTests {
    let schema = ParameterSchema([
        ParameterField("text", .string),
        ParameterField("count", .integer, required: false, default: 3),
        ParameterField("ratio", .number, required: false),
        ParameterField("flag", .boolean, required: false),
        ParameterField("items", .array, required: false),
        ParameterField("options", .object, required: false),
    ])

    @Test("valid parameters pass, with defaults applied")
    func valid() throws {
        let result = try schema.validate(
            ["text": "x", "ratio": 2, "items": [1], "options": [:], "flag": true], skill: "s")
        #expect(result["count"] == 3)
        #expect(result["text"] == "x")
    }

    @Test("every problem is reported at once, and nothing else")
    func allProblemsTogether() {
        #expect {
            try schema.validate(["count": 1.5, "flag": "yes", "extra": 1, "more": 2], skill: "demo")
        } throws: { error in
            guard let error = error as? SkillbusError, error.code == .invalidParameters else { return false }
            let problems = error.details?.arrayValue?.compactMap(\.stringValue) ?? []
            return problems == [
                "missing required parameter 'text' (string)",
                "parameter 'count' must be integer, got number",
                "parameter 'flag' must be boolean, got string",
                "unknown parameter 'extra' (expected: text, count, ratio, flag, items, options)",
                "unknown parameter 'more' (expected: text, count, ratio, flag, items, options)",
            ] && error.message.hasPrefix("invalid parameters for 'demo'")
        }
    }

    @Test("the example of PROTOCOL §5.3, byte for byte")
    func documentedExample() {
        let demo = ParameterSchema([
            ParameterField("text", .string), ParameterField("count", .integer, required: false),
        ])
        #expect {
            try demo.validate(["count": 1.5, "txt": "x", "b": true], skill: "demo")
        } throws: { error in
            (error as? SkillbusError)?.message
                == "invalid parameters for 'demo': missing required parameter 'text' (string); parameter 'count' must "
                + "be integer, got number; unknown parameter 'b' (expected: text, count); unknown parameter 'txt' "
                + "(expected: text, count)"
        }
    }

    @Test(
        "type checks",
        arguments: [
            (ParameterType.integer, JSONValue.number(2), true), (.integer, .number(2.5), false),
            (.number, .number(2), true), (.string, .number(1), false), (.boolean, .bool(false), true),
            (.array, .array([]), true), (.object, .array([]), false), (.string, .null, false),
        ])
    func types(type: ParameterType, value: JSONValue, accepted: Bool) {
        #expect(type.accepts(value) == accepted)
    }

    @Test("schema problems: duplicate and empty names, wrong defaults")
    func schemaProblems() {
        let bad = ParameterSchema([
            ParameterField("a", .string), ParameterField("a", .string), ParameterField("", .integer),
            ParameterField("b", .integer, required: false, default: "x"),
        ])
        #expect(bad.problems.count == 3)
    }

    @Test("descriptors from registrations are checked")
    func descriptors() throws {
        let good = try SkillDescriptor(json: [
            "identifier": "text.stats", "parameters": [["name": "text", "type": "string"]],
        ])
        #expect(good.parameters.fields.first?.type == .string)
        #expect(try SkillDescriptor(json: good.json) == good)
        for bad: JSONValue in [
            ["identifier": ""], ["identifier": "has space"], ["parameters": []],
            ["identifier": "x", "parameters": [["name": "a", "type": "float"]]],
            ["identifier": "x", "parameters": "nope"],
            ["identifier": "x", "parameters": [["name": "a", "type": "string", "required": "yes"]]],
        ] {
            #expect(throws: SkillbusError.self) { try SkillDescriptor(json: bad) }
        }
    }

    @Test("\"default\": null is refused, naming the field; only a default left out means none")
    func nullDefault() throws {
        let field: JSONValue = ["name": "limit", "type": "integer", "required": false, "default": nil]
        #expect {
            try SkillDescriptor(json: ["identifier": "text.top", "parameters": [field]])
        } throws: { error in
            guard let error = error as? SkillbusError else { return false }
            return error.code == .invalidRegistration
                && error.message
                    == "skill 'text.top': default of 'limit' is null, which no type accepts "
                    + "(leave 'default' out for no default)"
        }
        let absent = try SkillDescriptor(json: [
            "identifier": "text.top", "parameters": [["name": "limit", "type": "integer", "required": false]],
        ])
        #expect(absent.parameters.fields.first?.defaultValue == nil)
        #expect(absent.json["parameters"]?.arrayValue?.first?["default"] == nil)
    }
}
