import Foundation
import Testing

@testable import Skillbus

/// How an MCP tool becomes a skill (docs/MCP.md, "MCP servers as skills"): schema, annotations, results,
/// errors; and how a worker config declares the servers.
@Suite("MCP tools as skills")
struct MCPListedToolTests {
    func tool(_ schema: JSONValue, annotations: JSONValue = [:], name: String = "t") throws -> MCPListedTool {
        try MCPListedTool(json: [
            "name": .string(name), "description": "d", "inputSchema": schema, "annotations": annotations,
        ])
    }

    @Test("the schema keeps types, required, descriptions and defaults; anything richer becomes any")
    func schema() throws {
        let converted = try tool([
            "type": "object",
            "properties": [
                "text": ["type": "string", "description": "what to say", "enum": ["a", "b"]],
                "count": ["type": "integer", "default": 3, "minimum": 1],
                "ratio": ["type": "number", "title": "Ratio"],
                "flags": ["type": "array", "items": ["type": "string"]],
                "maybe": ["anyOf": [["type": "integer"], ["type": "null"]], "default": .null],
                "either": ["type": ["string", "number"]],
                "wrong": ["type": "boolean", "default": "yes"],
                "shape": ["type": "object"],
            ],
            "required": ["text", "flags"],
        ]).parameterSchema()
        #expect(
            converted.fields == [
                ParameterField("count", .integer, required: false, default: 3),
                ParameterField("either", .any, required: false),
                ParameterField("flags", .array),
                ParameterField("maybe", .any, required: false),
                ParameterField("ratio", .number, required: false, description: "Ratio"),
                ParameterField("shape", .object, required: false),
                ParameterField("text", .string, description: "what to say"),
                ParameterField("wrong", .boolean, required: false),
            ])
        #expect(try tool(["type": "object"]).parameterSchema().fields.isEmpty)
        #expect(throws: SkillbusError.self) { try tool(["type": "array"]).parameterSchema() }
    }

    @Test("annotations: idempotentHint → idempotent; readOnlyHint → pure only when trusted")
    func annotations() throws {
        let both = try tool(["type": "object"], annotations: ["readOnlyHint": true, "idempotentHint": true])
        let trusted = try both.descriptor(server: "fs", trusted: true, timeoutMs: 5000)
        #expect(trusted.identifier == "fs.t" && trusted.pure && trusted.idempotent && trusted.defaultTimeoutMs == 5000)
        #expect(trusted.metadata["mcp"]?["tool"] == "t")
        let untrusted = try both.descriptor(server: "fs", trusted: false, timeoutMs: nil, cacheMs: 1000)
        #expect(!untrusted.pure && untrusted.idempotent && untrusted.cacheMs == nil)
        #expect(try both.descriptor(server: "fs", trusted: true, timeoutMs: nil, cacheMs: 1000).cacheMs == 1000)
        let plain = try tool(["type": "object"], annotations: ["destructiveHint": true]).descriptor(
            server: "fs", trusted: true, timeoutMs: nil)
        #expect(!plain.pure && !plain.idempotent && !plain.needsConfirmation)
        // A tool whose name makes no skill identifier is refused, naming it.
        #expect(throws: SkillbusError.self) {
            try tool(["type": "object"], name: "has space").descriptor(server: "fs", trusted: false, timeoutMs: nil)
        }
    }

    @Test("results: structured → JSON, text → text, one image → attachment, a mix → its content as JSON")
    func results() throws {
        #expect(
            try MCPListedTool.result(
                of: ["content": [["type": "text", "text": "a"], ["type": "text", "text": "b"]]], skill: "s")
                == .text("a\nb"))
        #expect(
            try MCPListedTool.result(
                of: ["content": [["type": "text", "text": "{}"]], "structuredContent": ["n": 1]], skill: "s")
                == .json(["n": 1]))
        #expect(try MCPListedTool.result(of: ["structuredContent": ["n": 1]], skill: "s") == .json(["n": 1]))
        #expect(try MCPListedTool.result(of: ["content": []], skill: "s") == .text(""))
        let image: JSONValue = ["type": "image", "mimeType": "image/png", "data": "iVBO"]
        #expect(
            try MCPListedTool.result(of: ["content": [image]], skill: "s")
                == .attachment(.init(name: "s.image", mediaType: "image/png", bytes: [0x89, 0x50, 0x4E])))
        let mix: JSONValue = [["type": "text", "text": "see"], image]
        #expect(try MCPListedTool.result(of: ["content": mix], skill: "s") == .json(["content": mix]))
    }

    @Test("isError is skill_failed with the server's text; a malformed answer is a clear failure")
    func errors() {
        #expect {
            try MCPListedTool.result(
                of: ["isError": true, "content": [["type": "text", "text": "disk on fire"]]], skill: "s")
        } throws: { error in
            (error as? SkillbusError).map { $0.code == .skillFailed && $0.message == "disk on fire" } ?? false
        }
        for garbage: JSONValue in ["text", ["content": "x"], [:]] {
            #expect {
                try MCPListedTool.result(of: garbage, skill: "fs.t")
            } throws: { error in
                (error as? SkillbusError).map { $0.code == .skillFailed && $0.message.contains("no tool result") }
                    ?? false
            }
        }
    }

    @Test("progress as a line of output: the message, else how far")
    func progressText() {
        #expect(MCPToolSkill.text(of: .init(progress: 1, total: 4, message: "copying")) == "copying")
        #expect(MCPToolSkill.text(of: .init(progress: 1, total: 4, message: nil)) == "progress 1/4")
        #expect(MCPToolSkill.text(of: .init(progress: 0.5, total: nil, message: "")) == "progress 0.5")
    }

    func load(_ servers: JSONValue) throws -> WorkerConfiguration {
        let path = NSTemporaryDirectory() + "skillbus-mcp-\(UUID().uuidString.prefix(8)).json"
        try Data(JSONValue.object(["version": 1, "name": "w", "mcpServers": servers]).serialized())
            .write(to: URL(fileURLWithPath: path))
        defer { try? FileManager.default.removeItem(atPath: path) }
        return try WorkerConfiguration.load(path: path)
    }

    @Test("mcpServers: a command or a URL, read back as written")
    func config() throws {
        let servers: JSONValue = [
            [
                "name": "files", "command": "npx", "args": ["-y", "server-fs"], "env": ["ROOT": "/tmp"],
                "trusted": true, "cacheMs": 60000,
            ],
            ["name": "remote", "url": "https://mcp.example/mcp", "bearerTokenEnv": "REMOTE_TOKEN", "timeoutMs": 9000],
        ]
        let worker = try load(servers)
        #expect(
            worker.mcpServers == [
                MCPServerSpec(
                    name: "files",
                    connection: .stdio(command: "npx", arguments: ["-y", "server-fs"], environment: ["ROOT": "/tmp"]),
                    trusted: true, cacheMs: 60000),
                MCPServerSpec(
                    name: "remote",
                    connection: .http(url: "https://mcp.example/mcp", bearerTokenEnvironment: "REMOTE_TOKEN"),
                    timeoutMs: 9000),
            ])
        #expect(worker.json["mcpServers"] == servers)
    }

    @Test(
        "a bad entry is a config error naming the entry and the key",
        arguments: [
            (["name": "x"], "mcpServers[0].command: missing"),
            (["command": "x"], "mcpServers[0].name: missing"),
            (["name": "a.b", "command": "x"], "mcpServers[0].name: 'a.b' is no server name"),
            (["name": "x", "command": "x", "url": "http://h"], "mcpServers[0].url: give either"),
            (["name": "x", "url": "ftp://h"], "mcpServers[0].url: expected an http"),
            (
                ["name": "x", "command": "x", "bearerTokenEnv": "T"],
                "mcpServers[0].bearerTokenEnv: only a server with a 'url'"
            ),
            (["name": "x", "url": "http://h", "args": []], "mcpServers[0].args: only a server with a 'command'"),
            (["name": "x", "command": "x", "env": ["A": 1]], "mcpServers[0].env.A: expected a string"),
            (["name": "x", "command": "x", "colour": "red"], "mcpServers[0].colour: unknown key"),
            (["name": "x", "command": "x", "cacheMs": 1000], "mcpServers[0].cacheMs: needs \"trusted\": true"),
        ] as [(JSONValue, String)])
    func refused(entry: JSONValue, words: String) {
        #expect {
            try load([entry])
        } throws: { error in
            (error as? SkillbusError).map { $0.code == .invalidConfiguration && $0.message.contains(words) } ?? false
        }
    }

    @Test("two servers with one name are refused")
    func duplicate() {
        #expect(throws: SkillbusError.self) {
            try load([["name": "x", "command": "a"], ["name": "x", "url": "http://h"]])
        }
    }
}
