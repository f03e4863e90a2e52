import Foundation
import Testing

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

    @Test("stop returns promptly even with unsent messages and no peer")
    func stopNeverHangs() throws {
        let context = try ZMQContext()
        let loop = try SocketLoop(context: context, type: .dealer, name: "lonely") {
            try $0.connect("tcp://127.0.0.1:1")
        }
        for _ in 0..<100 { loop.send([Array("nobody listens".utf8)]) }
        let start = ContinuousClock.now
        loop.stop()
        #expect(ContinuousClock.now - start < .seconds(2))
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
