import SkillbusZMQ
import Synchronization
import Testing

@testable import Skillbus

/// What `context.emit` sends, without sockets: batches in order and before the result, at most one per
/// interval, and a flood stopped at the agent's limit.
@Suite("Partial output from a skill")
struct SkillOutputTests {
    /// The OUTPUT messages a runner sent, as (first, parts), and the invocations it was asked to stop.
    final class Wire: Sendable {
        let sent = Mutex<[(Int, [OutputPart])]>([])
        let stopped = Mutex<[String]>([])

        func route(maxOutputBytes: Int = 1 << 20, interval: Duration = .milliseconds(25)) -> SkillOutput.Route {
            SkillOutput.Route(
                maxOutputBytes: maxOutputBytes, maxMessageBytes: 1 << 20, interval: interval,
                send: { message in
                    guard case .output(_, let batch) = try? WorkerMessage.decode(message) else { return }
                    self.sent.withLock { $0.append((batch.first, batch.parts)) }
                },
                stop: { id in self.stopped.withLock { $0.append(id) } }, clock: OutputClock())
        }

        var batches: [(Int, [OutputPart])] { sent.withLock { $0 } }
    }

    func invocation(_ parameters: String = "{}") -> Invocation {
        Invocation(
            invocationID: "i1", roundID: "r", sessionID: "", skill: "emitter", deadlineMs: 60_000,
            parameters: Array(parameters.utf8))
    }

    func emitter(_ body: @escaping @Sendable (SkillExecutionContext) async throws -> SkillResult) -> ProbeSkill {
        ProbeSkill(identifier: "emitter", parameterSchema: ParameterSchema([]), behaviour: { _, context in
            try await body(context)
        })
    }

    @Test("a skill that ends within the interval sends its parts in one batch, before the result")
    func batching() async throws {
        let wire = Wire()
        let skill = emitter { context in
            try context.emit("first")  // waits for the others to join it
            try context.emit("second")
            try context.emit(json: ["n": 3])
            #expect(wire.batches.isEmpty)
            return .text("done")
        }
        let runner = InvocationRunner(
            agentName: "a", skills: ["emitter": skill], output: wire.route(interval: .seconds(10)))
        let outcome = await runner.run(invocation())
        #expect(outcome.status == .ok)
        let batches = wire.batches
        #expect(batches.map(\.0) == [0])
        #expect(batches.flatMap(\.1) == [.text("first"), .text("second"), .json(["n": 3])])
    }

    @Test("the agent's clock sends a batch that waited while the skill runs on")
    func waitingBatch() async throws {
        let wire = Wire()
        let skill = emitter { context in
            try context.emit("early")
            // Without another emit, the clock sends it within the interval.
            let deadline = ContinuousClock.now + .seconds(10)
            while wire.batches.isEmpty && ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(5)) }
            try context.emit("late")
            return .text("done")
        }
        let runner = InvocationRunner(agentName: "a", skills: ["emitter": skill], output: wire.route())
        _ = await runner.run(invocation())
        #expect(wire.batches.map(\.0) == [0, 1] && wire.batches.flatMap(\.1) == [.text("early"), .text("late")])
    }

    @Test("a skill that emits over time sends one batch per interval, not one per part")
    func overTime() async throws {
        let wire = Wire()
        // Two bursts of twelve, 40 ms apart: whatever the timing, the parts go in at most three batches.
        let skill = emitter { context in
            for index in 0..<24 {
                if index == 12 { try await Task.sleep(for: .milliseconds(40)) }
                try context.emit("line \(index)")
            }
            return .text("done")
        }
        let runner = InvocationRunner(agentName: "a", skills: ["emitter": skill], output: wire.route())
        _ = await runner.run(invocation())
        let batches = wire.batches
        #expect(batches.count >= 1 && batches.count <= 3)
        #expect(batches.flatMap(\.1) == (0..<24).map { .text("line \($0)") })
        // Each batch says how many parts came before it.
        var count = 0
        for (first, parts) in batches {
            #expect(first == count)
            count += parts.count
        }
    }

    @Test("past maxOutputBytes the invocation is stopped and fails with output_too_large, whatever it returns")
    func flood() async throws {
        let wire = Wire()
        let skill = emitter { context in
            for index in 0..<1000 {
                // A skill that ignores the error still fails.
                try? context.emit("flood \(index)")
            }
            return .text("I am fine")
        }
        let runner = InvocationRunner(agentName: "a", skills: ["emitter": skill], output: wire.route(maxOutputBytes: 300))
        let outcome = await runner.run(invocation())
        #expect(outcome.status == .error)
        let error = SkillbusError(json: try JSONValue(parsing: outcome.payload))
        #expect(error.code == .outputTooLarge && error.message.contains("more than 300 bytes"))
        #expect(error.details?["limit"] == 300)
        #expect(wire.stopped.withLock { $0 } == ["i1"])
        // What fitted was sent: every part but the ones past the limit.
        let sent = wire.batches.flatMap(\.1)
        #expect(!sent.isEmpty && sent.count < 20)
        #expect(sent.reduce(0) { $0 + $1.serialized().count + 1 } <= 300)
    }

    @Test("nothing is sent after the result, and a context without output takes emits silently")
    func afterTheEnd() async throws {
        let wire = Wire()
        let leaked = Mutex<SkillExecutionContext?>(nil)
        let skill = emitter { context in
            leaked.withLock { $0 = context }
            return .text("done")
        }
        let runner = InvocationRunner(agentName: "a", skills: ["emitter": skill], output: wire.route())
        _ = await runner.run(invocation())
        try leaked.withLock { $0 }?.emit("late")
        #expect(wire.batches.isEmpty)
        let bare = SkillExecutionContext(
            roundID: "r", sessionID: "", agentName: "a", invocationID: "x", deadline: .now + .seconds(1))
        try bare.emit("nowhere")
        #expect(bare.outputLimitBytes == nil)
    }

    @Test("text.lines streams its lines and counts them")
    func textLines() async throws {
        let wire = Wire()
        let runner = InvocationRunner(agentName: "a", skills: ["text.lines": TextLinesSkill()], output: wire.route())
        let outcome = await runner.run(
            Invocation(
                invocationID: "i2", roundID: "r", sessionID: "", skill: "text.lines", deadlineMs: 60_000,
                parameters: Array(#"{"text":"a\n\nb\n","delayMs":1}"#.utf8)))
        #expect(outcome.payload == SkillResult.json(["lines": 3]).serialized())
        #expect(wire.batches.flatMap(\.1) == [.text("a"), .text(""), .text("b")])
    }
}
