import Foundation
import Skillbus
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
func freeEndpoints(_ count: Int, context: ZMQContext) throws -> [String] {
    var sockets: [ZMQSocket] = []
    defer { for socket in sockets { socket.close() } }
    for _ in 0..<count {
        let socket = try ZMQSocket(context: context, type: .router)
        try socket.bind("tcp://127.0.0.1:*")
        sockets.append(socket)
    }
    return sockets.map(\.lastEndpoint)
}
