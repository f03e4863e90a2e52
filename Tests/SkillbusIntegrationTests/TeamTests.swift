import Foundation
import Skillbus
import SkillbusZMQ
import Synchronization
import Testing

/// Teams of agents with real processes (PROTOCOL §3.7.1, §3.7.2): roles, an agent asking another inside its
/// turn, handoffs, and what must never happen (a circle, nesting past the limit, a lost callee stalling the caller).
@Suite("Teams of agents", .serialized, .timeLimit(.minutes(4)))
struct TeamTests {
    static func rule(_ intent: String, _ action: JSONValue, reply: String = "{result}") -> JSONValue {
        var object = action.objectValue ?? [:]
        object["intent"] = .string(intent)
        object["reply"] = .string(reply)
        return .object(object)
    }

    static let lead: JSONValue = [
        "rules": [
            rule("^review (?<text>.+)$", ["skill": "text.stats", "params": ["text": "{text}"]], reply: "{result.words} words"),
            rule("^review (?<text>.+)$", ["ask": "role:critic", "message": "critique {text}"], reply: "critic: {result}"),
            rule("^ping (?<x>.+)$", ["ask": "role:critic", "message": "ping {x}"]),
            rule("^deep (?<x>.+)$", ["ask": "role:critic", "message": "deeper {x}"]),
            rule("^slow$", ["ask": "role:critic", "message": "nap"], reply: "the critic napped: {result}"),
            rule("complain", ["handoff": "role:support", "note": "a complaint"]),
        ]
    ]
    static let critic: JSONValue = [
        "rules": [
            rule("^critique (?<text>.+)$", ["skill": "text.stats", "params": ["text": "{text}"]], reply: "{result.words} words, add an example"),
            // Back to the lead with the very message it was asked: a circle.
            rule("^ping (?<x>.+)$", ["ask": "lead", "message": "ping {x}"]),
            rule("^deeper (?<x>.+)$", ["ask": "role:support", "message": "deepest {x}"]),
            rule("^nap$", ["skill": "sleep", "params": ["ms": 20_000]], reply: "rested"),
        ]
    ]
    static let support: JSONValue = [
        "rules": [
            rule("complain", ["skill": "echo", "params": ["text": "ticket opened"]], reply: "support: {result} ({handoff.from}: {handoff.note})"),
            rule("^deepest (?<x>.+)$", ["skill": "echo", "params": ["text": "{x}"]]),
        ]
    ]

    /// A coordinator (default agent: role lead, nesting at most `depth` deep) and lead, two critics and support.
    func cluster(depth: Int = 4, critics: [String] = ["critic"]) async throws -> TestCluster {
        let coordinator = try Self.file(["version": 1, "defaultAgent": "role:lead", "delegationDepthLimit": .number(Double(depth))])
        let cluster = try await TestCluster(coordinatorArguments: ["--config", coordinator])
        func start(_ name: String, role: String, skills: [String], planner: JSONValue) async throws {
            let config = try Self.file([
                "version": 1, "name": .string(name), "role": .string(role), "description": .string("the \(role)"),
                "skills": .array(skills.map { .string($0) }), "planner": planner,
            ])
            try await cluster.startWorker(name, ["--config", config])
        }
        try await start("lead", role: "lead", skills: ["text.stats"], planner: Self.lead)
        for name in critics { try await start(name, role: "critic", skills: ["text.stats", "sleep"], planner: Self.critic) }
        try await start("support", role: "support", skills: ["echo"], planner: Self.support)
        return cluster
    }

    static func file(_ json: JSONValue) throws -> String {
        let path = NSTemporaryDirectory() + "skillbus-team-\(UUID().uuidString.prefix(8)).json"
        try Data(json.serialized()).write(to: URL(fileURLWithPath: path))
        return path
    }

    /// Every call of a turn document and of the turns nested in it.
    static func allCalls(_ document: JSONValue) -> [JSONValue] {
        (document["calls"]?.arrayValue ?? []).flatMap { call in [call] + allCalls(call["turn"] ?? .null) }
    }

    @Test("delegation: the callee answers with its own context, its identical call dedups against the caller's")
    func delegation() async throws {
        let cluster = try await cluster()
        defer { cluster.terminate() }
        let client = try await SkillbusClient.connect(endpoint: cluster.bus, context: try ZMQContext())
        defer { client.close() }
        // The client follows the nested turn too, one level deeper, as it runs.
        let followed = Mutex<[String]>([])
        let (agent, document) = try await client.ask("review Skillbus runs agents", sessionID: "team-1", onProgress: { agent, progress in
            if case .nested(let depth, .state(let state, _)) = progress {
                followed.withLock { $0.append("\(depth) \(agent) \(state.name)") }
            }
        })
        #expect(agent == "lead" && document["role"] == "lead")  // the default agent, by role
        #expect(followed.withLock { $0 }.first == "1 critic thinking" && followed.withLock { $0 }.last == "1 critic completed")
        #expect(document["reply"] == "3 words\ncritic: 3 words, add an example")
        let asked = try #require(document["calls"]?.arrayValue?.last)
        #expect(asked["ask"]?["to"] == "role:critic" && asked["agent"] == "critic" && asked["status"] == "ok")
        let nested = try #require(asked["turn"])
        #expect(nested["parent"] == document["turn"] && nested["depth"] == 1 && nested["round"] == document["round"])
        // The critic's text.stats is the lead's, run once: the lead ran it.
        #expect(nested["calls"]?.arrayValue?.first?["agent"] == "lead")
        // Each agent keeps its own history of the session.
        let (_, critics) = try await client.query(.history(session: "team-1"), agent: "critic")
        let said = (critics["messages"]?.arrayValue ?? []).compactMap { $0["content"]?.stringValue }
        #expect(said.first == "critique Skillbus runs agents")
        // A query may name a role: the critic that played it in this session answers.
        let (byRole, _) = try await client.query(.history(session: "team-1"), agent: "role:critic")
        #expect(byRole == "critic")
        let (_, leads) = try await client.query(.history(session: "team-1"), agent: "lead")
        #expect((leads["messages"]?.arrayValue ?? []).first?["content"] == "review Skillbus runs agents")
    }

    @Test("a circle is refused, and so is nesting past the limit, each with delegation_refused")
    func circleAndDepth() async throws {
        let cluster = try await cluster(depth: 1)
        defer { cluster.terminate() }
        let client = try await SkillbusClient.connect(endpoint: cluster.bus, context: try ZMQContext())
        defer { client.close() }
        for message in ["ping x", "deep x"] {
            let document: JSONValue
            do {
                document = try await client.ask(message, agent: "lead", timeout: .seconds(10)).document
            } catch {
                document = error.details ?? .null
            }
            // The bus's refusal, deepest down: the turns above it failed with it (their rules have no errorReply).
            let refused = Self.allCalls(document).compactMap { $0["error"] }.first {
                $0["code"] == "delegation_refused" && $0["details"]?["reason"] != nil
            }
            #expect(refused != nil, "\(message): \(document.jsonString.prefix(3000))")
            let reason = refused?["details"]?["reason"]?.stringValue
            #expect(reason == (message == "ping x" ? "cycle" : "depth"), "\(refused?.jsonString ?? "")")
        }
    }

    @Test("roles: the least loaded player, then the same one within a session; unknown roles are named")
    func roles() async throws {
        let cluster = try await cluster(critics: ["critic", "critic2"])
        defer { cluster.terminate() }
        let client = try await SkillbusClient.connect(endpoint: cluster.bus, context: try ZMQContext())
        defer { client.close() }
        let first = try await client.ask("critique a b", agent: "role:critic", sessionID: "roles-1").agent
        for _ in 0..<3 {
            #expect(try await client.ask("critique c d", agent: "role:critic", sessionID: "roles-1").agent == first)
        }
        do {
            _ = try await client.ask("hi", agent: "role:poet")
            Issue.record("a role nobody plays was accepted")
        } catch {
            #expect(error.code == .unknownAgent && error.message.contains("critic, lead, support"), "\(error)")
        }
        let listing = try await cluster.agents()
        let lead = listing["agents"]?.arrayValue?.first { $0["agent"] == "lead" }
        #expect(lead?["role"] == "lead" && lead?["description"] == "the lead" && lead?["planner"] == true)
    }

    @Test("handoff: the new agent answers with the note, and the session's next message goes to it")
    func handoff() async throws {
        let cluster = try await cluster()
        defer { cluster.terminate() }
        let client = try await SkillbusClient.connect(endpoint: cluster.bus, context: try ZMQContext())
        defer { client.close() }
        let (agent, document) = try await client.ask("I want to complain", sessionID: "hand-1")
        #expect(agent == "support")
        #expect(document["reply"] == "support: ticket opened (lead: a complaint)")
        #expect(document["handedOverBy"]?["agent"] == "lead" && document["handedOverBy"]?["note"] == "a complaint")
        #expect(document["handedOverBy"]?["turn"]?["handoff"]?["to"] == "role:support")
        #expect(try await client.ask("complain again", sessionID: "hand-1").agent == "support")
    }

    @Test("cancelling the outer turn stops the nested one; a callee killed mid-delegation fails only that step")
    func cancelAndLoss() async throws {
        let cluster = try await cluster()
        defer { cluster.terminate() }
        let context = try ZMQContext()
        let feed = try await FeedSubscriber.connect(
            endpoint: cluster.feed, topics: ["agent.state", "registry.heartbeat"], context: context)
        defer { feed.close() }
        var events = feed.events.makeAsyncIterator()
        _ = try await events.next()
        let client = try await SkillbusClient.connect(endpoint: cluster.bus, context: context)
        defer { client.close() }

        /// Waits for the critic's nested turn to reach `state` (its sleep running, or its end).
        func critic(_ state: String) async throws -> JSONValue {
            while let event = try await events.next() {
                if event.event["agent"] == "critic", event.event["state"]?.stringValue == state,
                    event.event["parent"] != nil
                {
                    return event.event
                }
            }
            throw TimedOut(what: "critic \(state)")
        }
        let asking = Task { try await client.ask("slow", agent: "lead", timeout: .seconds(30)) }
        let running = try await critic("executingSkill")
        #expect(running["depth"] == 1)
        asking.cancel()
        let failed = try await critic("failed")
        #expect(failed["reason"] == "the turn was cancelled")
        _ = await asking.result

        let second = Task { () -> JSONValue in
            do throws(SkillbusError) {
                return try await client.ask("slow", agent: "lead", timeout: .seconds(30)).document
            } catch {
                return error.details ?? .null
            }
        }
        _ = try await critic("executingSkill")
        cluster.workers.withLock { $0["critic"] }?.signal(SIGKILL)
        let document = await second.value
        // The lead's turn went on: its step failed with agent_lost, and the lead answered (or failed) by itself.
        let step = document["calls"]?.arrayValue?.first
        #expect(step?["error"]?["code"] == "agent_lost", "\(document.jsonString)")
        #expect(document["agent"] == "lead")
    }

    @Test("the openai planner asks an agent through its ask_ tool and hands over through transfer_to_")
    func openAIAgentTools() async throws {
        let server = try await ChatServer(answers: [
            ["toolCalls": [["name": "ask_critic", "arguments": #"{"message": "critique Skillbus runs agents"}"#]]],
            ["content": ["The critic counted."]],
            ["toolCalls": [["name": "transfer_to_support", "arguments": #"{"note": "an unhappy user"}"#]]],
        ])
        defer { server.stop() }
        let cluster = try await cluster()
        defer { cluster.terminate() }
        let openai: JSONValue = [
            "baseURL": .string(server.baseURL), "model": "test-model", "apiKeyEnv": .string(OpenAIPlannerTests.keyVariable),
        ]
        let config = try Self.file(["version": 1, "name": "chatty", "skills": [], "planner": ["openai": openai]])
        let worker = try SkillbusProcess(
            ["worker", "--name", "chatty", "--coordinator", cluster.bus, "--heartbeat-ms", "200", "--config", config],
            name: "chatty", environment: [OpenAIPlannerTests.keyVariable: "test-key"])
        cluster.workers.withLock { $0["chatty"] = worker }
        try await waitUntil("chatty's replica to hold every agent") {
            let listing = try await cluster.agents()
            let chatty = listing["agents"]?.arrayValue?.first { $0["agent"] == "chatty" }
            return chatty?["registryInSync"] == true
        }
        let client = try await SkillbusClient.connect(endpoint: cluster.bus, context: try ZMQContext())
        defer { client.close() }

        let (_, asked) = try await client.ask("how long is my text?", agent: "chatty", sessionID: "chat-team")
        #expect(asked["reply"] == "The critic counted.")
        let step = asked["calls"]?.arrayValue?.first
        #expect(step?["ask"]?["to"] == "critic" && step?["turn"]?["reply"] == "3 words, add an example")
        let tools = try server.requests().first?["body"]?["tools"]?.arrayValue?.compactMap { $0["function"]?["name"]?.stringValue }
        #expect(tools?.contains("ask_lead") == true && tools?.contains("transfer_to_support") == true)

        let (agent, handed) = try await client.ask("I complain", agent: "chatty", sessionID: "chat-team")
        #expect(agent == "support" && handed["handedOverBy"]?["note"] == "an unhappy user")
    }
}
