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

    /// The first message the bus's own ROUTER gets, driven on this thread (accept, handshake, read) until
    /// `timeout`.
    func firstMessage(_ router: ZMTPRouter, timeout: Duration = .seconds(10)) throws -> Multipart? {
        let deadline = ContinuousClock.now + timeout
        let limits = ReceiveLimits(frames: 16, bytes: 1 << 20)
        while ContinuousClock.now < deadline {
            if let message = router.receive(limits: limits) { return message.frames }
            router.flush()  // its greeting, which the dealer waits for before it sends what it holds
            _ = try poll([PollItem(.fileDescriptor(router.pollDescriptor))], timeoutMs: 50)
        }
        return nil
    }

    @Test("it serves tcp endpoints with an IPv4 or IPv6 address or a host name, and a port; others stay with libzmq")
    func endpoints() {
        for endpoint in [
            "tcp://127.0.0.1:5555", "tcp://localhost:1", "tcp://10.0.0.7:65535", "tcp://example.com:5555",
            "tcp://[::1]:5555",
        ] {
            #expect(ZMTPDealer.serves(endpoint), "\(endpoint)")
        }
        let others = ["tcp://*:5555", "tcp://127.0.0.1:*", "tcp://127.0.0.1:0", "ipc:///tmp/bus", "tcp://127.0.0.1"]
        for endpoint in others {
            #expect(!ZMTPDealer.serves(endpoint), "\(endpoint)")
        }
    }

    @Test(
        "the own router binds and the own dealer connects over IPv6 and by host name",
        arguments: [("tcp://[::1]:*", "[::1]"), ("tcp://localhost:*", "localhost")])
    func ipv6AndNames(bind: String, connectHost: String) throws {
        let router = try ZMTPRouter(bind: bind, maxFrameBytes: 1 << 20)
        defer { router.close() }
        let port = try #require(router.lastEndpoint.split(separator: ":").last)
        if bind.contains("::1") { #expect(router.lastEndpoint.hasPrefix("tcp://[::1]:")) }
        let client = try dealer("tcp://\(connectHost):\(port)")
        defer { client.stop() }
        client.send([Array("over \(connectHost)".utf8)])
        #expect(try firstMessage(router)?.last == Array("over \(connectHost)".utf8))
    }

    @Test("a host name that does not resolve fails the bind with the resolver's words")
    func unresolvableBind() {
        #expect {
            _ = try ZMTPRouter(bind: "tcp://no-such-host.invalid:5555", maxFrameBytes: 1 << 20)
        } throws: { error in
            (error as? ZMQError)?.operation.contains("cannot resolve 'no-such-host.invalid'") == true
        }
    }

    @Test("a server that accepts and never finishes the handshake is given up after the handshake time")
    func silentServer() throws {
        let (listener, port) = try #require(
            try? TCPSocket.listen(on: TCPSocket.ipv4("127.0.0.1")!, port: 0, backlog: 4).get())
        defer { close(listener) }
        var options = ZMTPDealer.Options(
            endpoint: "tcp://127.0.0.1:\(port)", maxFrameBytes: 1 << 20, reconnectInterval: .milliseconds(20),
            maxReconnectInterval: .milliseconds(40))
        options.handshakeTimeout = .milliseconds(300)
        let client = try SocketLoop(.ownDealer(options), name: "own-dealer")
        defer { client.stop() }
        let silent = try #require(RawPeer.accept(listener))
        defer { close(silent.fd) }
        let started = ContinuousClock.now
        // It greets, hears nothing, and hangs up once its time is up; not long before, nor much later.
        #expect(silent.waitForHangUp())
        #expect(ContinuousClock.now - started >= .milliseconds(250))
        let again = try #require(RawPeer.accept(listener))
        close(again.fd)
    }

    @Test("a socket the kernel joined to itself is told apart from one connected to a listener")
    func selfConnection() throws {
        /// `body` with `127.0.0.1:port` as a socket address and its length.
        func loopback(
            port: UInt16 = 0, _ body: (UnsafeMutablePointer<sockaddr>, UnsafeMutablePointer<socklen_t>) -> Int32
        ) -> Int32 {
            var address = sockaddr_in()
            address.sin_family = sa_family_t(AF_INET)
            address.sin_addr = TCPSocket.ipv4("127.0.0.1")!
            address.sin_port = port.bigEndian
            var length = socklen_t(MemoryLayout<sockaddr_in>.size)
            return withUnsafeMutablePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { body($0, &length) }
            }
        }
        // Bound to a port nobody listens on, a connect to that same address joins the socket to itself,
        // as a reconnecting dealer's may when the kernel hands it its server's free port.
        let alone = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(alone) }
        #expect(loopback { address, length in bind(alone, address, length.pointee) } == 0)
        var bound = sockaddr_in()
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &bound) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(alone, $0, &length) }
        }
        let port = UInt16(bigEndian: bound.sin_port)
        #expect(loopback(port: port) { address, length in Glibc.connect(alone, address, length.pointee) } == 0)
        #expect(TCPSocket.isConnectedToItself(alone))

        let listener = try #require(try? TCPSocket.listen(on: TCPSocket.ipv4("127.0.0.1")!, port: 0, backlog: 4).get())
        defer { close(listener.fd) }
        let client = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(client) }
        let connected = loopback(port: listener.port) { address, length in Glibc.connect(client, address, length.pointee) }
        #expect(connected == 0)
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

    @Test("with batching, a full batch is written as it fills; what does not fill one waits for the flush")
    func fullBatchAtOnce() throws {
        let context = try ZMQContext()
        let server = try ZMQSocket(context: context, type: .router)
        defer { server.close() }
        try server.bind("tcp://127.0.0.1:*")
        var options = ZMTPDealer.Options(endpoint: server.lastEndpoint, maxFrameBytes: 1 << 20)
        options.batching = Wire.frameBatching
        let dealer = try ZMTPDealer(options)
        defer { dealer.close() }
        func message(_ number: Int) -> Multipart {
            [Array("SKB2C".utf8) + [6] + Array("CANCEL".utf8) + [1, UInt8(number)]]
        }
        /// Drives the dealer on this thread (it flushes only when `flushing`) until the server has a message.
        func serverReceives(flushing: Bool) throws -> Multipart? {
            let deadline = ContinuousClock.now + .seconds(10)
            while ContinuousClock.now < deadline {
                if let frames = try server.receive(dontWait: true) { return frames }
                if flushing { dealer.flush() }
                let items = [
                    PollItem(.fileDescriptor(dealer.pollDescriptor), output: dealer.wantsOutput),
                    PollItem(.socket(server)),
                ]
                let ready = try poll(items, timeoutMs: 20)
                dealer.handle(readable: ready.readable[0], writable: ready.writable[0])
            }
            return nil
        }
        try dealer.send(message(0))
        let first = try #require(try serverReceives(flushing: true))
        #expect(first.count == 2 && Wire.isBatch(first[1]))  // the first message announces batching: a batch of one
        for number in 1...31 { try dealer.send(message(number)) }
        let full = try #require(try serverReceives(flushing: false), "the full batch waited for the flush")
        let batched = Wire.messages(in: Array(full.dropFirst()), Wire.frameBatching)
        #expect(batched.map { $0[0].last } == (1...30).map { UInt8($0) })
        let rest = try #require(try serverReceives(flushing: true))
        #expect(rest.dropFirst().first?.last == 31)
    }

    @Test("what is sent while no peer listens goes out, in order, once one does, after a lost connection too")
    func heldUntilConnected() async throws {
        let context = try ZMQContext()
        // The bus's own ROUTER first: it closes its listener as it closes, so the port is free at once for
        // libzmq's (which closes a socket's listener on its I/O thread, a moment after the socket's owner).
        let first = try ZMTPRouter(bind: "tcp://127.0.0.1:*", maxFrameBytes: 1 << 20)
        let endpoint = first.lastEndpoint
        let client = try dealer(endpoint)
        defer { client.stop() }
        client.send([Array("one".utf8)])
        let hello = try #require(try firstMessage(first))
        #expect(hello.last == Array("one".utf8))
        first.close()
        // Nobody listens now: these wait in the dealer while it tries again and again.
        for number in 0..<50 { client.send([Array("while away \(number)".utf8)]) }
        let second = try router(context, endpoint)
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
            // End of stream, or an error other than "nothing yet" (read sets errno only when it fails: a
            // stale EAGAIN beside a 0 must not hide the hang-up).
            if count == 0 || (count < 0 && errno != EAGAIN) { return (received, true) }
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
