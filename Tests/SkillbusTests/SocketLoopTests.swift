import Foundation
import Synchronization
import Testing

@testable import Skillbus
@testable import SkillbusZMQ

@Suite("ZeroMQ layer")
struct SocketLoopTests {
    func firstMessage(_ loop: SocketLoop, timeout: Duration = .seconds(5)) async -> Multipart? {
        let messages = loop.messages
        return await withTaskGroup(of: Multipart?.self) { group in
            group.addTask {
                for await message in messages { return message }
                return nil
            }
            group.addTask {
                try? await Task.sleep(for: timeout)
                return nil
            }
            let first = await group.next() ?? nil
            group.cancelAll()
            return first
        }
    }

    @Test(
        "multipart messages cross inproc and tcp with every frame intact",
        arguments: [
            "inproc://skillbus-test-\(UUID().uuidString)", "tcp://127.0.0.1:*",
        ])
    func roundTrip(endpoint: String) async throws {
        let context = try ZMQContext()
        let server = try SocketLoop(context: context, type: .router, name: "server") { try $0.bind(endpoint) }
        defer { server.stop() }
        let bound = server.endpoint
        let client = try SocketLoop(context: context, type: .dealer, name: "client") { try $0.connect(bound) }
        defer { client.stop() }
        let big = [UInt8](repeating: 7, count: 300_000)  // larger than any fixed receive buffer
        client.send([Array("hello".utf8), [], big])
        let received = try #require(await firstMessage(server))
        #expect(received.count == 4)  // routing id + 3 frames
        #expect(received[1] == Array("hello".utf8))
        #expect(received[2].isEmpty)
        #expect(received[3] == big)
        server.send([received[0], Array("back".utf8)])
        #expect(await firstMessage(client) == [Array("back".utf8)])
    }

    @Test("a bad endpoint fails at start with errno and libzmq's words")
    func badEndpoint() throws {
        let context = try ZMQContext()
        #expect {
            _ = try SocketLoop(context: context, type: .router, name: "bad") { try $0.bind("tcp://256.0.0.1:1") }
        } throws: { error in
            guard let error = error as? ZMQError else { return false }
            return error.errno != 0 && !error.message.isEmpty && error.operation.contains("256.0.0.1")
        }
    }

    @Test("stopAndWait ends promptly even with unsent messages and no peer")
    func stopNeverHangs() async throws {
        let context = try ZMQContext()
        let loop = try await SocketLoop.start(context: context, type: .dealer, name: "lonely") {
            try $0.connect("tcp://127.0.0.1:1")
        }
        for _ in 0..<100 { loop.send([Array("nobody listens".utf8)]) }
        #expect(await withDeadline(.seconds(10)) { await loop.stopAndWait() } != nil)
        // The loop has left: `messages` is finished.
        #expect(await withDeadline(.seconds(10)) { await loop.messages.first { _ in true } } == .some(nil))
    }

    @Test("start fails with the configure error, asynchronously too")
    func badEndpointAsync() async throws {
        let context = try ZMQContext()
        await #expect(throws: ZMQError.self) {
            _ = try await SocketLoop.start(context: context, type: .router, name: "bad") {
                try $0.bind("tcp://256.0.0.1:1")
            }
        }
    }

    /// A loop used as a one-thread executor: while one task on it waits for another loop's thread, a
    /// second task on it can run only if the first one is suspended rather than blocking the thread.
    @Test("start and stopAndWait suspend the caller; they never block its thread")
    func neverBlocksTheCaller() async throws {
        let context = try ZMQContext()
        let host = try await SocketLoop.start(context: context, type: .pair, name: "host") {
            try $0.bind("inproc://host-\(UUID().uuidString)")
        }
        defer { host.stop() }

        // Start: the new loop's thread holds its configuration until the gate opens.
        let configuring = Gate()
        let starting = Task(executorPreference: host.executor) {
            try await SocketLoop.start(context: context, type: .dealer, name: "slow-start") { _ in configuring.pass() }
        }
        let ranDuringStart = Task(executorPreference: host.executor) { true }  // queued after `starting`
        #expect(await withDeadline(.seconds(10)) { await ranDuringStart.value } == true)
        configuring.open()
        let slow = try await starting.value

        // Stop: the loop's thread is inside a slow handler until the gate opens.
        let handling = Gate()
        let busy = Gate()
        let loop = try await SocketLoop.start(
            context: context, type: .dealer, name: "slow-stop", configure: { _ in },
            beforeWait: {
                if busy.isOpen { handling.pass() }
                return nil
            })
        busy.open()
        loop.wake()
        let stopping = Task(executorPreference: host.executor) { await loop.stopAndWait() }
        let ranDuringStop = Task(executorPreference: host.executor) { true }  // queued after `stopping`
        #expect(await withDeadline(.seconds(10)) { await ranDuringStop.value } == true)
        handling.open()
        #expect(await withDeadline(.seconds(10)) { await stopping.value } != nil)
        await slow.stopAndWait()
    }

    @Test("a task that prefers a stopped loop still runs")
    func jobsAfterStop() async throws {
        let context = try ZMQContext()
        let loop = try await SocketLoop.start(context: context, type: .dealer, name: "gone") { _ in }
        await loop.stopAndWait()
        let late = Task(executorPreference: loop.executor) { 42 }
        #expect(await withDeadline(.seconds(10)) { await late.value } == 42)
    }

    @Test("a ROUTER with mandatory routing reports an unknown peer as EHOSTUNREACH")
    func routerMandatory() throws {
        let context = try ZMQContext()
        let socket = try ZMQSocket(context: context, type: .router)
        try socket.setRouterMandatory(true)
        try socket.bind("inproc://mandatory-\(UUID().uuidString)")
        #expect {
            try socket.send([[1, 2, 3], Array("x".utf8)], dontWait: true)
        } throws: { error in
            (error as? ZMQError)?.hostUnreachable == true
        }
    }
}

/// Holds whoever calls `pass()` until `open()`. Only for a socket's own thread in a test, never the pool.
final class Gate: Sendable {
    private let semaphore = DispatchSemaphore(value: 0)
    private let opened = Atomic<Bool>(false)

    var isOpen: Bool { opened.load(ordering: .acquiring) }

    func open() {
        guard !opened.exchange(true, ordering: .acquiringAndReleasing) else { return }
        semaphore.signal()
    }

    func pass() {
        semaphore.wait()
        semaphore.signal()
    }
}
