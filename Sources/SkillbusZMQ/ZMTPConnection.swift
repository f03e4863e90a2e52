#if canImport(Glibc)
    import Glibc
#endif

/// One peer's TCP connection: where its handshake stands, what it sent that is not parsed yet, and what
/// waits to be written to it.
final class ZMTPConnection {
    enum Stage { case greeting, handshake, open }

    /// The mechanism's state: NULL; CURVE's handshake on one side or the other; CURVE's boxes once open.
    enum Security {
        case null
        case curveServer(CurveServerHandshake)
        case curveClient(CurveClientHandshake)
        case curveOpen(CurveBoxes)
    }

    let fd: Int32
    var stage = Stage.greeting
    var security: Security
    var routingID: RoutingID?
    /// The User-Id the server's authorisation gave this peer (CURVE); nil with NULL.
    var userID: String?
    /// The peer's address, for the reasons a refusal or a failed handshake is logged with.
    var address = ""
    /// Refused: what is queued (an ERROR) is written, then the connection closes; nothing more is read.
    var closing = false
    /// With CURVE once open: frames as they arrived, sealed; `unseal` opens whole ones onto `input`, as plain
    /// ZMTP frames, so that the same parsing serves both mechanisms.
    var sealed: [UInt8] = []
    var sealedStart = 0
    var input: [UInt8] = []
    var inputStart = 0
    /// The message being read, while its frames arrive (`takeMessage`).
    var partial = PartialMessage()
    var output: [UInt8] = []
    var outputStart = 0
    /// Listed among the connections to write at the next flush.
    var queued = false
    /// The kernel's buffer was full: the next write waits for EPOLLOUT.
    var waitingToWrite = false

    /// When the connection was accepted or made: a handshake has a bounded time from here.
    let openedAt = ContinuousClock.now

    init(fd: Int32, security: Security = .null) {
        self.fd = fd
        self.security = security
    }

    var isCurve: Bool {
        if case .null = security { return false }
        return true
    }

    enum Transfer { case progress, wouldBlock, closed }

    /// Reads what the kernel holds (up to `scratch`'s size) onto the input: `.closed` when the peer hung up
    /// or the connection failed.
    func readAvailable(using scratch: inout [UInt8]) -> Transfer {
        let count = scratch.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress!, $0.count) }
        if count == 0 || (count < 0 && errno != EAGAIN && errno != EINTR) { return .closed }
        if count < 0 { return .wouldBlock }
        if case .curveOpen = security {
            if sealedStart > 0 {
                sealed.removeFirst(sealedStart)
                sealedStart = 0
            }
            sealed.append(contentsOf: scratch[0..<count])
        } else {
            compactInput()
            input.append(contentsOf: scratch[0..<count])
        }
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
    /// with the stage moved to `.open`. NULL only: CURVE's handshake is `takeGreeting` and `takeCommand`.
    func takeHandshake(maxFrameBytes: Int) throws(ZMTP.Violation) -> ZMTP.Ready? {
        guard try takeGreeting() else { return nil }
        guard let body = try takeCommand(maxFrameBytes: maxFrameBytes) else { return nil }
        let ready = try ZMTP.readReady(body)
        stage = .open
        return ready
    }

    /// Reads the peer's greeting once it has arrived (true from then on), checking that it asks for this
    /// connection's mechanism.
    func takeGreeting() throws(ZMTP.Violation) -> Bool {
        guard stage == .greeting else { return true }
        guard let greeting = take(ZMTP.greetingBytes) else { return false }
        try ZMTP.checkGreeting(greeting, mechanism: isCurve ? "CURVE" : "NULL")
        stage = .handshake
        return true
    }

    /// Why a greeting that has not all arrived (its peer left) could never have passed: the mechanism it
    /// names, when that much came and it is not `expected`; nil otherwise.
    func partialGreetingProblem(expecting expected: String) -> String? {
        guard stage == .greeting, input.count - inputStart >= 32 else { return nil }
        let mechanism = input[inputStart + 12..<inputStart + 32].prefix { $0 != 0 }
        guard !mechanism.elementsEqual(expected.utf8) else { return nil }
        return ZMTP.mechanismMismatch(Array(mechanism), expected)
    }

    /// The body of the handshake command at the start of the input, when all of it has arrived.
    func takeCommand(maxFrameBytes: Int) throws(ZMTP.Violation) -> ArraySlice<UInt8>? {
        guard let frame = try takeFrame(maxBytes: maxFrameBytes) else { return nil }
        guard frame.command else { throw .init("a message before the handshake ended") }
        return frame.body
    }

    /// The CURVE handshake ended: what arrived after its last command is sealed MESSAGEs, and so is all
    /// that arrives from now on.
    func openCurve(_ boxes: CurveBoxes) {
        security = .curveOpen(boxes)
        stage = .open
        sealed = Array(input[inputStart...])
        sealedStart = 0
        input.removeAll()
        inputStart = 0
    }

    /// Opens every whole MESSAGE that has arrived onto the input as a plain ZMTP frame. A MESSAGE that is
    /// malformed, replayed or forged throws: the connection must close.
    func unseal(maxFrameBytes: Int) throws(ZMTP.Violation) {
        guard case .curveOpen(var boxes) = security else { return }
        // Taken out while it works, so that the enum holds no second reference to its buffers.
        security = .null
        defer { security = .curveOpen(boxes) }
        let maxSealed = maxFrameBytes + CurveZMTP.messageOverhead
        var opened = false
        while let (header, _, size) = try ZMTP.frameHeader(in: sealed, at: sealedStart, maxBytes: maxSealed),
            sealed.count - sealedStart - header >= size
        {
            let bodyStart = sealedStart + header
            sealedStart = bodyStart + size
            let (more, command, frame) = try boxes.open(sealed[bodyStart..<bodyStart + size])
            if !opened {
                compactInput()
                opened = true
            }
            ZMTP.appendFrameHeader(size: frame.count, more: more, command: command, to: &input)
            input.append(contentsOf: frame)
        }
    }

    /// Queues `frames` for the peer: as they are with NULL, each sealed in a MESSAGE with CURVE.
    func queueMessage(_ frames: Multipart) throws(ZMTP.Violation) {
        guard case .curveOpen(var boxes) = security else { return ZMTP.appendMessage(frames, to: &output) }
        security = .null
        defer { security = .curveOpen(boxes) }
        guard !frames.isEmpty else { return try boxes.seal([], more: false, command: false, to: &output) }
        for (index, frame) in frames.enumerated() {
            try boxes.seal(frame, more: index < frames.count - 1, command: false, to: &output)
        }
    }

    /// Queues PONG for a PING's `context`: sealed too with CURVE, where commands travel in MESSAGEs.
    func queuePong(_ context: ArraySlice<UInt8>) throws(ZMTP.Violation) {
        guard case .curveOpen(var boxes) = security else { return output.append(contentsOf: ZMTP.pong(context)) }
        security = .null
        defer { security = .curveOpen(boxes) }
        try boxes.seal([4] + Array("PONG".utf8) + context, more: false, command: true, to: &output)
    }

    /// Wipes the CURVE keys this connection holds: it closed.
    func forgetKeys() {
        switch security {
        case .null: break
        case .curveServer(var handshake):
            security = .null
            handshake.forget()
        case .curveClient(var handshake):
            security = .null
            handshake.forget()
        case .curveOpen(var boxes):
            security = .null
            boxes.forget()
        }
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

    /// What has arrived of a message whose last frame has not: the frames kept so far, its size so far, and
    /// the body bytes of a frame past the limits that are still to come and be discarded.
    struct PartialMessage {
        var frames: Multipart = []
        var frameCount = 0
        var byteCount = 0
        var overLimit = false
        var discarding = 0
        var discardedFrameHasMore = false
    }

    /// The next message (or command) at the start of the input; nil until its last frame has arrived. A
    /// message is taken frame by frame as it arrives: frames within `limits` are kept; once it passes them
    /// (a frame too many, or its bytes in all too many) the rest is discarded as it comes, keeping only the
    /// start of its first frame (`ReceiveLimits.keptOfFirstFrame`, to answer with). So a message of any size
    /// holds no more than its limits and one read in memory.
    func takeMessage(maxFrameBytes: Int, limits: ReceiveLimits) throws(ZMTP.Violation) -> Received? {
        while true {
            if partial.discarding > 0 {
                let discarded = min(partial.discarding, input.count - inputStart)
                inputStart += discarded
                partial.discarding -= discarded
                guard partial.discarding == 0 else { return nil }
                if !partial.discardedFrameHasMore { return takePartial() }
            }
            guard let (header, flags, size) = try frameHeader(at: inputStart, maxBytes: maxFrameBytes) else { return nil }
            let bodyStart = inputStart + header
            let arrived = input.count - bodyStart
            if flags & ZMTP.commandFlag != 0 {
                guard partial.frameCount == 0 else { throw .init("a command inside a message") }
                guard arrived >= size else { return nil }
                let body = input[bodyStart..<bodyStart + size]
                inputStart = bodyStart + size
                return ZMTP.isPing(body) ? .ping(context: ZMTP.pingContext(body)) : .otherCommand
            }
            let more = flags & ZMTP.moreFlag != 0
            let number = partial.frameCount + 1
            if !partial.overLimit, number <= limits.frames, partial.byteCount + size <= limits.bytes {
                guard arrived >= size else { return nil }
                partial.frames.append(Array(input[bodyStart..<bodyStart + size]))
                inputStart = bodyStart + size
            } else {
                let kept = number == 1 ? min(size, ReceiveLimits.keptOfFirstFrame) : 0
                guard arrived >= kept else { return nil }
                if number == 1 { partial.frames.append(Array(input[bodyStart..<bodyStart + kept])) }
                inputStart = bodyStart + kept
                partial.overLimit = true
                partial.discarding = size - kept
                partial.discardedFrameHasMore = more
            }
            partial.frameCount = number
            partial.byteCount += size
            if partial.discarding == 0, !more { return takePartial() }
        }
    }

    /// The message `partial` holds, which has ended; `partial` starts over.
    private func takePartial() -> Received {
        defer { partial = PartialMessage() }
        return .message(
            partial.frames, frameCount: partial.frameCount, byteCount: partial.byteCount, overLimit: partial.overLimit)
    }

    private func frameHeader(at: Int, maxBytes: Int) throws(ZMTP.Violation) -> (Int, UInt8, Int)? {
        try ZMTP.frameHeader(in: input, at: at, maxBytes: maxBytes)
    }

}

/// The parts of ZMTP 3 (rfc.zeromq.org/spec/23 and 37) a ROUTER or DEALER needs: the greeting, the NULL
/// mechanism's READY command and the properties it shares with CURVE's boxes, PING and PONG, and the frames.
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

    static let greetingBytes = 64

    /// Signature, version 3.0, mechanism NULL, not as-server, filler: 64 bytes.
    static let greeting = greeting(mechanism: "NULL", asServer: false)

    /// Signature, version 3.0, `mechanism`, the as-server flag, filler: 64 bytes.
    static func greeting(mechanism: String, asServer: Bool) -> [UInt8] {
        var bytes = [UInt8](repeating: 0, count: greetingBytes)
        bytes[0] = 0xFF
        bytes[8] = 1
        bytes[9] = 0x7F
        bytes[10] = 3
        bytes[12..<12 + mechanism.utf8.count] = ArraySlice(mechanism.utf8)
        bytes[32] = asServer ? 1 : 0
        return bytes
    }

    /// Checks the peer's greeting: ZMTP 3 or later, and `mechanism`. (Not the as-server flag: libzmq always
    /// sends 0 there, its CURVE servers too; who is server follows from who binds.)
    static func checkGreeting(_ greeting: ArraySlice<UInt8>, mechanism expected: String = "NULL") throws(Violation) {
        let bytes = Array(greeting)
        guard bytes[0] == 0xFF, bytes[9] & 1 == 1 else { throw .init("no ZMTP signature") }
        guard bytes[10] >= 3 else { throw .init("ZMTP version \(bytes[10])") }
        let mechanism = bytes[12..<32].prefix { $0 != 0 }
        guard mechanism.elementsEqual(expected.utf8) else { throw .init(mechanismMismatch(Array(mechanism), expected)) }
    }

    /// A peer's mechanism that is not ours, in words.
    static func mechanismMismatch(_ mechanism: [UInt8], _ expected: String) -> String {
        let name = String(decoding: mechanism, as: UTF8.self)
        let hint = name == "NULL" && expected == "CURVE" ? " (a peer without keys)" : ""
        return "mechanism \(name) where \(expected) is spoken\(hint)"
    }

    /// A command frame with `body` (a name, then data).
    static func commandFrame(_ body: [UInt8]) -> [UInt8] {
        var frame: [UInt8] = []
        appendFrameHeader(size: body.count, more: false, command: true, to: &frame)
        return frame + body
    }

    /// A frame's flags and size: short (1 byte) up to 255 bytes, long (8 bytes, big-endian) above.
    static func appendFrameHeader(size: Int, more: Bool, command: Bool, to buffer: inout [UInt8]) {
        let long = size > 255
        buffer.append((more ? moreFlag : 0) | (long ? longFlag : 0) | (command ? commandFlag : 0))
        if long {
            withUnsafeBytes(of: UInt64(size).bigEndian) { buffer.append(contentsOf: $0) }
        } else {
            buffer.append(UInt8(size))
        }
    }

    /// A frame header at `at` in `buffer`: its length, flags and body size; nil when it has not all arrived.
    static func frameHeader(in buffer: [UInt8], at: Int, maxBytes: Int) throws(Violation) -> (Int, UInt8, Int)? {
        guard buffer.count - at >= 2 else { return nil }
        let flags = buffer[at]
        guard flags & ~(moreFlag | longFlag | commandFlag) == 0 else { throw .init("frame flags \(flags)") }
        var size: UInt64
        let header: Int
        if flags & longFlag != 0 {
            guard buffer.count - at >= 9 else { return nil }
            size = 0
            for index in 1...8 { size = size << 8 | UInt64(buffer[at + index]) }
            header = 9
        } else {
            size = UInt64(buffer[at + 1])
            header = 2
        }
        guard size <= UInt64(maxBytes) else { throw .init("a frame of \(size) bytes") }
        return (header, flags, Int(size))
    }

    /// ZMTP metadata: each property a 1-byte name length, the name, a 4-byte value length, the value.
    static func properties(_ list: [(name: String, value: [UInt8])]) -> [UInt8] {
        var bytes: [UInt8] = []
        for (name, value) in list {
            bytes.append(UInt8(name.utf8.count))
            bytes.append(contentsOf: name.utf8)
            withUnsafeBytes(of: UInt32(value.count).bigEndian) { bytes.append(contentsOf: $0) }
            bytes.append(contentsOf: value)
        }
        return bytes
    }

    /// A READY command with Socket-Type.
    static func ready(socketType: String) -> [UInt8] {
        commandFrame([5] + Array("READY".utf8) + properties([("Socket-Type", Array(socketType.utf8))]))
    }

    /// A peer's READY: its Socket-Type and, when it set one, its Identity; and whether it asked for a CURVE
    /// refusal's reason in words (`refusalReasonProperty`).
    struct Ready {
        let socketType: String
        let identity: [UInt8]?
        var wantsRefusalReason = false
    }

    /// The property a CURVE client puts in INITIATE's metadata to be told why it is refused: the ERROR then
    /// carries the reason in words. Without it the reason is "400", the ZAP status libzmq's clients read
    /// (they report it as an authentication failure, and a longer reason as nothing at all).
    static let refusalReasonProperty = "X-Refusal-Reason"

    static func readReady(_ body: ArraySlice<UInt8>) throws(Violation) -> Ready {
        guard body.count >= 6, body.first == 5, body.dropFirst().prefix(5).elementsEqual("READY".utf8) else {
            throw .init("no READY")
        }
        return try readProperties(body.dropFirst(6))
    }

    /// The properties of a READY (or of CURVE's INITIATE and READY boxes) that a ROUTER and a DEALER use.
    static func readProperties(_ metadata: ArraySlice<UInt8>) throws(Violation) -> Ready {
        let bytes = Array(metadata)
        var at = 0
        var socketType: String?
        var identity: [UInt8]?
        var wantsRefusalReason = false
        while at < bytes.count {
            let nameLength = Int(bytes[at])
            guard at + 1 + nameLength + 4 <= bytes.count else { throw .init("a truncated metadata property") }
            let name = String(decoding: bytes[at + 1..<at + 1 + nameLength], as: UTF8.self)
            at += 1 + nameLength
            let valueLength = bytes[at..<at + 4].reduce(0) { $0 << 8 | Int($1) }
            at += 4
            guard valueLength <= bytes.count - at else { throw .init("a truncated metadata property") }
            let value = Array(bytes[at..<at + valueLength])
            at += valueLength
            switch name.lowercased() {
            case "socket-type": socketType = String(decoding: value, as: UTF8.self)
            case "identity": identity = value
            case refusalReasonProperty.lowercased(): wantsRefusalReason = true
            default: break
            }
        }
        guard let socketType else { throw .init("metadata without Socket-Type") }
        return Ready(socketType: socketType, identity: identity, wantsRefusalReason: wantsRefusalReason)
    }

    /// `frames` as one message on the wire (no frames: one empty frame, as libzmq sends an empty message).
    static func appendMessage(_ frames: Multipart, to buffer: inout [UInt8]) {
        guard !frames.isEmpty else { return appendFrame([], more: false, to: &buffer) }
        for (index, frame) in frames.enumerated() { appendFrame(frame, more: index < frames.count - 1, to: &buffer) }
    }

    static func appendFrame(_ body: [UInt8], more: Bool, to buffer: inout [UInt8]) {
        appendFrameHeader(size: body.count, more: more, command: false, to: &buffer)
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
