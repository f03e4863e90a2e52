import Foundation
import SkillbusZMQ
import Synchronization
import Testing

@testable import Skillbus

/// A stand-in for the coordinator: a raw ROUTER on an ephemeral port that answers only what a test tells it.
final class FakeBus: Sendable {
    let socket: SocketLoop
    private let inbox = MessageInbox()

    init(context: ZMQContext) async throws {
        let inbox = self.inbox
        socket = try await SocketLoop.start(
            context: context, type: .router, name: "fake-bus",
            configure: { socket in try socket.bind("tcp://127.0.0.1:*") },
            onMessage: { message in inbox.deliver(message) })
    }

    var endpoint: String { socket.endpoint }

    /// The next message, routing id first, then its fields (its envelope unpacked).
    func next(timeout: Duration = .seconds(10)) async throws -> Multipart {
        guard let message = await inbox.next(timeout: timeout), let routingID = message.first else {
            throw TimedOut(what: "a message at the fake bus")
        }
        return [routingID] + peerFields(Array(message.dropFirst()))
    }

    /// The next message whose command frame (after routing id and header) is `command`; others are skipped.
    func next(_ command: String, timeout: Duration = .seconds(10)) async throws -> Multipart {
        let deadline = ContinuousClock.now + timeout
        while true {
            let message = try await next(timeout: deadline - .now)
            if message.count > 2, message[2] == Array(command.utf8) { return message }
        }
    }

    func send(_ frames: Multipart) { socket.send(frames) }

    /// Sends a message given as the routing id, then its fields, packed as the bus packs them.
    func send(fields: Multipart) { socket.send([fields[0]] + fromBus(Array(fields.dropFirst()))) }

    func close() { socket.stop() }
}

@Suite("Client: cancellation and bad replies", .timeLimit(.minutes(2)))
struct ClientTests {
    let context: ZMQContext

    init() throws { context = try ZMQContext() }

    /// Nobody listens on port 1; a long timeout that no test may wait for.
    static let deadEndpoint = "tcp://127.0.0.1:1"

    @Test("a cancelled call to a dead coordinator waits for the CANCEL's answer 1 s at most, ends cancelled, leaves no entry")
    func cancelledCall() async throws {
        let client = try await SkillbusClient.connect(endpoint: Self.deadEndpoint, context: context)
        defer { client.close() }
        let call = Task {
            await failure { _ = try await client.invoke("echo", parameters: ["text": "hello"], timeout: .seconds(600)) }
        }
        try await waitUntil("the call to wait for its reply") { client.waitingCallers == 1 }
        let cancelled = ContinuousClock.now
        call.cancel()
        let error = await withDeadline(.seconds(10)) { await call.value }
        #expect(error??.code == .cancelled)
        #expect(ContinuousClock.now - cancelled < .seconds(8))
        #expect(client.waitingCallers == 0)
    }

    @Test("a cancelled REQUEST and ROUND send CANCEL with their request id, and return what the bus answers")
    func cancelTellsTheBus() async throws {
        let bus = try await FakeBus(context: context)
        defer { bus.close() }
        let client = try await SkillbusClient.connect(endpoint: bus.endpoint, context: context)
        defer { client.close() }
        let call = Task { try await client.invoke("sleep", parameters: ["ms": 60_000], timeout: .seconds(600)) }
        let request = try await bus.next("REQUEST")
        call.cancel()
        let cancel = try await bus.next("CANCEL")
        #expect(cancel.count == 4 && cancel[3] == request[3])
        let error = Array(#"{"code":"cancelled","details":{"reason":"client"},"message":"cancelled by its client"}"#.utf8)
        bus.send(fields:
            [request[0], Array("SKB2C".utf8), Array("REPLY".utf8), request[3], request[4], Array("error".utf8),
             Array("alpha".utf8), Array("12".utf8), error])
        let outcome = try await call.value
        #expect(outcome.status == .error && outcome.error?.code == .cancelled && outcome.agent == "alpha")

        let round = Task { try await client.round(.invoke(skill: "sleep", parameters: ["ms": 60_000]), timeout: .seconds(600)) }
        let sent = try await bus.next("ROUND")
        round.cancel()
        let roundCancel = try await bus.next("CANCEL")
        #expect(roundCancel[3] == sent[3])
        let document = RoundDocument.refusal(round: "x", shape: "invoke", SkillbusError(.cancelled, "cancelled"))
        bus.send(fields: [sent[0], Array("SKB2C".utf8), Array("ROUND".utf8), sent[3], sent[4], document.json.serialized()])
        #expect(try await round.value.error?.code == .cancelled)
        #expect(client.waitingCallers == 0)
    }

    @Test("a call made by a task that is already cancelled does not wait at all")
    func alreadyCancelled() async throws {
        let client = try await SkillbusClient.connect(endpoint: Self.deadEndpoint, context: context)
        defer { client.close() }
        let call = Task {
            withUnsafeCurrentTask { $0?.cancel() }
            return await failure { _ = try await client.agents(timeout: .seconds(600)) }
        }
        let error = await withDeadline(.seconds(10)) { await call.value }
        #expect(error??.code == .cancelled)
        #expect(client.waitingCallers == 0)
    }

    @Test("a reply that arrives after its caller gave up is dropped")
    func lateReply() async throws {
        let bus = try await FakeBus(context: context)
        defer { bus.close() }
        let client = try await SkillbusClient.connect(endpoint: bus.endpoint, context: context)
        defer { client.close() }
        let call = Task { try? await client.skills(timeout: .seconds(600)) }
        let request = try await bus.next("SKILLS")
        call.cancel()
        #expect(await withDeadline(.seconds(10)) { await call.value } == .some(nil))
        bus.send(fields: [request[0], Array("SKB2C".utf8), Array("SKILLS".utf8), request[3], Array("{}".utf8)])
        // The next call is answered normally: the late reply resolved nobody and left nothing behind.
        let next = Task { try await client.skills(timeout: .seconds(600)) }
        let second = try await bus.next("SKILLS")
        bus.send(fields: [second[0], Array("SKB2C".utf8), Array("SKILLS".utf8), second[3], Array(#"{"skills":[]}"#.utf8)])
        #expect(await withDeadline(.seconds(10)) { (try? await next.value)?.skills.count } == .some(0))
        #expect(client.waitingCallers == 0)
    }

    @Test(
        "a reply with a readable request id that does not decode fails its caller with malformed_message",
        arguments: [
            (["round-1", "ok"], "REPLY takes 8 fields, got 5"),
            (["round-1", "maybe", "alpha", "12", #"{"type":"text","text":"hi"}"#], "field 4 (status)"),
            (["round-1", "ok", "alpha", "soon", #"{"type":"text","text":"hi"}"#], "field 6 (duration)"),
        ])
    func malformedReply(frames: [String], problem: String) async throws {
        let bus = try await FakeBus(context: context)
        defer { bus.close() }
        let client = try await SkillbusClient.connect(endpoint: bus.endpoint, context: context)
        defer { client.close() }
        let call = Task {
            await failure { _ = try await client.invoke("echo", parameters: ["text": "hi"], timeout: .seconds(600)) }
        }
        let request = try await bus.next("REQUEST")
        bus.send(fields: [request[0], Array("SKB2C".utf8), Array("REPLY".utf8), request[3]] + frames.map { Array($0.utf8) })
        let outcome = await withDeadline(.seconds(10)) { await call.value }
        let error = try #require(outcome ?? nil, "no error within the deadline")
        #expect(error.code == .malformedMessage)
        #expect(error.message.contains("REPLY"))
        #expect(error.message.contains(problem))
        #expect(client.waitingCallers == 0)
    }

    @Test(
        "a SKILLS answer whose catalog is not JSON, or not a catalog, fails its caller with malformed_message",
        arguments: ["{oops", #"{"skills": 3}"#])
    func malformedCatalog(catalog: String) async throws {
        let bus = try await FakeBus(context: context)
        defer { bus.close() }
        let client = try await SkillbusClient.connect(endpoint: bus.endpoint, context: context)
        defer { client.close() }
        let call = Task { await failure { _ = try await client.skills(timeout: .seconds(600)) } }
        let request = try await bus.next("SKILLS")
        bus.send(fields: [request[0], Array("SKB2C".utf8), Array("SKILLS".utf8), request[3], Array(catalog.utf8)])
        let error = await withDeadline(.seconds(10)) { await call.value }
        #expect(error??.code == .malformedMessage)
        #expect(error??.message.contains("catalog") == true)
    }
}

/// The `SkillbusError` that `body` threw, or nil when it returned (another error is a test failure).
func failure(_ body: () async throws -> Void) async -> SkillbusError? {
    do {
        try await body()
        return nil
    } catch let error as SkillbusError {
        return error
    } catch {
        Issue.record("expected a SkillbusError, got \(error)")
        return nil
    }
}
