import Foundation
import SkillbusCommands
import Testing

@testable import Skillbus

/// The README's MCP client config is what a user pastes: it must be JSON that `skillbus mcp` takes.
@Suite("README: the MCP client config")
struct MCPReadmeTests {
    @Test("the mcpServers snippet parses, launches skillbus mcp, and its arguments are mcp's own")
    func snippet() throws {
        let text = try String(contentsOf: ReadmeTests.readme, encoding: .utf8)
        let section = try #require(text.components(separatedBy: "## Skillbus in your MCP client").dropFirst().first)
        let block = try #require(section.components(separatedBy: "```json\n").dropFirst().first?
            .components(separatedBy: "```").first)
        let config = try JSONValue(parsing: block)
        let server = try #require(config["mcpServers"]?["skillbus"])
        #expect(server["command"] == "skillbus")
        let strings = server["args"]?.arrayValue?.compactMap { $0.stringValue }
        let arguments = try #require(strings)
        #expect(arguments.first == "mcp")
        let parsed = try MCPCommand.spec.parse(Array(arguments.dropFirst()))
        #expect(parsed.value("--coordinator") == "tcp://127.0.0.1:5555")
    }
}
