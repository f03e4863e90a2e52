import Testing

@testable import SkillbusZMQ

@Suite("ZMTP as the bus's own ROUTER reads and writes it: greeting, READY, frames, limits")
struct ZMTPTests {
    typealias Connection = ZMTPConnection

    /// A connection whose peer has sent `bytes` so far.
    func connection(receiving bytes: [UInt8]) -> Connection {
        let connection = Connection(fd: -1)
        connection.input = bytes
        return connection
    }

    /// `frames` as a peer writes them (the same encoder the router writes with).
    func wire(_ frames: [[UInt8]]) -> [UInt8] {
        var bytes: [UInt8] = []
        ZMTP.appendMessage(frames, to: &bytes)
        return bytes
    }

    @Test("a ZMTP 3 NULL greeting passes; another signature, version or mechanism is refused")
    func greetings() throws {
        try ZMTP.checkGreeting(ZMTP.greeting[...])
        var version31 = ZMTP.greeting
        version31[11] = 1
        try ZMTP.checkGreeting(version31[...])
        var http = ZMTP.greeting
        http.replaceSubrange(0..<4, with: Array("GET ".utf8))
        #expect(throws: ZMTP.Violation.self) { try ZMTP.checkGreeting(http[...]) }
        var version2 = ZMTP.greeting
        version2[10] = 2
        #expect(throws: ZMTP.Violation.self) { try ZMTP.checkGreeting(version2[...]) }
        var curve = ZMTP.greeting
        curve.replaceSubrange(12..<17, with: Array("CURVE".utf8))
        #expect(throws: ZMTP.Violation.self) { try ZMTP.checkGreeting(curve[...]) }
    }

    @Test("READY carries the socket type, and an Identity when the peer set one; a broken one is refused")
    func ready() throws {
        let ours = ZMTP.ready(socketType: "ROUTER")
        #expect(ours[0] == ZMTP.commandFlag && Int(ours[1]) == ours.count - 2)
        #expect(try ZMTP.readReady(ours[2...]).socketType == "ROUTER")
        var body: [UInt8] = [5] + Array("READY".utf8)
        for (name, value) in [("Socket-Type", "DEALER"), ("Identity", "me")] {
            body += [UInt8(name.utf8.count)] + Array(name.utf8) + [0, 0, 0, UInt8(value.utf8.count)] + Array(value.utf8)
        }
        let ready = try ZMTP.readReady(body[...])
        #expect(ready.socketType == "DEALER" && ready.identity == Array("me".utf8))
        #expect(throws: ZMTP.Violation.self) { try ZMTP.readReady(body.dropLast(1)) }
        #expect(throws: ZMTP.Violation.self) { try ZMTP.readReady(([5] + Array("HELLO".utf8))[...]) }
        #expect(throws: ZMTP.Violation.self) { try ZMTP.readReady(([5] + Array("READY".utf8))[...]) }
    }

    @Test("a message is answered only once all its frames are there, short and long ones alike")
    func wholeMessages() throws {
        let frames: [[UInt8]] = [Array("envelope".utf8), [UInt8](repeating: 7, count: 300), []]
        let bytes = wire(frames)
        #expect(bytes[0] == ZMTP.moreFlag && bytes[10] == ZMTP.moreFlag | ZMTP.longFlag)
        let limits = ReceiveLimits(frames: 32, bytes: 1 << 20)
        // Arriving in two parts: nothing until the last byte.
        let connection = connection(receiving: Array(bytes.dropLast(100)))
        #expect(try connection.takeMessage(maxFrameBytes: 1 << 20, limits: limits) == nil)
        // The whole frames that came are taken already: the last one waits for its bytes.
        #expect(connection.partial.frameCount == 1 && connection.inputStart == 10)
        connection.input += bytes.suffix(100) + wire([Array("next".utf8)])
        guard case .message(let got, let count, let byteCount, let overLimit)? =
            try connection.takeMessage(maxFrameBytes: 1 << 20, limits: limits)
        else { Issue.record("no message"); return }
        #expect(got == frames && count == 3 && byteCount == 308 && !overLimit)
        guard case .message(let next, _, _, _)? = try connection.takeMessage(maxFrameBytes: 1 << 20, limits: limits)
        else { Issue.record("no second message"); return }
        #expect(next == [Array("next".utf8)])
    }

    @Test("past the receive limits frames are counted, not kept; a frame over the hard cap is a violation")
    func limits() throws {
        let frames = (0..<5).map { [UInt8](repeating: UInt8($0), count: 10) }
        let connection = connection(receiving: wire(frames))
        guard case .message(let kept, let count, let byteCount, let overLimit)? =
            try connection.takeMessage(maxFrameBytes: 1000, limits: ReceiveLimits(frames: 3, bytes: 1000))
        else { Issue.record("no message"); return }
        #expect(kept == Array(frames.prefix(3)) && count == 5 && byteCount == 50 && overLimit)
        let giant = self.connection(receiving: wire([[UInt8](repeating: 1, count: 2000)]))
        #expect(throws: ZMTP.Violation.self) {
            try giant.takeMessage(maxFrameBytes: 1000, limits: ReceiveLimits(frames: 3, bytes: 1000))
        }
        var badFlags = wire([[1]])
        badFlags[0] = 0x80
        #expect(throws: ZMTP.Violation.self) {
            try self.connection(receiving: badFlags).takeMessage(maxFrameBytes: 1000, limits: ReceiveLimits(frames: 3, bytes: 1000))
        }
    }

    @Test(
        "a message far past the limits is discarded as it arrives: its size is counted, the start of its first frame kept, memory stays bounded",
        arguments: [(frames: 1000, frameBytes: 64 << 10), (frames: 3, frameBytes: 1 << 20)])
    func discardedAsItArrives(frames count: Int, frameBytes: Int) throws {
        let limits = ReceiveLimits(frames: 32, bytes: 256 << 10)
        let frame = [UInt8](repeating: 0x5A, count: frameBytes)
        let connection = connection(receiving: [])
        var message: ZMTPConnection.Received?
        var most = 0
        // The frames come 64 KiB at a time, as reads do; each frame is written only as it is needed.
        var pending: [UInt8] = []
        var sent = 0
        while message == nil {
            if pending.isEmpty {
                guard sent < count else { break }
                sent += 1
                pending = wire([frame])
                if sent < count { pending[0] |= ZMTP.moreFlag }
            }
            let chunk = pending.prefix(ZMTP.readChunk)
            pending.removeFirst(chunk.count)
            connection.compactInput()
            connection.input += chunk
            message = try connection.takeMessage(maxFrameBytes: 2 << 20, limits: limits)
            most = max(most, connection.input.count)
        }
        guard case .message(let kept, let frameCount, let byteCount, let overLimit)? = message else {
            Issue.record("no message after \(sent) frames"); return
        }
        #expect(frameCount == count && byteCount == count * frameBytes && overLimit)
        // Within the limits the first frames are kept whole; past them, only the first frame's start.
        let keptWhole = frameBytes <= limits.bytes ? min(limits.frames, limits.bytes / frameBytes) : 0
        #expect(kept.count == max(keptWhole, 1))
        if keptWhole == 0 { #expect(kept[0].count == ReceiveLimits.keptOfFirstFrame) }
        // Never more than a frame within the limits, or one read, waiting in the input.
        #expect(most <= max(frameBytes <= limits.bytes ? frameBytes : 0, ZMTP.readChunk) + 9, "\(most)")
        // The next message is read as usual.
        connection.input += wire([Array("next".utf8)])
        guard case .message(let next, 1, 4, false)? = try connection.takeMessage(maxFrameBytes: 2 << 20, limits: limits)
        else { Issue.record("no next message"); return }
        #expect(next == [Array("next".utf8)])
    }

    @Test("PING is answered with its context; a command inside a message is a violation")
    func commands() throws {
        let ping: [UInt8] = [ZMTP.commandFlag, 9, 4] + Array("PING".utf8) + [0, 10, 0xAB, 0xCD]
        let connection = connection(receiving: ping)
        guard case .ping(let context)? =
            try connection.takeMessage(maxFrameBytes: 1000, limits: ReceiveLimits(frames: 3, bytes: 1000))
        else { Issue.record("no PING"); return }
        #expect(Array(context) == [0xAB, 0xCD])
        #expect(ZMTP.pong(context) == [ZMTP.commandFlag, 7, 4] + Array("PONG".utf8) + [0xAB, 0xCD])
        // A context longer than the 16 bytes the specification allows is cut, not echoed whole.
        let long: [UInt8] = [ZMTP.commandFlag, 207, 4] + Array("PING".utf8) + [0, 10] + [UInt8](repeating: 1, count: 200)
        guard case .ping(let cut)? =
            try self.connection(receiving: long).takeMessage(maxFrameBytes: 1000, limits: ReceiveLimits(frames: 3, bytes: 1000))
        else { Issue.record("no long PING"); return }
        #expect(cut.count == 16 && ZMTP.pong(cut).count == 23)
        let inside = wire([[1]])
        var mixed = inside
        mixed[0] = ZMTP.moreFlag
        mixed += ping
        #expect(throws: ZMTP.Violation.self) {
            try self.connection(receiving: mixed).takeMessage(maxFrameBytes: 1000, limits: ReceiveLimits(frames: 3, bytes: 1000))
        }
    }

    @Test("the router serves tcp endpoints on IPv4 and IPv6 addresses, * and host names; others stay with libzmq")
    func endpoints() {
        for endpoint in [
            "tcp://127.0.0.1:*", "tcp://*:5555", "tcp://0.0.0.0:1", "tcp://localhost:5555", "tcp://[::1]:5555",
            "tcp://example.com:5555",
        ] {
            #expect(ZMTPRouter.serves(endpoint), "\(endpoint)")
        }
        for endpoint in ["ipc:///tmp/bus", "tcp://127.0.0.1", "tcp://[::1]", "tcp://:5555", "tcp://h:x", "inproc://x"] {
            #expect(!ZMTPRouter.serves(endpoint), "\(endpoint)")
        }
    }
}
