import Skillbus
import SkillbusCommands

/// The load shapes only the tests and the team's perf tool send (`skillbus bench` sends echo, raw echo, turns and
/// rounds, which ship with `LoadGenerator` itself).
extension LoadGenerator {
    /// `echo` as `skillbusEcho` sends it, but every text different (the request's number, then `x` up to
    /// `payloadBytes`), so that no two rounds share their parameters or their outcome.
    public static func skillbusDistinctEcho(payloadBytes: Int) -> LoadGenerator {
        let filler = String(repeating: "x", count: payloadBytes)
        return skillbus(session: "") { id in
            let number = String(id) + "-"
            let text = number + filler.dropFirst(min(number.count, filler.count))
            return ("echo", JSONValue.object(["text": .string(text)]).serialized())
        }
    }

    /// `memory.set` of a `payloadBytes` text, then `memory.get` of the same key, in turn (over 1,000 keys).
    public static func skillbusMemory(payloadBytes: Int, session: String) -> LoadGenerator {
        let value = JSONValue.string(String(repeating: "x", count: payloadBytes))
        return skillbus(session: session) { id in
            let key = JSONValue.string("k" + String(id / 2 % 1000))
            return id % 2 == 0
                ? ("memory.set", JSONValue.object(["key": key, "value": value]).serialized())
                : ("memory.get", JSONValue.object(["key": key]).serialized())
        }
    }

    /// `echo` REQUESTs whose text ends in a random number: no two are identical (request numbers repeat
    /// from one run to the next), so a cache never hits.
    public static func skillbusUniqueEcho(payloadBytes: Int) -> LoadGenerator {
        let text = String(repeating: "x", count: payloadBytes)
        return skillbus(session: "") { _ in
            ("echo", JSONValue.object(["text": .string(text + String(UInt64.random(in: 0...UInt64.max), radix: 36))]).serialized())
        }
    }

    /// Rounds of one echo invocation; with `priorities`, every other one high and the rest low.
    public static func echoRounds(payloadBytes: Int, priorities: Bool) -> LoadGenerator {
        let spec = try! RoundSpec(
            json: ["invoke": ["skill": "echo", "params": ["text": .string(String(repeating: "x", count: payloadBytes))]]],
            stepLimit: 1)
        let bodies =
            priorities
            ? [spec.body(retries: nil, priority: .high).serialized(), spec.body(retries: nil, priority: .low).serialized()]
            : [spec.json.serialized()]
        return LoadGenerator(
            makeRequest: { id in
                ClientMessage.round(
                    RoundRequest(
                        requestID: String(id), roundID: "bench-" + String(UInt64.random(in: 0...UInt64.max), radix: 36),
                        timeoutMs: 15_000, body: bodies[Int(id % UInt64(bodies.count))])
                ).encoded()
            },
            replyID: { frames in
                guard let message = Wire.busMessageFields(frames), message.count == 5, let id = UInt64(String(decoding: message[2], as: UTF8.self)) else {
                    return nil
                }
                return (id, RoundDocument.saysOK(message[4]))
            })
    }
}
