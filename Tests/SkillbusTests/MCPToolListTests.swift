import Foundation
import Testing

@testable import Skillbus

/// Version negotiation and the tool listing of `skillbus mcp`: no sockets.
@Suite("MCP versions and tools")
struct MCPToolListTests {
    @Test(
        "the client's revision when we speak it, else our newest",
        arguments: [
            ("2025-11-25", "2025-11-25"), ("2025-06-18", "2025-06-18"), ("2025-03-26", "2025-03-26"),
            ("2024-11-05", "2024-11-05"), ("2023-01-01", "2025-11-25"), ("2026-07-28", "2025-11-25"),
        ])
    func negotiates(_ asked: String, _ answered: String) {
        #expect(MCPVersion.negotiate(asked) == answered)
    }

    static let writeSkill = SkillDescriptor(
        identifier: "file.write", displayName: "Write file", description: "Writes a file.",
        parameters: ParameterSchema([
            ParameterField("path", .string, description: "Where"),
            ParameterField("mode", .string, required: false, description: "How", default: "replace"),
            ParameterField("value", .any, required: false),
        ]), needsConfirmation: true, idempotent: true)

    @Test("a skill's parameters become JSON Schema 2020-12, its policies the tool's hints")
    func schema() {
        let tool = MCPTool(skill: Self.writeSkill)
        let schema = tool.json["inputSchema"]
        #expect(schema?["$schema"] == "https://json-schema.org/draft/2020-12/schema")
        #expect(schema?["type"] == "object" && schema?["additionalProperties"] == false)
        #expect(schema?["required"] == ["path"])
        #expect(schema?["properties"]?["path"] == ["type": "string", "description": "Where"])
        #expect(schema?["properties"]?["mode"] == ["type": "string", "description": "How", "default": "replace"])
        #expect(schema?["properties"]?["value"]?["type"] == ["string", "number", "boolean", "array", "object"])
        #expect(tool.json["annotations"]?["destructiveHint"] == true)
        #expect(tool.json["annotations"]?["idempotentHint"] == true)
        #expect(tool.json["annotations"]?["readOnlyHint"] == false)
        let pure = MCPTool(
            skill: SkillDescriptor(
                identifier: "p", displayName: "P", description: "", parameters: ParameterSchema([]), pure: true))
        #expect(
            pure.json["annotations"]?["readOnlyHint"] == true && pure.json["annotations"]?["destructiveHint"] == false)
        #expect(pure.json["inputSchema"]?["required"] == [] && pure.json["inputSchema"]?["properties"] == [:])
    }

    static func registry(skills: [String], plannerAgents: [String] = []) -> Registry {
        var agents = [
            Registry.Agent(
                name: "worker", capacity: 1,
                skills: skills.map {
                    SkillDescriptor(identifier: $0, displayName: $0, description: "", parameters: ParameterSchema([]))
                })
        ]
        for name in plannerAgents {
            agents.append(
                Registry.Agent(
                    name: name, capacity: 1, skills: [], profile: AgentProfile(planner: true, role: "helper")))
        }
        return Registry(agents: agents)
    }

    @Test("skills and agents with planners, in name order; an agent is asked through ask.<name>")
    func listing() throws {
        let list = MCPToolList(Self.registry(skills: ["zeta", "echo", "ask.bob"], plannerAgents: ["ann", "bob"]))
        #expect(list.tools.map(\.name) == ["ask.ann", "ask.bob", "echo", "zeta"])
        #expect(list.tool(named: "ask.ann")?.target == .agent("ann"))
        // A skill of the very name wins over the agent.
        guard case .skill = list.tool(named: "ask.bob")?.target else { throw JSONRPCError.internalError("not the skill") }
        #expect(list.tool(named: "ask.ann")?.json["inputSchema"]?["required"] == ["message"])
        // A call looks its tool up directly, and finds what the listing shows.
        let registry = Self.registry(skills: ["zeta", "echo", "ask.bob"], plannerAgents: ["ann", "bob"])
        for name in ["ask.ann", "ask.bob", "echo", "zeta", "ask.worker", "nope"] {
            #expect(MCPToolList.tool(named: name, in: registry) == list.tool(named: name), "\(name)")
        }
    }

    @Test("pages follow each other without gaps or repeats, even when the registry changes between them")
    func pages() throws {
        let names = (0..<7).map { "s\($0)" }
        let list = MCPToolList(Self.registry(skills: names))
        var seen: [String] = []
        var cursor: String?
        repeat {
            let page = try list.page(after: cursor, size: 3)
            seen += page.tools.map(\.name)
            cursor = page.next
        } while cursor != nil
        #expect(seen == names)
        let first = try list.page(after: nil, size: 3)
        let changed = MCPToolList(Self.registry(skills: ["s0", "s1", "s4", "s5", "s6", "s2b"]))
        #expect(try changed.page(after: first.next, size: 10).tools.map(\.name) == ["s2b", "s4", "s5", "s6"])
        #expect(throws: JSONRPCError.self) { try list.page(after: "garbage!", size: 3) }
    }

    @Test("an error reads as its code and message, with each parameter problem on a line of its own")
    func describesErrors() {
        let listed = SkillbusError(
            .invalidParameters, "invalid parameters for 'echo': missing 'text'; unknown 'txt'",
            details: ["missing 'text'", "unknown 'txt'"])
        #expect(
            MCPCallResult.describe(listed)
                == "invalid_parameters: invalid parameters for 'echo'\n- missing 'text'\n- unknown 'txt'")
        #expect(MCPCallResult.describe(SkillbusError(.timeout, "too slow")) == "timeout: too slow")
    }

    @Test("identical calls within the window share a round; after it, or once forgotten, they do not")
    func reuse() {
        var reuse = MCPRoundReuse(window: .seconds(10))
        var made = 0
        let fresh = { () -> String in
            made += 1
            return "r\(made)"
        }
        let start = ContinuousClock.now
        let key = MCPRoundReuse.key(tool: "echo", arguments: ["text": "hi", "n": 1.0])
        #expect(key == MCPRoundReuse.key(tool: "echo", arguments: ["n": 1, "text": "hi"]))
        #expect(reuse.round(for: key, now: start, fresh: fresh) == ("r1", false))
        #expect(reuse.round(for: key, now: start + .seconds(9), fresh: fresh) == ("r1", true))
        #expect(reuse.round(for: "other", now: start + .seconds(9), fresh: fresh) == ("r2", false))
        #expect(reuse.round(for: key, now: start + .seconds(11), fresh: fresh) == ("r3", false))
        reuse.forget(key, round: "r3")
        #expect(reuse.round(for: key, now: start + .seconds(12), fresh: fresh) == ("r4", false))
        var never = MCPRoundReuse(window: .zero)
        #expect(never.round(for: key, now: start, fresh: fresh).reused == false)
        #expect(never.round(for: key, now: start, fresh: fresh).reused == false)
    }
}
