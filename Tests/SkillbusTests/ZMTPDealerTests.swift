import Foundation
import Testing

@testable import Skillbus
@testable import SkillbusZMQ

#if canImport(Glibc)
    import Glibc
#endif

@Suite("The workers' own DEALER speaks ZMTP to libzmq's ROUTER and to raw peers, and reconnects")
struct ZMTPDealerTests {
    let helper = SocketLoopTests()

    func dealer(_ endpoint: String, maxFrameBytes: Int = 1 << 20) throws -> SocketLoop {
        try SocketLoop(
            .ownDealer(
                ZMTPDealer.Options(
                    endpoint: endpoint, maxFrameBytes: maxFrameBytes, reconnectInterval: .milliseconds(20),
                    maxReconnectInterval: .milliseconds(100))),
            name: "own-dealer")
    }

    func router(_ context: ZMQContext, _ endpoint: String) throws -> SocketLoop {
        try SocketLoop(context: context, type: .router, name: "router") { socket in
            try socket.setRouterMandatory(true)
            try socket.bind(endpoint)
        }
    }

    /// A router bound to `endpoint` once its port is free: libzmq closes a stopped socket's listener on its
    /// I/O thread a moment after the socket's own thread has let go of it, so binding at once can find the
    /// port still taken.
    func routerOnceFree(_ context: ZMQContext, _ endpoint: String) async throws -> SocketLoop {
        let deadline = ContinuousClock.now + .seconds(10)
        while true {
            do {
                return try router(context, endpoint)
            } catch let error as ZMQError where error.errno == EADDRINUSE && ContinuousClock.now < deadline {
                try await Task.sleep(for: .milliseconds(5))
            }
        }
    }

    @Test("it serves tcp endpoints with an IPv4 address or localhost and a port; others stay with libzmq")
    func endpoints() {
        for endpoint in ["tcp://127.0.0.1:5555", "tcp://localhost:1", "tcp://10.0.0.7:65535"] {
            #expect(ZMTPDealer.serves(endpoint), "\(endpoint)")
        }
        for endpoint in [
            "tcp://*:5555", "tcp://127.0.0.1:*", "tcp://127.0.0.1:0", "tcp://example.com:5555", "tcp://[::1]:5555",
            "ipc:///tmp/bus", "tcp://127.0.0.1",
        ] {
            #expect(!ZMTPDealer.serves(endpoint), "\(endpoint)")
        }
    }

    @Test("a socket the kernel joined to itself is told apart from one connected to a listener")
    func selfConnection() throws {
        func loopback(port: UInt16) -> sockaddr_in {
            var address = sockaddr_in()
            address.sin_family = sa_family_t(AF_INET)
            address.sin_addr = TCPSocket.ipv4("127.0.0.1")!
            address.sin_port = port.bigEndian
            return address
        }
        func call(_ fd: Int32, _ address: inout sockaddr_in, _ body: (Int32, UnsafePointer<sockaddr>, socklen_t) -> Int32) -> Int32 {
            withUnsafePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { body(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
            }
        }
        // Bound to a port nobody listens on, a connect to that same address joins the socket to itself,
        // as a reconnecting dealer's may when the kernel hands it its server's free port.
        let alone = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(alone) }
        var address = loopback(port: 0)
        #expect(call(alone, &address, bind) == 0)
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(alone, $0, &length) }
        }
        #expect(call(alone, &address, Glibc.connect) == 0)
        #expect(TCPSocket.isConnectedToItself(alone))

        guard case .success(let listener) = TCPSocket.listen(on: TCPSocket.ipv4("127.0.0.1")!, port: 0, backlog: 4) else {
            Issue.record("no listener")
            return
        }
        defer { close(listener.fd) }
        let client = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(client) }
        var server = loopback(port: listener.port)
        #expect(call(client, &server, Glibc.connect) == 0)
        #expect(!TCPSocket.isConnectedToItself(client))
    }

    @Test("messages cross both ways with every frame intact, empty and long ones too")
    func roundTrip() async throws {
        let context = try ZMQContext()
        let server = try router(context, "tcp://127.0.0.1:*")
        defer { server.stop() }
        let client = try dealer(server.endpoint)
        defer { client.stop() }
        let big = [UInt8](repeating: 7, count: 300_000)
        client.send([Array("hello".utf8), [], big])
        let received = try #require(await helper.firstMessage(server))
        #expect(received.count == 4 && received[1] == Array("hello".utf8) && received[2].isEmpty && received[3] == big)
        server.send([received[0], Array("back".utf8), big])
        #expect(await helper.firstMessage(client) == [Array("back".utf8), big])
    }

    @Test("what is sent while no peer listens goes out, in order, once one does, after a lost connection too")
    func heldUntilConnected() async throws {
        let context = try ZMQContext()
        let first = try router(context, "tcp://127.0.0.1:*")
        let endpoint = first.endpoint
        let client = try dealer(endpoint)
        defer { client.stop() }
        client.send([Array("one".utf8)])
        let hello = try #require(await helper.firstMessage(first))
        #expect(hello.last == Array("one".utf8))
        await first.stopAndWait()
        // Nobody listens now: these wait in the dealer while it tries again and again.
        for number in 0..<50 { client.send([Array("while away \(number)".utf8)]) }
        let second = try await routerOnceFree(context, endpoint)
        defer { second.stop() }
        let messages = second.messages
        let texts = await withDeadline(.seconds(10)) {
            var texts: [String] = []
            for await message in messages {
                texts.append(String(decoding: message.last ?? [], as: UTF8.self))
                if texts.count == 50 { break }
            }
            return texts
        }
        #expect(texts == (0..<50).map { "while away \($0)" })
    }

    @Test("a frame above the cap closes the connection; the dealer connects again and goes on")
    func oversizedFrame() async throws {
        let context = try ZMQContext()
        let server = try router(context, "tcp://127.0.0.1:*")
        defer { server.stop() }
        let client = try dealer(server.endpoint, maxFrameBytes: 1000)
        defer { client.stop() }
        client.send([Array("first".utf8)])
        let first = try #require(await helper.firstMessage(server))
        server.send([first[0], [UInt8](repeating: 1, count: 5000)])
        server.send([first[0], Array("small".utf8)])  // on the closed connection: lost, as with libzmq
        // Sends go on until one arrives over the new connection, with a new routing id.
        var reconnected: Multipart?
        for attempt in 0..<100 where reconnected == nil {
            client.send([Array("again \(attempt)".utf8)])
            if let message = await helper.firstMessage(server, timeout: .milliseconds(100)), message[0] != first[0] {
                reconnected = message
            }
        }
        let again = try #require(reconnected)
        server.send([again[0], Array("welcome back".utf8)])
        let messages = client.messages
        let answered = await withDeadline(.seconds(10)) {
            for await message in messages where message == [Array("welcome back".utf8)] { return true }
            return false
        }
        #expect(answered == true)
    }

    @Test("a raw peer: PING gets PONG with its context; after a hang-up, or from a peer of the wrong type, it connects again")
    func rawPeer() async throws {
        let (listener, port) = try #require(try? TCPSocket.listen(on: TCPSocket.ipv4("127.0.0.1")!, port: 0, backlog: 4).get())
        defer { close(listener) }
        let client = try dealer("tcp://127.0.0.1:\(port)")
        defer { client.stop() }

        let peer = try #require(RawPeer.accept(listener))
        peer.write(ZMTP.greeting + ZMTP.ready(socketType: "ROUTER"))
        let ping: [UInt8] = [ZMTP.commandFlag, 9, 4] + Array("PING".utf8) + [0, 10, 0xAB, 0xCD]
        peer.write(ping)
        let pong = ZMTP.pong([0xAB, 0xCD][...])
        // The dealer's greeting and READY come first, then the PONG.
        #expect(peer.read(until: { $0.count >= 64 && Array($0.dropFirst(64)).contains(pong) }) != nil)

        // The peer hangs up: the dealer connects again. This one is a PUB, no ROUTER: the dealer hangs up on
        // it and tries again.
        close(peer.fd)
        let wrong = try #require(RawPeer.accept(listener))
        wrong.write(ZMTP.greeting + ZMTP.ready(socketType: "PUB"))
        #expect(wrong.waitForHangUp())
        close(wrong.fd)
        let retried = try #require(RawPeer.accept(listener))
        close(retried.fd)
    }
}

/// One accepted TCP connection, read and written with deadlines, for the tests' raw ZMTP peers.
struct RawPeer {
    let fd: Int32

    static func accept(_ listener: Int32, within milliseconds: Int32 = 5000) -> RawPeer? {
        var item = pollfd(fd: listener, events: Int16(POLLIN), revents: 0)
        guard poll(&item, 1, milliseconds) == 1, let fd = TCPSocket.accept(listener) else { return nil }
        return RawPeer(fd: fd)
    }

    func write(_ bytes: [UInt8]) {
        _ = bytes.withUnsafeBytes { send(fd, $0.baseAddress!, $0.count, Int32(MSG_NOSIGNAL)) }
    }

    /// What the peer read until `done` holds for it (nil when the other side hung up or 5 s passed first).
    func read(until done: ([UInt8]) -> Bool) -> [UInt8]? {
        let (received, _) = readUntil(done)
        return done(received) ? received : nil
    }

    /// Whether the other side closed the connection within 5 s (whatever it wrote before).
    func waitForHangUp() -> Bool { readUntil { _ in false }.hungUp }

    private func readUntil(_ done: ([UInt8]) -> Bool) -> (bytes: [UInt8], hungUp: Bool) {
        var received: [UInt8] = []
        let deadline = ContinuousClock.now + .seconds(5)
        var buffer = [UInt8](repeating: 0, count: 4096)
        while !done(received), ContinuousClock.now < deadline {
            var item = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            guard poll(&item, 1, 100) >= 0 else { break }
            guard item.revents != 0 else { continue }
            let count = buffer.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress!, $0.count) }
            if count <= 0 && errno != EAGAIN { return (received, true) }
            if count > 0 { received += buffer[0..<count] }
        }
        return (received, false)
    }
}

extension Array where Element == UInt8 {
    func contains(_ bytes: [UInt8]) -> Bool {
        guard bytes.count <= count else { return false }
        return (0...(count - bytes.count)).contains { self[$0..<$0 + bytes.count].elementsEqual(bytes) }
    }
}
