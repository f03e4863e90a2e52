import Foundation
import Synchronization
import Testing

@testable import Skillbus
@testable import SkillbusZMQ

/// What the own CURVE router in a test decided and received, driven on the test's thread.
private final class CurveRouterHarness {
    let router: ZMTPRouter
    let serverKeys: CurveKeyPair
    /// The client keys it lets in, by Z85 public key, with the User-Id each gets.
    var allowed: [String: String] = [:]
    private(set) var asked: [String] = []
    private(set) var received: [ReceivedMessage] = []

    init(handshakeTimeout: Duration = .seconds(30)) throws {
        let serverKeys = try CurveKeyPair.generate()
        self.serverKeys = serverKeys
        let decisions = Decisions()
        router = try ZMTPRouter(
            bind: "tcp://127.0.0.1:*", maxFrameBytes: 1 << 20,
            curve: .init(secretKey: serverKeys.secretKey) { client in decisions.decide(client) },
            handshakeTimeout: handshakeTimeout)
        decisions.harness = self
    }

    final class Decisions {
        weak var harness: CurveRouterHarness?
        func decide(_ client: ZMTPRouter.CurveClient) -> ZAPVerdict {
            let key = Curve.encode(client.publicKey)
            harness?.asked.append(key)
            guard let userID = harness?.allowed[key] else { return .refuse(reason: "unknown key") }
            return .accept(userID: userID)
        }
    }

    /// Drives the router (accept, handshakes, reads, writes) until `done` or `timeout`; true when `done`.
    @discardableResult
    func run(timeout: Duration = .seconds(10), until done: () throws -> Bool) throws -> Bool {
        let deadline = ContinuousClock.now + timeout
        let limits = ReceiveLimits(frames: 16, bytes: 1 << 20)
        while ContinuousClock.now < deadline {
            while let message = router.receive(limits: limits) { received.append(message) }
            router.flush()
            if try done() { return true }
            _ = try poll([PollItem(.fileDescriptor(router.pollDescriptor))], timeoutMs: 20)
        }
        return false
    }
}

/// A raw TCP connection to `endpoint` (tcp://HOST:PORT), for writing handshakes by hand.
private func rawConnection(_ endpoint: String) throws -> RawPeer {
    let (host, port) = try #require(TCPSocket.hostAndPort(endpoint))
    let address = try TCPSocket.resolve(host: host, port: try #require(UInt16(port))).get()[0]
    let fd = try TCPSocket.connect(to: address).get()
    var item = pollfd(fd: fd, events: Int16(POLLOUT), revents: 0)
    try #require(poll(&item, 1, 5000) == 1 && TCPSocket.pendingError(fd) == 0)
    return RawPeer(fd: fd)
}

@Suite("CURVE between the own engine and libzmq (Skillbus's ZMQSocket and pyzmq), both ways", .serialized)
struct CurveInteropTests {
    func libzmqClient(_ context: ZMQContext, _ endpoint: String, serverKey: String, keys: CurveKeyPair) throws
        -> ZMQSocket
    {
        let socket = try ZMQSocket(context: context, type: .dealer)
        try socket.useCurveClient(CurveCredentials(serverKey: serverKey, keys: keys))
        try socket.setLinger(ms: 0)
        try socket.connect(endpoint)
        return socket
    }

    @Test("a libzmq CURVE client is let in with the User-Id the closure gave; frames cross both ways")
    func libzmqClientToOwnRouter() throws {
        let harness = try CurveRouterHarness()
        defer { harness.router.close() }
        let context = try ZMQContext()
        let keys = try CurveKeyPair.generate()
        harness.allowed[keys.publicKey] = "alice"
        let client = try libzmqClient(
            context, harness.router.lastEndpoint, serverKey: harness.serverKeys.publicKey, keys: keys)
        defer { client.close() }
        let big = [UInt8](repeating: 9, count: 70_000)
        try client.send([Array("hello".utf8), [], big])
        try #require(try harness.run { !harness.received.isEmpty })
        let message = harness.received[0]
        #expect(message.userID == "alice")
        #expect(message.frames.count == 3 && message.frames[0] == Array("hello".utf8) && message.frames[2] == big)
        #expect(harness.asked == [keys.publicKey])
        try harness.router.send(routingID: try #require(message.routingID), [Array("back".utf8), big])
        var reply: Multipart?
        try harness.run {
            reply = try client.receive(dontWait: true)
            return reply != nil
        }
        #expect(reply == [Array("back".utf8), big])
    }

    @Test("an unknown client key gets ERROR and a closed connection; a wrong server key fails HELLO; others go on")
    func refusals() throws {
        let harness = try CurveRouterHarness()
        defer { harness.router.close() }
        let context = try ZMQContext()
        let known = try CurveKeyPair.generate()
        harness.allowed[known.publicKey] = "known"
        let stranger = try CurveKeyPair.generate()
        let endpoint = harness.router.lastEndpoint
        let refused = try libzmqClient(context, endpoint, serverKey: harness.serverKeys.publicKey, keys: stranger)
        defer { refused.close() }
        let monitorEndpoint = "inproc://curve-refused-\(UUID().uuidString)"
        try refused.monitor(MonitorEvent.refusedByServer, on: monitorEndpoint)
        let monitor = try ZMQSocket(context: context, type: .pair)
        defer { monitor.close() }
        try monitor.connect(monitorEndpoint)
        let impostorKey = try CurveKeyPair.generate().publicKey
        let misled = try libzmqClient(context, endpoint, serverKey: impostorKey, keys: known)
        defer { misled.close() }
        try refused.send([Array("let me in".utf8)])
        try misled.send([Array("wrong server".utf8)])
        try #require(
            try harness.run {
                harness.asked.contains(stranger.publicKey) && !harness.router.takeHandshakeFailures().isEmpty
            })
        // The same router still serves a client with a known key.
        let good = try libzmqClient(context, endpoint, serverKey: harness.serverKeys.publicKey, keys: known)
        defer { good.close() }
        try good.send([Array("still here".utf8)])
        try #require(try harness.run { harness.received.contains { $0.frames == [Array("still here".utf8)] } })
        #expect(harness.received.allSatisfy { $0.userID == "known" })
        // The ERROR said "400" to this libzmq client, which its monitor reports as an authentication failure.
        var event: MonitorEvent?
        try harness.run {
            event = try monitor.receive(dontWait: true).flatMap(MonitorEvent.init(message:))
            return event != nil
        }
        #expect(event?.isRefusal == true && event?.value == 400)
    }

    @Test("the own CURVE dealer talks to libzmq's CURVE ROUTER (ZAP lets it in) and gets the reply")
    func ownDealerToLibzmqRouter() async throws {
        let context = try ZMQContext()
        let serverKeys = try CurveKeyPair.generate()
        let clientKeys = try CurveKeyPair.generate()
        let zap = try ZAPHandler(context: context) { request in
            request.credentials.first.map(Curve.encode) == clientKeys.publicKey
                ? .accept(userID: "dealer") : .refuse(reason: "unknown key")
        }
        defer { zap.stopAndWait() }
        let router = try ZMQSocket(context: context, type: .router)
        defer { router.close() }
        try router.useCurveServer(secretKey: serverKeys.secretKey, domain: "test")
        try router.setLinger(ms: 0)
        try router.bind("tcp://127.0.0.1:*")
        let dealer = try SocketLoop(
            .ownDealer(
                ZMTPDealer.Options(
                    endpoint: router.lastEndpoint, maxFrameBytes: 1 << 20, reconnectInterval: .milliseconds(20),
                    curve: CurveCredentials(serverKey: serverKeys.publicKey, keys: clientKeys))),
            name: "own-curve-dealer")
        defer { dealer.stop() }
        dealer.send([Array("over curve".utf8)])
        var received: (message: Multipart, userID: String?)?
        let deadline = ContinuousClock.now + .seconds(10)
        while received == nil, ContinuousClock.now < deadline {
            _ = try poll([PollItem(.socket(router))], timeoutMs: 50)
            received = try router.receiveWithUserID(dontWait: true)
        }
        let message = try #require(received)
        #expect(message.message.last == Array("over curve".utf8))
        #expect(message.userID == "dealer")
        try router.send([message.message[0], Array("reply".utf8)], dontWait: true)
        #expect(await SocketLoopTests().firstMessage(dealer, timeout: .seconds(10)) == [Array("reply".utf8)])
    }

    @Test("the own dealer hears the own router's refusal with its reason, and tries again")
    func ownDealerRefused() throws {
        let harness = try CurveRouterHarness()
        defer { harness.router.close() }
        let reasons = Mutex<[String]>([])
        let dealer = try SocketLoop(
            .ownDealer(
                ZMTPDealer.Options(
                    endpoint: harness.router.lastEndpoint, maxFrameBytes: 1 << 20,
                    reconnectInterval: .milliseconds(20), maxReconnectInterval: .milliseconds(40),
                    curve: CurveCredentials(serverKey: harness.serverKeys.publicKey, keys: try CurveKeyPair.generate()),
                    onRefused: { reason in reasons.withLock { $0.append(reason) } })),
            name: "own-curve-dealer")
        defer { dealer.stop() }
        dealer.send([Array("held".utf8)])
        try #require(try harness.run { reasons.withLock { $0.count >= 2 } })
        #expect(reasons.withLock { $0.allSatisfy { $0 == "unknown key" } })
        #expect(harness.received.isEmpty)
    }

    @Test("pyzmq's CURVE DEALER is let in by the own router and gets its reply")
    func pyzmqClient() throws {
        let harness = try CurveRouterHarness()
        defer { harness.router.close() }
        let keys = try CurveKeyPair.generate()
        harness.allowed[keys.publicKey] = "python"
        let program = """
            import sys, zmq
            endpoint, server, public, secret = sys.argv[1:5]
            socket = zmq.Context().socket(zmq.DEALER)
            socket.curve_serverkey = server.encode()
            socket.curve_publickey = public.encode()
            socket.curve_secretkey = secret.encode()
            socket.linger = 0
            socket.connect(endpoint)
            socket.send_multipart([b"from python", b"x" * 1000])
            if socket.poll(10000):
                print(socket.recv_multipart()[-1].decode(), flush=True)
            """
        let output = try ChildProcess.pipes(1)[0]
        let process = try ChildProcess.spawn(
            "/usr/bin/env",
            [
                "python3", "-c", program, harness.router.lastEndpoint, harness.serverKeys.publicKey, keys.publicKey,
                keys.secretKey,
            ], environment: ProcessInfo.processInfo.environment, output: output[1])
        close(output[1])
        defer {
            process.signal(SIGTERM)
            close(output[0])
        }
        try #require(try harness.run { !harness.received.isEmpty })
        let message = harness.received[0]
        #expect(message.userID == "python")
        #expect(message.frames == [Array("from python".utf8), [UInt8](repeating: UInt8(ascii: "x"), count: 1000)])
        try harness.router.send(routingID: try #require(message.routingID), [Array("hello python".utf8)])
        try harness.run { !process.isRunning }
        let printed = String(decoding: FileHandle(fileDescriptor: output[0]).readDataToEndOfFile(), as: UTF8.self)
        #expect(printed == "hello python\n")
    }

    @Test("a hostile HELLO (wrong size) closes that connection with the reason noted; a good client goes on")
    func hostileHello() throws {
        let harness = try CurveRouterHarness()
        defer { harness.router.close() }
        let keys = try CurveKeyPair.generate()
        harness.allowed[keys.publicKey] = "good"
        let hostile = try rawConnection(harness.router.lastEndpoint)
        defer { close(hostile.fd) }
        hostile.write(ZMTP.greeting(mechanism: "CURVE", asServer: false))
        hostile.write(ZMTP.commandFrame(CurveZMTP.name("HELLO") + [UInt8](repeating: 0, count: 150)))
        var failures: [ZMTPRouter.HandshakeFailure] = []
        try #require(
            try harness.run {
                failures += harness.router.takeHandshakeFailures()
                return !failures.isEmpty
            })
        #expect(
            failures.count == 1 && failures[0].reason.contains("HELLO of 156 bytes")
                && failures[0].address == "127.0.0.1")
        #expect(hostile.waitForHangUp())
        let context = try ZMQContext()
        let good = try libzmqClient(
            context, harness.router.lastEndpoint, serverKey: harness.serverKeys.publicKey, keys: keys)
        defer { good.close() }
        try good.send([Array("fine".utf8)])
        try #require(try harness.run { !harness.received.isEmpty })
        #expect(harness.received[0].userID == "good")
    }

    @Test("a connection that never finishes its handshake is closed once the handshake time is up")
    func silentPeer() throws {
        let harness = try CurveRouterHarness(handshakeTimeout: .milliseconds(200))
        defer { harness.router.close() }
        let silent = try rawConnection(harness.router.lastEndpoint)
        defer { close(silent.fd) }
        silent.write(ZMTP.greeting(mechanism: "CURVE", asServer: false))
        // Accepted and greeted, then nothing: not closed before the time is up, closed after it.
        try harness.run(timeout: .milliseconds(50)) { false }
        harness.router.expireHandshakes()
        #expect(harness.router.takeHandshakeFailures().isEmpty)
        let deadline = ContinuousClock.now + .seconds(5)
        var failures: [ZMTPRouter.HandshakeFailure] = []
        while failures.isEmpty, ContinuousClock.now < deadline {
            try harness.run(timeout: .milliseconds(50)) { false }
            harness.router.expireHandshakes()
            failures = harness.router.takeHandshakeFailures()
        }
        #expect(failures.first?.reason.contains("no CURVE handshake within") == true)
        #expect(silent.waitForHangUp())
    }
}
