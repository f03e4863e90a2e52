import Testing

@testable import Skillbus

/// The wire and the planners' side of teams, without sockets: targets, the ASK's parent field, TURN's team
/// field, TURNEND's handoff, and rules and tools that ask or hand over.
@Suite("Teams: wire and planners")
struct TeamWireTests {
    @Test("a target is an agent name, or role:NAME")
    func targets() {
        #expect(AgentTarget("") == nil)
        #expect(AgentTarget("alpha") == .agent("alpha"))
        #expect(AgentTarget("role:critic") == .role("critic"))
        #expect(AgentTarget.role("critic").text == "role:critic" && AgentTarget.role("critic").description == "role 'critic'")
        #expect(AgentProfile.isValidRole("re-viewer_2") && !AgentProfile.isValidRole("a b") && !AgentProfile.isValidRole(""))
    }

    @Test("ASK with a parent turn: 10 fields, field 8 empty without progress; TURN and TURNEND carry team and handoff")
    func wire() throws {
        for progress in [false, true] {
            let ask = AskRequest(
                requestID: "r1", roundID: "round", sessionID: "s", agent: "role:critic", message: "hi", progress: progress,
                parentTurnID: "t3")
            let frames = ClientMessage.ask(ask).encoded()
            #expect(try ClientMessage.decode(frames) == .ask(ask))
        }
        let plain = AskRequest(requestID: "r2", roundID: "round", message: "hi")
        #expect(try ClientMessage.decode(ClientMessage.ask(plain).encoded()) == .ask(plain))

        let team = TeamContext(
            parentTurnID: "t3", caller: "lead", depth: 2,
            handoff: .init(from: "lead", note: "over to you", transcript: ["turn": "t2"]))
        let turn = TurnRequest(turnID: "t4", roundID: "round", sessionID: "s", deadlineMs: 900, message: "hi", team: team)
        #expect(try BusToWorkerMessage.decode(BusToWorkerMessage.turn(turn).encoded()) == .turn(turn))

        let handoff = HandoffRequest(to: .role("support"), note: "a complaint")
        let end = WorkerMessage.turnEnd(turnID: "t4", .ok(["reply": .null]), handoff: handoff)
        #expect(try WorkerMessage.decode(end.encoded()) == end)
        let refused = WorkerMessage.turnEnd(turnID: "t4", .error(SkillbusError(.timeout, "late")), handoff: handoff)
        #expect(throws: SkillbusError.self) { try WorkerMessage.decode(refused.encoded()) }
    }

    @Test("a rule asks or hands over with templates over its groups; one action per rule")
    func rules() async throws {
        let planner = try RulesPlanner(json: [
            "rules": [
                ["intent": "review (?<text>.+)", "ask": "role:critic", "message": "critique {text}", "reply": "{result}"],
                ["intent": "complain", "handoff": "support", "note": "unhappy"],
            ]
        ])
        #expect(try await planner.next(PlannerInput(message: "review this", skills: [])) == .ask(.role("critic"), message: "critique this"))
        #expect(try await planner.next(PlannerInput(message: "I complain", skills: [])) == .handoff(.agent("support"), note: "unhappy"))
        let asked = PlannerStep(
            skill: "", parameters: ["message": "critique this"], outcome: .success(.text("fine")), asked: .role("critic"))
        #expect(try await planner.next(PlannerInput(message: "review this", steps: [asked], skills: [])) == .reply("fine"))
        for bad: JSONValue in [
            ["intent": "x", "skill": "echo", "ask": "a", "message": "m", "reply": "r"],
            ["intent": "x", "ask": "a", "reply": "r"],
            ["intent": "(?<a>x)", "ask": "a", "message": "{b}", "reply": "r"],
        ] {
            #expect(throws: SkillbusError.self) { try RulesPlanner(json: ["rules": [bad]]) }
        }
    }

    @Test("the other agents are tools: ask_<agent> and transfer_to_<agent>")
    func tools() {
        let agents = [TeamMember(name: "critic.one", role: "critic", description: "Reviews texts")]
        let names = AgentTools.tools(agents).compactMap { $0["function"]?["name"]?.stringValue }
        #expect(names == ["ask_critic__one", "transfer_to_critic__one"])
        #expect(
            AgentTools.decision(for: "ask_critic__one", arguments: ["message": "hi"], among: agents)
                == .ask(.agent("critic.one"), message: "hi"))
        #expect(
            AgentTools.decision(for: "transfer_to_critic__one", arguments: ["note": "n"], among: agents)
                == .handoff(.agent("critic.one"), note: "n"))
        #expect(AgentTools.decision(for: "math__eval", arguments: nil, among: agents) == nil)
    }
}
