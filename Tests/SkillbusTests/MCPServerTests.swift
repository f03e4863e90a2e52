import Foundation
import Synchronization
import Testing

@testable import Skillbus

/// A bus for the MCP server without sockets: a registry the test sets, skills answered by a closure.
final class FakeMCPBus: MCPBus {
    typealias Skill =
        @Sendable (_ arguments: JSONValue, _ onOutput: @Sendable (OutputBatch) -> Void) async throws(SkillbusError) ->
        SkillResult
    struct State {
        var registry = Registry()
        var watchers: [AsyncStream<Registry>.Continuation] = []
        var rounds: [String] = []
        var confirm: (@Sendable (Skillbus.Confirmation) async -> Bool?)?
        var next = 0
    }
    let state = Mutex(State())
    let skills: [String: Skill]

    init(skills: [String: Skill], registry: Registry) {
        self.skills = skills
        state.withLock { $0.registry = registry }
    }

    var registry: Registry { state.withLock { $0.registry } }
    var rounds: [String] { state.withLock { $0.rounds } }

    func set(_ registry: Registry) {
        for watcher in state.withLock({ state in
            state.registry = registry
            return state.watchers
        }) { watcher.yield(registry) }
    }

    func changes() -> AsyncStream<Registry> {
        let (stream, continuation) = AsyncStream.makeStream(of: Registry.self)
        continuation.yield(
            state.withLock { state in
                state.watchers.append(continuation)
                return state.registry
            })
        return stream
    }

    func makeRequestID() -> String {
        state.withLock { state in
            state.next += 1
            return "q\(state.next)"
        }
    }

    func run(
        skill: String, arguments: JSONValue, roundID: String, sessionID: String, requestID: String, timeout: Duration?,
        onOutput: @escaping @Sendable (OutputBatch) -> Void
    ) async throws(SkillbusError) -> RoundDocument {
        state.withLock { $0.rounds.append(roundID) }
        if skill == "file.write" {
            let decide = state.withLock { $0.confirm }
            let approved =
                await decide?(Skillbus.Confirmation(requestID: requestID, skill: skill, parameters: arguments)) ?? nil
                ?? false
            guard approved else {
                return .refusal(round: roundID, shape: "invoke", SkillbusError(.confirmationRequired, "not approved"))
            }
        }
        do throws(SkillbusError) {
            guard let run = skills[skill] else { throw SkillbusError(.unknownSkill, "no \(skill)") }
            let result = try await run(arguments, onOutput)
            return RoundDocument(round: roundID, shape: "invoke", status: .ok, result: result.json, agent: "fake")
        } catch {
            return .refusal(round: roundID, shape: "invoke", error)
        }
    }

    func ask(
        agent: String, message: String, roundID: String, sessionID: String, requestID: String, timeout: Duration,
        onPiece: @escaping @Sendable (String) -> Void
    ) async throws(SkillbusError) -> JSONValue {
        onPiece("\(agent) heard: ")
        onPiece(message)
        return ["agent": .string(agent), "reply": .string("\(agent) heard: \(message)")]
    }

    func addConfirmer(_ key: String, _ decide: @escaping @Sendable (Skillbus.Confirmation) async -> Bool?) {
        state.withLock { $0.confirm = decide }
    }

    func removeConfirmer(_ key: String) { state.withLock { $0.confirm = nil } }
}

/// What the server sent, awaited with a deadline.
final class SentMessages: Sendable {
    private let messages = Mutex<[JSONRPCMessage]>([])
    var all: [JSONRPCMessage] { messages.withLock { $0 } }
    var output: MCPServer.Output { { message in self.messages.withLock { $0.append(message) } } }

    func first(_ what: String, where matches: (JSONRPCMessage) -> Bool) async throws -> JSONRPCMessage {
        if await eventually(within: .seconds(5), { all.contains(where: matches) }),
            let found = all.first(where: matches)
        {
            return found
        }
        throw JSONRPCError.internalError("timed out waiting for \(what); sent: \(all.map(\.json.jsonString))")
    }

    func answer(_ id: JSONRPCID?) async throws -> JSONRPCMessage {
        try await first("the answer to \(id?.description ?? "null")") { message in
            switch message {
            case .result, .error: message.id == id
            default: false
            }
        }
    }
}

@Suite("The MCP server's sessions, with a bus of its own")
struct MCPServerTests {
    static let echo = SkillDescriptor(
        identifier: "echo", displayName: "Echo", description: "",
        parameters: ParameterSchema([ParameterField("text", .string)]))
    static func named(_ identifier: String) -> SkillDescriptor {
        SkillDescriptor(
            identifier: identifier, displayName: identifier, description: "", parameters: ParameterSchema([]))
    }
    static let registry = Registry(agents: [
        Registry.Agent(
            name: "w", capacity: 4,
            skills: [echo, named("stats"), named("lines"), named("slow"), named("file.write"), named("fails")]),
        Registry.Agent(name: "ann", capacity: 1, skills: [], profile: AgentProfile(planner: true)),
    ])

    static let skills: [String: FakeMCPBus.Skill] = [
        "echo": { arguments, _ throws(SkillbusError) in .text(arguments["text"]?.stringValue ?? "") },
        "stats": { _, _ throws(SkillbusError) in .json(["words": 2]) },
        "lines": { _, onOutput throws(SkillbusError) in
            onOutput(OutputBatch(first: 0, parts: [.text("one"), .text("two")]))
            onOutput(OutputBatch(first: 2, parts: [.text("three")]))
            return .json(["lines": 3])
        },
        "slow": { _, _ throws(SkillbusError) in
            do { try await Task.sleep(for: .seconds(30)) } catch { throw SkillbusError(.cancelled, "cancelled") }
            return .text("late")
        },
        "fails": { _, _ throws(SkillbusError) in
            throw SkillbusError(
                .invalidParameters, "invalid parameters for 'fails': two problems",
                details: ["missing 'a'", "unknown 'b'"])
        },
        "file.write": { _, _ throws(SkillbusError) in .text("written") },
    ]

    /// A server on a fake bus, initialized as `capabilities` says.
    func session(capabilities: JSONValue = [:], window: Duration = .seconds(30)) async throws
        -> (MCPServer, FakeMCPBus, SentMessages)
    {
        let bus = FakeMCPBus(skills: Self.skills, registry: Self.registry)
        let sent = SentMessages()
        var settings = MCPServer.Settings()
        settings.reuseWindow = window
        settings.pageSize = 3
        let server = MCPServer(bus: bus, settings: settings, general: sent.output)
        server.receive(
            .request(
                id: 0, method: "initialize", params: ["protocolVersion": "2025-06-18", "capabilities": capabilities]),
            output: sent.output)
        guard case .result(_, let result) = try await sent.answer(0) else { throw JSONRPCError.internalError("no init") }
        #expect(result["protocolVersion"] == "2025-06-18" && result["capabilities"]?["tools"]?["listChanged"] == true)
        return (server, bus, sent)
    }

    func call(_ server: MCPServer, _ sent: SentMessages, id: JSONRPCID, _ params: JSONValue) async throws -> JSONRPCMessage
    {
        server.receive(.request(id: id, method: "tools/call", params: params), output: sent.output)
        return try await sent.answer(id)
    }

    @Test("before initialize only ping is answered; unknown methods and bad params are errors, and it goes on")
    func protocolErrors() async throws {
        let bus = FakeMCPBus(skills: [:], registry: Self.registry)
        let sent = SentMessages()
        let server = MCPServer(bus: bus, general: sent.output)
        server.receive(Array(#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#.utf8), output: sent.output)
        server.receive(Array(#"{"jsonrpc":"2.0","id":2,"method":"ping"}"#.utf8), output: sent.output)
        server.receive(Array("{garbage".utf8), output: sent.output)
        server.receive(Array(#"{"jsonrpc":"2.0","id":3,"method":"initialize","params":{}}"#.utf8), output: sent.output)
        #expect(
            try await sent.answer(1)
                == .error(id: 1, .invalidRequest("this session is not initialized: send 'initialize' first")))
        #expect(try await sent.answer(2) == .result(id: 2, result: [:]))
        guard case .error(_, let parse) = try await sent.answer(nil),
            case .error(_, let params) = try await sent.answer(3)
        else { throw JSONRPCError.internalError("no errors") }
        #expect(parse.code == -32700 && params.code == -32602)
    }

    @Test("tools/list pages through skills and agents; tools/call of an unknown tool or bad arguments is refused")
    func listsAndRefuses() async throws {
        let (server, _, sent) = try await session()
        server.receive(.request(id: 1, method: "tools/list", params: nil), output: sent.output)
        guard case .result(_, let page) = try await sent.answer(1), let cursor = page["nextCursor"]?.stringValue else {
            throw JSONRPCError.internalError("no first page")
        }
        #expect(page["tools"]?.arrayValue?.compactMap { $0["name"]?.stringValue } == ["ask.ann", "echo", "fails"])
        server.receive(.request(id: 2, method: "tools/list", params: ["cursor": .string(cursor)]), output: sent.output)
        guard case .result(_, let second) = try await sent.answer(2) else { throw JSONRPCError.internalError("no page 2") }
        #expect(second["tools"]?.arrayValue?.compactMap { $0["name"]?.stringValue } == ["file.write", "lines", "slow"])
        let unknown = try await call(server, sent, id: 3, ["name": "nope"])
        guard case .error(_, let error) = unknown else { throw JSONRPCError.internalError("answered") }
        #expect(error.code == -32602 && error.message.contains("unknown tool 'nope'"))
        guard case .error(_, let bad) = try await call(server, sent, id: 4, ["name": "echo", "arguments": [1]]) else {
            throw JSONRPCError.internalError("answered")
        }
        #expect(bad.code == -32602)
        server.receive(.request(id: 5, method: "resources/list", params: nil), output: sent.output)
        guard case .error(_, let missing) = try await sent.answer(5) else { throw JSONRPCError.internalError("answered") }
        #expect(missing.code == -32601)
    }

    @Test("text, JSON and errors come back as content, structuredContent and isError with the problems listed")
    func results() async throws {
        let (server, _, sent) = try await session()
        guard
            case .result(_, let text) = try await call(
                server, sent, id: 1, ["name": "echo", "arguments": ["text": "hi"]])
        else { throw JSONRPCError.internalError("no text") }
        #expect(text["content"] == [["type": "text", "text": "hi"]] && text["isError"] == false)
        #expect(text["_meta"]?["skillbus/round"]?.stringValue?.isEmpty == false)
        guard case .result(_, let json) = try await call(server, sent, id: 2, ["name": "stats"]) else {
            throw JSONRPCError.internalError("no json")
        }
        #expect(
            json["structuredContent"] == ["words": 2] && json["content"] == [["type": "text", "text": #"{"words":2}"#]])
        guard case .result(_, let failed) = try await call(server, sent, id: 3, ["name": "fails"]) else {
            throw JSONRPCError.internalError("no error")
        }
        #expect(failed["isError"] == true && failed["_meta"]?["skillbus/error"]?["code"] == "invalid_parameters")
        #expect(
            failed["content"]?.arrayValue?.first?["text"]
                == "invalid_parameters: invalid parameters for 'fails': two problems\n- missing 'a'\n- unknown 'b'")
        guard
            case .result(_, let asked) = try await call(
                server, sent, id: 4, ["name": "ask.ann", "arguments": ["message": "hello"]])
        else { throw JSONRPCError.internalError("no turn") }
        #expect(asked["content"] == [["type": "text", "text": "ann heard: hello"]])
    }

    @Test("partial output becomes progress for a client that sent a token, and only then")
    func progress() async throws {
        let (server, _, sent) = try await session()
        _ = try await call(server, sent, id: 1, ["name": "lines", "_meta": ["progressToken": "p1"]])
        let progress = sent.all.compactMap { message -> JSONValue? in
            guard case .notification("notifications/progress", let params) = message else { return nil }
            return params
        }
        #expect(
            progress == [
                ["progressToken": "p1", "progress": 2, "message": "one\ntwo"],
                ["progressToken": "p1", "progress": 3, "message": "three"],
            ])
        _ = try await call(server, sent, id: 2, ["name": "lines", "arguments": ["again": true]])
        #expect(sent.all.filter { if case .notification = $0 { true } else { false } }.count == 2)
        // An agent's reply streams as progress too, piece by piece.
        _ = try await call(
            server, sent, id: 3, ["name": "ask.ann", "arguments": ["message": "hi"], "_meta": ["progressToken": 9]])
        let pieces = sent.all.compactMap { message -> JSONValue? in
            guard case .notification("notifications/progress", let params) = message, params?["progressToken"] == 9
            else { return nil }
            return params
        }
        #expect(
            pieces == [
                ["progressToken": 9, "progress": 1, "message": "ann heard: "],
                ["progressToken": 9, "progress": 2, "message": "hi"],
            ])
    }

    @Test("a cancelled call stops, is answered never, and its round is not reused")
    func cancel() async throws {
        let (server, bus, sent) = try await session()
        server.receive(.request(id: 1, method: "tools/call", params: ["name": "slow"]), output: sent.output)
        try await waitFor("the call to start") { bus.rounds.count == 1 }
        server.receive(.notification(method: "notifications/cancelled", params: ["requestId": 1]), output: sent.output)
        try await waitFor("the call to end") { server.callsInFlight == 0 }
        #expect(!sent.all.contains { if case .result(1, _) = $0 { true } else { false } })
        server.receive(.request(id: 2, method: "tools/call", params: ["name": "slow"]), output: sent.output)
        try await waitFor("the second call to start") { bus.rounds.count == 2 }
        #expect(bus.rounds[0] != bus.rounds[1])
        server.close()
        try await waitFor("close to end it") { server.callsInFlight == 0 }
    }

    @Test("an identical call within the window, or one naming the round, runs in the same round")
    func sharesRounds() async throws {
        let (server, bus, sent) = try await session()
        _ = try await call(server, sent, id: 1, ["name": "echo", "arguments": ["text": "once"]])
        _ = try await call(server, sent, id: 2, ["name": "echo", "arguments": ["text": "once"]])
        _ = try await call(server, sent, id: 3, ["name": "echo", "arguments": ["text": "other"]])
        _ = try await call(
            server, sent, id: 4, ["name": "echo", "arguments": ["text": "x"], "_meta": ["skillbus/round": "mine"]])
        #expect(bus.rounds[0] == bus.rounds[1] && bus.rounds[2] != bus.rounds[0] && bus.rounds[3] == "mine")
        let (never, neverBus, neverSent) = try await session(window: .zero)
        _ = try await call(never, neverSent, id: 1, ["name": "echo", "arguments": ["text": "once"]])
        _ = try await call(never, neverSent, id: 2, ["name": "echo", "arguments": ["text": "once"]])
        #expect(neverBus.rounds[0] != neverBus.rounds[1])
    }

    @Test("a skill that needs confirmation asks through elicitation when the client can, else is refused")
    func confirmation() async throws {
        let (plain, _, plainSent) = try await session()
        guard case .result(_, let refused) = try await call(plain, plainSent, id: 1, ["name": "file.write"]) else {
            throw JSONRPCError.internalError("no answer")
        }
        #expect(refused["isError"] == true && refused["_meta"]?["skillbus/error"]?["code"] == "confirmation_required")

        let (server, _, sent) = try await session(capabilities: ["elicitation": [:]])
        server.receive(.request(id: 1, method: "tools/call", params: ["name": "file.write"]), output: sent.output)
        let asked = try await sent.first("elicitation") {
            if case .request(_, "elicitation/create", _) = $0 { true } else { false }
        }
        guard case .request(let askID, _, let params) = asked else { return }
        #expect(params?["message"]?.stringValue?.contains("file.write") == true)
        server.receive(.result(id: askID, result: ["action": "accept", "content": [:]]), output: sent.output)
        guard case .result(_, let written) = try await sent.answer(1) else { throw JSONRPCError.internalError("no answer") }
        #expect(written["content"] == [["type": "text", "text": "written"]])
    }

    @Test("a change of the registry is announced once the session is initialized")
    func listChanged() async throws {
        let (server, bus, sent) = try await session()
        let watch = Task { await server.watchRegistry() }
        defer { watch.cancel() }
        server.receive(.request(id: 1, method: "tools/list", params: nil), output: sent.output)
        _ = try await sent.answer(1)
        var registry = Self.registry
        registry.set("v", to: Registry.Agent(name: "v", capacity: 1, skills: [Self.named("new.skill")]))
        bus.set(registry)
        _ = try await sent.first("list_changed") {
            $0 == .notification(method: "notifications/tools/list_changed", params: nil)
        }
    }

    func waitFor(_ what: String, _ condition: () -> Bool) async throws {
        guard await eventually(within: .seconds(5), condition) else {
            throw JSONRPCError.internalError("timed out waiting for \(what)")
        }
    }
}
