import Foundation
import Skillbus
import SkillbusTestSupport
import SkillbusZMQ
import Synchronization
import Testing

/// A skill made up by a test: any identifier, any schema; it answers with its own identifier.
struct MadeUpSkill: AgentSkill {
    let identifier: String
    var fields: [ParameterField] = []
    var displayName: String { identifier }
    var description: String { "made up by a test" }
    var parameterSchema: ParameterSchema { ParameterSchema(fields) }
    func execute(parameters: [String: JSONValue], context: SkillExecutionContext) async throws -> SkillResult {
        .text(identifier)
    }
}

/// Free tcp endpoints on 127.0.0.1, for tests that must know a port before the coordinator binds it
/// (workers started first, a coordinator restarted on the same ports).
func freeEndpoints(_ count: Int) throws -> [String] {
    var bound: [(descriptor: Int32, port: UInt16)] = []
    defer { for socket in bound { close(socket.descriptor) } }
    for _ in 0..<count { bound.append(try bindLoopbackTCPBelowEphemeralRange()) }
    return bound.map { "tcp://127.0.0.1:\($0.port)" }
}
