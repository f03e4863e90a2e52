#if canImport(Glibc)
    import Glibc
#endif

/// One peer's TCP connection: where its handshake stands, what it sent that is not parsed yet, and what
/// waits to be written to it.
final class ZMTPConnection {
    enum Stage { case greeting, handshake, open }

    let fd: Int32
    var stage = Stage.greeting
    var routingID: RoutingID?
    var input: [UInt8] = []
    var inputStart = 0
    var output: [UInt8] = []
    var outputStart = 0
    /// Listed among the connections to write at the next flush.
    var queued = false
    /// The kernel's buffer was full: the next write waits for EPOLLOUT.
    var waitingToWrite = false

    init(fd: Int32) { self.fd = fd }

    enum Transfer { case progress, wouldBlock, closed }

    /// Reads what the kernel holds (up to `scratch`'s size) onto the input: `.closed` when the peer hung up
    /// or the connection failed.
    func readAvailable(using scratch: inout [UInt8]) -> Transfer {
        let count = scratch.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress!, $0.count) }
        if count == 0 || (count < 0 && errno != EAGAIN && errno != EINTR) { return .closed }
        if count < 0 { return .wouldBlock }
        compactInput()
        input.append(contentsOf: scratch[0..<count])
        return .progress
    }

    /// Writes the output until it is all written (`.progress`), the kernel's buffer is full (`.wouldBlock`:
    /// the caller waits for the descriptor to be writable) or the connection failed (`.closed`).
    func writeOutput() -> Transfer {
        while outputStart < output.count {
            // MSG_NOSIGNAL: a peer that already closed is an error here, not a SIGPIPE that ends the process.
            let written = output.withUnsafeBytes { raw in
                Glibc.send(fd, raw.baseAddress! + outputStart, raw.count - outputStart, Int32(MSG_NOSIGNAL))
            }
            if written > 0 {
                outputStart += written
            } else if written < 0 && errno == EINTR {
                continue
            } else if written < 0 && errno == EAGAIN {
                return .wouldBlock
            } else {
                return .closed
            }
        }
        output.removeAll(keepingCapacity: true)
        outputStart = 0
        return .progress
    }

    /// Bytes queued for the peer and not yet written.
    var unsentBytes: Int { output.count - outputStart }

    /// Reads the peer's greeting and READY as they arrive: nil until READY is complete, then what it said,
    /// with the stage moved to `.open`.
    func takeHandshake(maxFrameBytes: Int) throws(ZMTP.Violation) -> ZMTP.Ready? {
        if stage == .greeting {
            guard let greeting = take(ZMTP.greeting.count) else { return nil }
            try ZMTP.checkGreeting(greeting)
            stage = .handshake
        }
        guard let frame = try takeFrame(maxBytes: maxFrameBytes) else { return nil }
        guard frame.command else { throw .init("a message before READY") }
        let ready = try ZMTP.readReady(frame.body)
        stage = .open
        return ready
    }

    func compactInput() {
        guard inputStart > 0 else { return }
        input.removeFirst(inputStart)
        inputStart = 0
    }

    func take(_ count: Int) -> ArraySlice<UInt8>? {
        guard input.count - inputStart >= count else { return nil }
        defer { inputStart += count }
        return input[inputStart..<inputStart + count]
    }

    /// The frame at the start of the input, when all of it has arrived.
    func takeFrame(maxBytes: Int) throws(ZMTP.Violation) -> (command: Bool, more: Bool, body: ArraySlice<UInt8>)? {
        guard let (header, flags, size) = try frameHeader(at: inputStart, maxBytes: maxBytes),
            input.count - inputStart - header >= size
        else { return nil }
        let bodyStart = inputStart + header
        inputStart = bodyStart + size
        return (flags & ZMTP.commandFlag != 0, flags & ZMTP.moreFlag != 0, input[bodyStart..<bodyStart + size])
    }

    enum Received {
        case message(Multipart, frameCount: Int, byteCount: Int, overLimit: Bool)
        case ping(context: ArraySlice<UInt8>)
        case otherCommand
    }

    /// The whole message (or command) at the start of the input, when all of it has arrived.
    func takeMessage(maxFrameBytes: Int, limits: ReceiveLimits) throws(ZMTP.Violation) -> Received? {
        // First find where it ends, so that nothing is taken before all of it is there.
        var at = inputStart
        var frameCount = 0
        while true {
            guard let (header, flags, size) = try frameHeader(at: at, maxBytes: maxFrameBytes),
                input.count - at - header >= size
            else { return nil }
            if flags & ZMTP.commandFlag != 0 {
                guard frameCount == 0 else { throw .init("a command inside a message") }
                let body = input[at + header..<at + header + size]
                inputStart = at + header + size
                return ZMTP.isPing(body) ? .ping(context: ZMTP.pingContext(body)) : .otherCommand
            }
            frameCount += 1
            at += header + size
            if flags & ZMTP.moreFlag == 0 { break }
        }
        var frames: Multipart = []
        frames.reserveCapacity(min(frameCount, limits.frames))
        var byteCount = 0
        var overLimit = false
        for number in 1...frameCount {
            let (header, _, size) = try frameHeader(at: inputStart, maxBytes: maxFrameBytes)!
            let bodyStart = inputStart + header
            byteCount += size
            if !overLimit, number > limits.frames || byteCount > limits.bytes { overLimit = true }
            if !overLimit {
                frames.append(Array(input[bodyStart..<bodyStart + size]))
            } else if number == 1 {
                frames.append(Array(input[bodyStart..<bodyStart + min(size, ReceiveLimits.keptOfFirstFrame)]))
            }
            inputStart = bodyStart + size
        }
        return .message(frames, frameCount: frameCount, byteCount: byteCount, overLimit: overLimit)
    }

    /// A frame header at `at`: its length, flags and body size; nil when it has not all arrived.
    private func frameHeader(at: Int, maxBytes: Int) throws(ZMTP.Violation) -> (Int, UInt8, Int)? {
        guard input.count - at >= 2 else { return nil }
        let flags = input[at]
        guard flags & ~(ZMTP.moreFlag | ZMTP.longFlag | ZMTP.commandFlag) == 0 else {
            throw .init("frame flags \(flags)")
        }
        var size: UInt64
        let header: Int
        if flags & ZMTP.longFlag != 0 {
            guard input.count - at >= 9 else { return nil }
            size = 0
            for index in 1...8 { size = size << 8 | UInt64(input[at + index]) }
            header = 9
        } else {
            size = UInt64(input[at + 1])
            header = 2
        }
        guard size <= UInt64(maxBytes) else { throw .init("a frame of \(size) bytes") }
        return (header, flags, Int(size))
    }

}

/// The parts of ZMTP 3 (rfc.zeromq.org/spec/23 and 37) a ROUTER or DEALER with the NULL mechanism needs: the
/// greeting, the READY command and its properties, PING and PONG, and the frame flags.
enum ZMTP {
    static let moreFlag: UInt8 = 0x01
    static let longFlag: UInt8 = 0x02
    static let commandFlag: UInt8 = 0x04
    /// The socket types a ROUTER talks to, and a DEALER.
    static let routerPeers: Set<String> = ["DEALER", "REQ", "ROUTER"]
    static let dealerPeers: Set<String> = ["ROUTER", "DEALER", "REP"]
    /// Bytes a connection may have waiting to be written before sends to it fail (as a full pipe).
    static let maxUnsentBytes = 64 << 20
    /// What one read takes from the kernel at most.
    static let readChunk = 64 * 1024

    struct Violation: Error {
        let what: String
        init(_ what: String) { self.what = what }
    }

    /// Signature, version 3.0, mechanism NULL, not as-server, filler: 64 bytes.
    static let greeting: [UInt8] = {
        var bytes = [UInt8](repeating: 0, count: 64)
        bytes[0] = 0xFF
        bytes[8] = 1
        bytes[9] = 0x7F
        bytes[10] = 3
        bytes[12...15] = ArraySlice("NULL".utf8)
        return bytes
    }()

    static func checkGreeting(_ greeting: ArraySlice<UInt8>) throws(Violation) {
        let bytes = Array(greeting)
        guard bytes[0] == 0xFF, bytes[9] & 1 == 1 else { throw .init("no ZMTP signature") }
        guard bytes[10] >= 3 else { throw .init("ZMTP version \(bytes[10])") }
        let mechanism = bytes[12..<32].prefix { $0 != 0 }
        guard mechanism.elementsEqual("NULL".utf8) else {
            throw .init("mechanism \(String(decoding: mechanism, as: UTF8.self))")
        }
    }

    /// A READY command with Socket-Type.
    static func ready(socketType: String) -> [UInt8] {
        var body: [UInt8] = [5] + Array("READY".utf8)
        body.append(UInt8("Socket-Type".utf8.count))
        body.append(contentsOf: "Socket-Type".utf8)
        withUnsafeBytes(of: UInt32(socketType.utf8.count).bigEndian) { body.append(contentsOf: $0) }
        body.append(contentsOf: socketType.utf8)
        return [commandFlag, UInt8(body.count)] + body
    }

    /// A peer's READY: its Socket-Type and, when it set one, its Identity.
    struct Ready {
        let socketType: String
        let identity: [UInt8]?
    }

    static func readReady(_ body: ArraySlice<UInt8>) throws(Violation) -> Ready {
        let bytes = Array(body)
        guard bytes.count >= 6, bytes[0] == 5, bytes[1..<6].elementsEqual("READY".utf8) else {
            throw .init("no READY")
        }
        var at = 6
        var socketType: String?
        var identity: [UInt8]?
        while at < bytes.count {
            let nameLength = Int(bytes[at])
            guard at + 1 + nameLength + 4 <= bytes.count else { throw .init("a truncated READY property") }
            let name = String(decoding: bytes[at + 1..<at + 1 + nameLength], as: UTF8.self)
            at += 1 + nameLength
            let valueLength = bytes[at..<at + 4].reduce(0) { $0 << 8 | Int($1) }
            at += 4
            guard valueLength <= bytes.count - at else { throw .init("a truncated READY property") }
            let value = Array(bytes[at..<at + valueLength])
            at += valueLength
            switch name.lowercased() {
            case "socket-type": socketType = String(decoding: value, as: UTF8.self)
            case "identity": identity = value
            default: break
            }
        }
        guard let socketType else { throw .init("a READY without Socket-Type") }
        return Ready(socketType: socketType, identity: identity)
    }

    /// `frames` as one message on the wire (no frames: one empty frame, as libzmq sends an empty message).
    static func appendMessage(_ frames: Multipart, to buffer: inout [UInt8]) {
        guard !frames.isEmpty else { return appendFrame([], more: false, to: &buffer) }
        for (index, frame) in frames.enumerated() { appendFrame(frame, more: index < frames.count - 1, to: &buffer) }
    }

    static func appendFrame(_ body: [UInt8], more: Bool, to buffer: inout [UInt8]) {
        let long = body.count > 255
        buffer.append((more ? moreFlag : 0) | (long ? longFlag : 0))
        if long {
            withUnsafeBytes(of: UInt64(body.count).bigEndian) { buffer.append(contentsOf: $0) }
        } else {
            buffer.append(UInt8(body.count))
        }
        buffer.append(contentsOf: body)
    }

    static func isPing(_ body: ArraySlice<UInt8>) -> Bool {
        body.count >= 7 && body.first == 4 && body.dropFirst().prefix(4).elementsEqual("PING".utf8)
    }

    /// PING's body: the name, a 2-byte TTL, then the context PONG sends back (at most 16 bytes of it, as
    /// the specification allows no more).
    static func pingContext(_ body: ArraySlice<UInt8>) -> ArraySlice<UInt8> { body.dropFirst(7).prefix(16) }

    static func pong(_ context: ArraySlice<UInt8>) -> [UInt8] {
        let body: [UInt8] = [4] + Array("PONG".utf8) + context
        return [commandFlag, UInt8(body.count)] + body
    }
}
