import Testing

@testable import Skillbus

/// The quick reader of canonical invoke, fan-out and plan bodies must read a body exactly as the general reader
/// does (spec, canonical body, parameters as sent), or leave it to that reader.
@Suite("Canonical invoke, fan-out and plan bodies")
struct CanonicalRoundBodyTests {
    /// What the general path makes of a body: nil when it is no plain invoke, fan-out to all agents or plan of
    /// skill steps (another shape, a list of agents, an ask step, or with retries, priority or noCache, which the
    /// quick reader never takes).
    static func general(_ body: [UInt8]) -> (RoundSpec, [UInt8], SentParameters)? {
        guard let json = try? JSONValue(parsing: body), let spec = try? RoundSpec(json: json, stepLimit: 10),
            (try? RoundSpec.retries(in: json)) == nil, (try? RoundSpec.priority(in: json)) == .normal,
            (try? RoundSpec.noCache(in: json)) == false
        else { return nil }
        switch spec {
        case .invoke(_, let parameters), .fanout(_, let parameters, nil, _):
            return (spec, spec.canonicalForm.body, .shared(parameters.serialized()))
        case .plan(let steps, _) where steps.allSatisfy({ $0.ask == nil }):
            return (spec, spec.canonicalForm.body, .steps(steps.map { $0.parameters.serialized() }))
        default:
            return nil
        }
    }

    @Test(
        "takes canonical invoke and fan-out bodies and reads them as the general path does",
        arguments: [
            #"{"invoke":{"params":{"text":"x"},"skill":"echo"}}"#,
            #"{"invoke":{"params":{},"skill":"a.b-c_9"}}"#,
            #"{"invoke":{"params":{"a":[1,{"b":null}],"c":"d"},"skill":"echo"}}"#,
            #"{"invoke":{"params":{"skill":"x","text":"日本"},"skill":"echo"}}"#,
            #"{"fanout":{"agents":"all","aggregate":"all","params":{"text":"x"},"skill":"echo"}}"#,
            #"{"fanout":{"agents":"all","aggregate":"first","params":{"a":[1,{"b":null}]},"skill":"a.b-c_9"}}"#,
            #"{"fanout":{"agents":"all","aggregate":"majority","params":{},"skill":"echo"}}"#,
            #"{"plan":{"onFailure":"stop","steps":[{"after":[],"id":"a","params":{"text":"x"},"skill":"echo"}]}}"#,
            #"{"plan":{"onFailure":"continue","steps":[{"after":[],"id":"a","params":{},"skill":"echo"},"#
                + #"{"after":["a"],"id":"b","params":{"n":[1,{"m":null}],"t":{"$ref":"a.result"}},"skill":"x.y"},"#
                + #"{"after":["a","b"],"id":"日本","params":{"text":"]}"},"skill":"echo"}]}}"#,
        ])
    func taken(_ text: String) throws {
        let body = Array(text.utf8)
        let quick = try #require(CanonicalRoundBody(body, stepLimit: 10))
        let (spec, canonical, parameters) = try #require(Self.general(body))
        #expect(quick.spec == spec)
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
            // A fan-out that names its agents, an aggregate no fan-out has, members the quick reader does not read.
            #"{"fanout":{"agents":["a"],"aggregate":"all","params":{"text":"x"},"skill":"echo"}}"#,
            #"{"fanout":{"agents":"all","aggregate":"some","params":{"text":"x"},"skill":"echo"}}"#,
            #"{"fanout":{"agents":"all","aggregate":"all","params":{"text":"x"},"retries":1,"skill":"echo"}}"#,
            #"{"fanout":{"agents":"all","aggregate":"all","noCache":true,"params":{},"skill":"echo"}}"#,
            #"{"fanout":{"aggregate":"all","params":{"text":"x"},"skill":"echo"}}"#,
            #"{"fanout":{"agents":"all","aggregate":"all","params":{"t":{"$ref":"a.result"}},"skill":"echo"}}"#,
            // Broken: no skill identifier, params no object, duplicate keys, not JSON.
            #"{"invoke":{"params":{"text":"x"},"skill":"ec ho"}}"#,
            #"{"invoke":{"params":{"text":"x"},"skill":""}}"#,
            #"{"invoke":{"params":[1],"skill":"echo"}}"#,
            #"{"invoke":{"params":{"a":1,"a":2},"skill":"echo"}}"#,
            #"{"invoke":{"params":{"text":"x"},"skill":"echo"},"skill":"echo"}}"#,
            #"{"invoke":{"params":{"text":"x","skill":"echo"}}"#,
            #"{"invoke":{"params":,"skill":"echo"}}"#,
            "",
            // Plans: an ask step, a step without after, members the quick reader does not read, no steps, a step
            // that is no object; problems the general reader names (a duplicate id, a dependency on no step, a
            // cycle, no skill identifier, params no object); more steps than the limit of 2 the test passes.
            #"{"plan":{"onFailure":"stop","steps":[{"after":[],"ask":{"agent":"a","message":"m"},"id":"a"}]}}"#,
            #"{"plan":{"onFailure":"stop","steps":[{"id":"a","params":{},"skill":"echo"}]}}"#,
            #"{"plan":{"onFailure":"stop","retries":1,"steps":[{"after":[],"id":"a","params":{},"skill":"echo"}]}}"#,
            #"{"plan":{"onFailure":"stop","steps":[{"after":[],"id":"a","params":{},"retries":1,"skill":"echo"}]}}"#,
            #"{"plan":{"onFailure":"stop","steps":[]}}"#,
            #"{"plan":{"onFailure":"stop","steps":[1]}}"#,
            #"{"plan":{"onFailure":"stop","steps":[{"after":[],"id":"a","params":{},"skill":"echo"},"#
                + #"{"after":[],"id":"a","params":{},"skill":"echo"}]}}"#,
            #"{"plan":{"onFailure":"stop","steps":[{"after":["z"],"id":"a","params":{},"skill":"echo"}]}}"#,
            #"{"plan":{"onFailure":"stop","steps":[{"after":["b"],"id":"a","params":{},"skill":"echo"},"#
                + #"{"after":["a"],"id":"b","params":{},"skill":"echo"}]}}"#,
            #"{"plan":{"onFailure":"stop","steps":[{"after":[],"id":"a","params":{},"skill":"e o"}]}}"#,
            #"{"plan":{"onFailure":"stop","steps":[{"after":[],"id":"a","params":[],"skill":"echo"}]}}"#,
            #"{"plan":{"onFailure":"stop","steps":[{"after":[],"id":"","params":{},"skill":"echo"}]}}"#,
            #"{"plan":{"onFailure":"stop","steps":[{"after":[],"id":"a","params":{},"skill":"echo"},"#
                + #"{"after":[],"id":"b","params":{},"skill":"echo"},"#
                + #"{"after":[],"id":"c","params":{},"skill":"echo"}]}}"#,
            #"{"plan":{"onFailure":"stop","steps":[{"after":[],"id":"a","params":{},"skill":"echo"}]}} "#,
            #"{"plan":{"onFailure":"maybe","steps":[{"after":[],"id":"a","params":{},"skill":"echo"}]}}"#,
        ])
    func left(_ text: String) {
        #expect(CanonicalRoundBody(Array(text.utf8), stepLimit: 2) == nil)
    }
}
