import Foundation
import Testing

@testable import Skillbus

/// The wait queue's order (priority, then age, with promotion) and each client's share of it, driven by
/// hand on the state machine.
@Suite("Priorities and the client's share of the wait queue")
struct PriorityTests {
    let alpha: PeerID = [0xA1]

    func state(settings: CoordinatorState.Settings = .init()) -> CoordinatorState {
        var state = CoordinatorState(settings: settings, epoch: "e1")
        _ = state.handleWorker(
            .ready([
                "name": "alpha", "capacity": 1,
                "skills": [["identifier": "echo", "parameters": [["name": "text", "type": "string"]]]],
            ]), from: alpha, now: 0)
        return state
    }

    func round(_ text: String, priority: InvocationPriority = .normal) -> RoundRequest {
        let spec = try! RoundSpec(json: ["invoke": ["skill": "echo", "params": ["text": .string(text)]]], stepLimit: 10)
        return RoundRequest(
            requestID: "q-" + text, roundID: "R-" + text, timeoutMs: 60_000,
            body: spec.body(retries: nil, priority: priority).serialized())
    }

    /// The texts of the invocations sent to workers, in order.
    func dispatched(_ actions: [CoordinatorAction]) -> [(id: String, text: String)] {
        actions.compactMap {
            guard case .toWorker(_, .invoke(let invocation)) = $0,
                let parameters = try? JSONValue(parsing: invocation.parameters)
            else { return nil }
            return (invocation.invocationID, parameters["text"]?.stringValue ?? "")
        }
    }

    func errors(_ actions: [CoordinatorAction]) -> [String] {
        actions.compactMap {
            guard case .toClient(_, .round(_, _, let document)) = $0, let json = try? JSONValue(parsing: document)
            else { return nil }
            return json["invocations"]?.arrayValue?.first?["error"]?["code"]?.stringValue
        }
    }

    /// Finishes whatever runs on alpha, one after the other, and returns the order in which the rest ran.
    func drain(_ state: inout CoordinatorState, first: String, now: UInt64) -> [String] {
        var order: [String] = []
        var running = first
        for _ in 0..<10 {
            let next = dispatched(
                state.handleWorker(
                    .result(invocationID: running, status: .ok, payload: JSONValue("x").serialized()), from: alpha,
                    now: now))
            guard let (id, text) = next.first else { break }
            order.append(text)
            running = id
        }
        return order
    }

    @Test("waiting invocations are served by priority, then age")
    func order() {
        var state = state()
        let busy = dispatched(state.handleRound(round("busy"), from: [0xC0], now: 0))
        #expect(busy.count == 1)
        let sent: [(String, InvocationPriority)] = [
            ("low1", .low), ("normal1", .normal), ("high1", .high), ("low2", .low), ("high2", .high),
        ]
        for (index, (text, priority)) in sent.enumerated() {
            #expect(dispatched(state.handleRound(round(text, priority: priority), from: [0xC1], now: UInt64(index)))
                .isEmpty)
        }
        #expect(state.waitingCount == 5)
        #expect(drain(&state, first: busy[0].id, now: 10) == ["high1", "high2", "normal1", "low1", "low2"])
    }

    @Test("a low invocation waiting longer than the promotion time goes before a newer high one")
    func promotion() {
        var settings = CoordinatorState.Settings()
        settings.priorityPromotionMs = 1000
        var state = state(settings: settings)
        let busy = dispatched(state.handleRound(round("busy"), from: [0xC0], now: 0))
        _ = state.handleRound(round("old-low", priority: .low), from: [0xC1], now: 0)
        _ = state.handleRound(round("new-high", priority: .high), from: [0xC2], now: 1_500_000_000)
        _ = state.handleRound(round("new-normal"), from: [0xC2], now: 1_500_000_000)
        // At 2.1 s the low one has waited two promotion times: it ranks as high, and is older.
        #expect(drain(&state, first: busy[0].id, now: 2_100_000_000) == ["old-low", "new-high", "new-normal"])
    }

    @Test("without promotion a low invocation waits behind every newer high one")
    func noPromotion() {
        var settings = CoordinatorState.Settings()
        settings.priorityPromotionMs = 0
        var state = state(settings: settings)
        let busy = dispatched(state.handleRound(round("busy"), from: [0xC0], now: 0))
        _ = state.handleRound(round("old-low", priority: .low), from: [0xC1], now: 0)
        _ = state.handleRound(round("new-high", priority: .high), from: [0xC2], now: 1_500_000_000)
        #expect(drain(&state, first: busy[0].id, now: 50_000_000_000) == ["new-high", "old-low"])
    }

    @Test("one client holds at most its share of the wait queue; another still gets a place")
    func clientShare() {
        var settings = CoordinatorState.Settings()
        settings.queueLimit = 8
        settings.clientQueueShare = 0.25
        var state = state(settings: settings)
        let flooder: PeerID = [0xF1]
        _ = state.handleRound(round("busy"), from: flooder, now: 0)
        #expect(errors(state.handleRound(round("f1"), from: flooder, now: 0)).isEmpty)
        #expect(errors(state.handleRound(round("f2"), from: flooder, now: 0)).isEmpty)
        #expect(errors(state.handleRound(round("f3"), from: flooder, now: 0)) == ["busy"])
        #expect(state.waitingCount == 2)
        #expect(errors(state.handleRound(round("other"), from: [0xC9], now: 0)).isEmpty)
        #expect(state.waitingCount == 3)
    }

    @Test("REQUESTs count toward their client's share too, and leave it when they are served")
    func requestShare() {
        var settings = CoordinatorState.Settings()
        settings.queueLimit = 4
        settings.clientQueueShare = 0.5
        var state = state(settings: settings)
        let client: PeerID = [0xC1]
        func request(_ id: String) -> InvokeRequest {
            InvokeRequest(requestID: id, roundID: "", skill: "echo", timeoutMs: 60_000, parameters: #"{"text":"t"}"#.utf8.map { $0 })
        }
        let first = dispatched(state.handleInvoke(request("r0"), from: client, now: 0))
        _ = state.handleInvoke(request("r1"), from: client, now: 0)
        _ = state.handleInvoke(request("r2"), from: client, now: 0)
        #expect(state.requests.waiting.count(of: client) == 2)
        let refused = state.handleInvoke(request("r3"), from: client, now: 0)
        #expect(refused.contains { if case .toClient(_, .reply(let reply)) = $0 { reply.status == .error } else { false } })
        _ = state.handleWorker(
            .result(invocationID: first[0].id, status: .ok, payload: JSONValue("x").serialized()), from: alpha, now: 1)
        #expect(state.requests.waiting.count(of: client) == 1)
    }

    @Test("the coordinator file sets the promotion time and the share; a share outside (0, 1] is refused")
    func configuration() async throws {
        try await withTemporaryDirectory { path in try checkConfiguration(in: path) }
    }

    func checkConfiguration(in path: String) throws {
        let good = path + "/good.json"
        try #"{"version": 1, "priorityPromotionMs": 250, "clientQueueShare": 0.5}"#.write(
            toFile: good, atomically: true, encoding: .utf8)
        let configuration = try CoordinatorConfiguration.load(path: good)
        #expect(configuration.stateSettings.priorityPromotionMs == 250)
        #expect(configuration.stateSettings.clientQueueShare == 0.5)
        let bad = path + "/bad.json"
        try #"{"version": 1, "clientQueueShare": 1.5}"#.write(toFile: bad, atomically: true, encoding: .utf8)
        #expect(throws: SkillbusError.self) { try CoordinatorConfiguration.load(path: bad) }
    }
}
