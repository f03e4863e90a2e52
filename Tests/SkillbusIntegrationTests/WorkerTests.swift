import Foundation
import SkillbusZMQ
import Synchronization
import Testing

@testable import Skillbus

/// A skill that only has a name: enough to appear in a skill list.
private struct Named: AgentSkill {
    let identifier: String
    var displayName: String { identifier }
    var description: String { "skill \(identifier)" }
    var parameterSchema: ParameterSchema { ParameterSchema([]) }

    func execute(parameters: [String: JSONValue], context: SkillExecutionContext) async throws -> SkillResult {
        .text(identifier)
    }
}

@Suite("Worker against a fake bus", .timeLimit(.minutes(2)))
struct WorkerTests {
    let context: ZMQContext
    let logger = Logger(label: "worker-test", level: .error)

    init() throws { context = try ZMQContext() }

    /// A complete WELCOME body (no feed: the worker then holds no replica).
    static let welcomeBody = Array(#"{"heartbeatMs":1000,"accepted":[],"refused":[],"feed":"","epoch":"test"}"#.utf8)

    /// Answers the worker's READY with a WELCOME and returns the worker's routing id.
    func welcome(_ bus: FakeBus) async throws -> [UInt8] {
        let ready = try await bus.next("READY")
        bus.send(fields: [ready[0], Array("SKB2W".utf8), Array("WELCOME".utf8), Self.welcomeBody])
        return ready[0]
    }

    /// Agent "alpha" on the fake bus, running.
    func start(on bus: FakeBus, skills: [any AgentSkill]) async throws -> (AgentWorker, Task<Void, Never>) {
        let worker = try await AgentWorker.connect(
            options: .init(name: "alpha", coordinator: bus.endpoint, heartbeatMs: 50), skills: skills,
            context: context, logger: logger)
        return (worker, Task { await worker.run() })
    }

    /// Rounds of concurrent adds and removes. After each round the bus sends an INVOKE; its RESULT is
    /// queued after every SKILLS of the round, so the last SKILLS before it must carry the final list.
    @Test("concurrent skill changes: the last SKILLS the bus sees is the worker's final list")
    func concurrentSkillChanges() async throws {
        let bus = try await FakeBus(context: context)
        defer { bus.close() }
        let (worker, running) = try await start(on: bus, skills: [Named(identifier: "s0")])
        defer { running.cancel() }
        let peer = try await welcome(bus)
        _ = try await bus.next("HEARTBEAT")  // registered: changes go out as SKILLS from now on

        let names = (0..<40).map { "skill-\($0)" }
        var stale = 0
        for round in 0..<30 {
            await withTaskGroup(of: Void.self) { group in
                for changer in 0..<4 {
                    group.addTask {
                        var generator = SystemRandomNumberGenerator()
                        for step in 0..<40 {
                            let name = names.randomElement(using: &generator)!
                            if (changer + step) % 2 == 0 {
                                worker.addSkill(Named(identifier: name))
                            } else {
                                worker.removeSkill(name)
                            }
                        }
                    }
                }
            }
            let final = JSONValue.array(worker.registration.skills.map(\.json))
            let marker = "marker-\(round)"
            let invocation = Invocation(
                invocationID: marker, roundID: "r", sessionID: "", skill: "none", deadlineMs: 1000,
                parameters: Array("{}".utf8))
            bus.send([peer] + BusToWorkerMessage.invoke(invocation).encoded())
            var last: JSONValue?
            /// A list the bus now holds: SKILLS, or the skills of a READY (on a loaded machine the worker may
            /// think this quiet bus lost it and register again), which is welcomed like the first.
            func take(_ message: Multipart) throws {
                if message[2] == Array("SKILLS".utf8) { last = try JSONValue(parsing: message[3]) }
                if message[2] == Array("READY".utf8) {
                    last = try JSONValue(parsing: message[3])["skills"]
                    bus.send(fields: [message[0], Array("SKB2W".utf8), Array("WELCOME".utf8), Self.welcomeBody])
                }
            }
            while true {
                let message = try await bus.next()
                if message[2] == Array("RESULT".utf8), message[3] == Array(marker.utf8) { break }
                try take(message)
            }
            // The socket thread sends SKILLS and RESULTs in its own order, so the final list may come just
            // after the RESULT: a round is stale only when the final list never comes (or another follows it).
            let settle = ContinuousClock.now + .seconds(2)
            while last != nil, last != final, ContinuousClock.now < settle {
                guard let message = try? await bus.next(timeout: .milliseconds(200)) else { continue }
                try take(message)
            }
            if last != nil && last != final { stale += 1 }
        }
        #expect(stale == 0, "rounds whose last SKILLS was not the final list")
        await worker.stop()
    }

    @Test("a change made while a READY is unanswered reaches the bus once it is welcomed")
    func changeBeforeWelcome() async throws {
        let bus = try await FakeBus(context: context)
        defer { bus.close() }
        let (worker, running) = try await start(on: bus, skills: [Named(identifier: "s0")])
        let ready = try await bus.next("READY")
        worker.addSkill(Named(identifier: "s1"))  // READY carried only s0
        bus.send(fields: [ready[0], Array("SKB2W".utf8), Array("WELCOME".utf8), Self.welcomeBody])
        let skills = try await bus.next("SKILLS")
        #expect(
            try JSONValue(parsing: skills[3]).arrayValue?.compactMap { $0["identifier"]?.stringValue } == ["s0", "s1"])
        await worker.stop()
        await running.value
    }

    /// The commands the worker sends for turn `turnID`, up to `last`; HEARTBEATs and the agent's own STATEs are
    /// passed by.
    func commands(of turnID: String, on bus: FakeBus, until last: String = "TURNEND") async throws -> [String] {
        var seen: [String] = []
        while seen.last != last {
            let message = try await bus.next()
            guard message.count > 3 else { continue }
            // A STATE of the turn names it in its body; the others in field 2.
            let ofTurn =
                message[2] == Array("STATE".utf8)
                ? (try? JSONValue(parsing: message[3]))?["turn"] == .string(turnID) : message[3] == Array(turnID.utf8)
            guard ofTurn else { continue }
            seen.append(String(decoding: message[2], as: UTF8.self))
        }
        return seen
    }

    @Test("a turn that holds its round keeps it while it runs on, and gives it back once it waits a while")
    func leaseGivenBackWhileWaiting() async throws {
        let bus = try await FakeBus(context: context)
        defer { bus.close() }
        let gate = OneShot<Void>()
        var options = AgentWorker.Options(name: "alpha", coordinator: bus.endpoint, heartbeatMs: 50)
        options.planner = try RulesPlanner(json: [
            "rules": [
                ["intent": "^hi$", "skill": "echo", "params": ["text": "hi"], "reply": "{result}"],
                ["intent": "^wait$", "skill": "gated", "params": [:], "reply": "{result}"],
            ]
        ])
        let worker = try await AgentWorker.connect(
            options: options, skills: [EchoSkill(), Gated(gate: gate)], context: context, logger: logger)
        let running = Task { await worker.run() }
        defer { running.cancel() }
        let peer = try await welcome(bus)
        func turn(_ id: String, _ message: String) {
            let request = TurnRequest(
                turnID: id, roundID: "r-\(id)", sessionID: "", deadlineMs: 20_000, message: message, leased: true)
            bus.send([peer] + BusToWorkerMessage.turn(request).encoded())
        }
        // A quick call: run here and reported, the round kept to the turn's end (STATEs ride in TURNEND).
        turn("t1", "hi")
        #expect(try await commands(of: "t1", on: bus) == ["CALLED", "TURNEND"])
        // A call that waits: its STATEs go out, then its CLAIM and RELEASE while it still runs; CALLED ends it.
        turn("t2", "wait")
        #expect(
            try await commands(of: "t2", on: bus, until: "RELEASE") == ["STATE", "STATE", "STATE", "CLAIM", "RELEASE"])
        gate.offer(())
        #expect(try await commands(of: "t2", on: bus) == ["CALLED", "TURNEND"])
        await worker.stop()
    }

    @Test("stop() ends promptly while a skill waits on a sub-call the bus never answers")
    func stopDuringSubCall() async throws {
        let bus = try await FakeBus(context: context)
        defer { bus.close() }
        let (worker, running) = try await start(on: bus, skills: [Relay()])
        let peer = try await welcome(bus)
        let invocation = Invocation(
            invocationID: "inv-1", roundID: "r", sessionID: "", skill: "relay", deadlineMs: 600_000,
            parameters: Array("{}".utf8))
        bus.send([peer] + BusToWorkerMessage.invoke(invocation).encoded())
        _ = try await bus.next("REQUEST")  // the sub-call, from the worker's client socket; never answered
        #expect(await withDeadline(.seconds(10)) { await worker.stop() } != nil)
        #expect(await withDeadline(.seconds(10)) { await running.value } != nil)
    }
}

/// Calls a skill no agent here offers, through the bus.
private struct Relay: AgentSkill {
    var identifier: String { "relay" }
    var displayName: String { "Relay" }
    var description: String { "calls elsewhere.skill" }
    var parameterSchema: ParameterSchema { ParameterSchema([]) }

    func execute(parameters: [String: JSONValue], context: SkillExecutionContext) async throws -> SkillResult {
        try await context.invoke("elsewhere.skill")
    }
}

/// A skill that runs until the test offers its gate a value (one call at a time awaits it).
private struct Gated: AgentSkill {
    let gate: OneShot<Void>
    var identifier: String { "gated" }
    var displayName: String { "Gated" }
    var description: String { "waits for the test" }
    var parameterSchema: ParameterSchema { ParameterSchema([]) }

    func execute(parameters: [String: JSONValue], context: SkillExecutionContext) async throws -> SkillResult {
        await gate.value()
        return .text("opened")
    }
}
