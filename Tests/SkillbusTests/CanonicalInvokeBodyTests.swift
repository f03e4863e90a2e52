import Testing

@testable import Skillbus

/// The quick reader of canonical invoke bodies must read a body exactly as the general reader does (spec,
/// canonical body, parameters as sent), or leave it to that reader.
@Suite("Canonical invoke bodies")
struct CanonicalInvokeBodyTests {
    /// What the general path makes of a body: nil when it is no plain invoke (another shape, or with
    /// retries, priority or noCache, which the quick reader never takes).
    static func general(_ body: [UInt8]) -> (RoundSpec, [UInt8], [UInt8]?)? {
        guard let json = try? JSONValue(parsing: body), let spec = try? RoundSpec(json: json, stepLimit: 10),
            case .invoke = spec
        else { return nil }
        let form = spec.canonicalForm
        return (spec, form.body, form.invokeParameters)
    }

    @Test(
        "takes canonical invoke bodies and reads them as the general path does",
        arguments: [
            #"{"invoke":{"params":{"text":"x"},"skill":"echo"}}"#,
            #"{"invoke":{"params":{},"skill":"a.b-c_9"}}"#,
            #"{"invoke":{"params":{"a":[1,{"b":null}],"c":"d"},"skill":"echo"}}"#,
            #"{"invoke":{"params":{"skill":"x","text":"日本"},"skill":"echo"}}"#,
        ])
    func taken(_ text: String) throws {
        let body = Array(text.utf8)
        let quick = try #require(CanonicalInvokeBody(body))
        let (spec, canonical, parameters) = try #require(Self.general(body))
        #expect(RoundSpec.invoke(skill: quick.skill, parameters: quick.parameters) == spec)
        #expect(body == canonical)
        #expect(quick.parameterBytes == parameters)
    }

    @Test(
        "leaves every other body to the general reader",
        arguments: [
            // Not canonical: spaces, keys out of order, a number spelled otherwise, an escape written otherwise.
            #"{"invoke":{"params":{"text":"x"}, "skill":"echo"}}"#,
            #"{"invoke":{"skill":"echo","params":{"text":"x"}}}"#,
            #"{"invoke":{"params":{"b":1,"a":2},"skill":"echo"}}"#,
            #"{"invoke":{"params":{"n":1.50},"skill":"echo"}}"#,
            #"{"invoke":{"params":{"t":"\u0041"},"skill":"echo"}}"#,
            // Escapes, which the quick reader leaves alone; the key it looks for inside a parameter.
            #"{"invoke":{"params":{"text":",\"skill\":\"x"},"skill":"echo"}}"#,
            // Members the quick reader does not read, and what is no plain invoke.
            #"{"invoke":{"params":{"text":"x"},"retries":2,"skill":"echo"}}"#,
            #"{"invoke":{"noCache":true,"params":{"text":"x"},"skill":"echo"}}"#,
            #"{"invoke":{"params":{"text":"x"},"priority":"high","skill":"echo"}}"#,
            #"{"invoke":{"skill":"echo"}}"#,
            #"{"invoke":{"params":{"p":{"$ref":"a.result"}},"skill":"echo"}}"#,
            #"{"fanout":{"params":{"text":"x"},"skill":"echo"}}"#,
            // Broken: no skill identifier, params no object, duplicate keys, not JSON.
            #"{"invoke":{"params":{"text":"x"},"skill":"ec ho"}}"#,
            #"{"invoke":{"params":{"text":"x"},"skill":""}}"#,
            #"{"invoke":{"params":[1],"skill":"echo"}}"#,
            #"{"invoke":{"params":{"a":1,"a":2},"skill":"echo"}}"#,
            #"{"invoke":{"params":{"text":"x"},"skill":"echo"},"skill":"echo"}}"#,
            #"{"invoke":{"params":{"text":"x","skill":"echo"}}"#,
            #"{"invoke":{"params":,"skill":"echo"}}"#,
            "",
        ])
    func left(_ text: String) {
        #expect(CanonicalInvokeBody(Array(text.utf8)) == nil)
    }
}
