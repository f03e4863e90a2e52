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
    /// Messages to this peer go folded into one frame (`ZMTPRouter.foldFrames`).
    var foldsFrames = false
    /// Messages to this peer are held until the flush and go out batched (`FrameBatching`).
    var batchesFrames = false
    /// The messages held for the next flush's batch, one frame each, and their bytes.
    var batch: Multipart = []
    var batchBytes = 0
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
    var unsentBytes: Int { output.count - outputStart + batchBytes }

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
