import SkillbusZMQ
import Testing

@testable import Skillbus

@Suite("Wire v2 envelope")
struct EnvelopeTests {
    static func bytes(_ text: String) -> [UInt8] { Array(text.utf8) }

    @Test("a REQUEST is two frames, byte for byte as PROTOCOL §2.1's example shows")
    func requestExample() throws {
        let request = InvokeRequest(requestID: "r1", roundID: "", skill: "echo", parameters: Self.bytes(#"{"text":"hi"}"#))
        let frames = ClientMessage.invoke(request).encoded()
        let envelope = Self.bytes("SKB2C") + [7] + Self.bytes("REQUEST") + [2] + Self.bytes("r1") + [0, 0, 4]
            + Self.bytes("echo") + [0]
        #expect(frames == [envelope, Self.bytes(#"{"text":"hi"}"#)])
        #expect(try ClientMessage.decode(frames) == .invoke(request))
    }

    @Test("a field of 255 bytes or more takes the long length: 0xFF and four big-endian bytes", arguments: [0, 1, 254, 255, 300, 70_000])
    func lengths(count: Int) throws {
        let id = String(repeating: "i", count: count)
        let frames = ClientMessage.listSkills(requestID: id).encoded()
        #expect(frames.count == 1)
        let header = Self.bytes("SKB2C") + [6] + Self.bytes("SKILLS")
        let length: [UInt8] =
            count < 255
            ? [UInt8(count)] : [0xFF, UInt8(count >> 24), UInt8(count >> 16 & 0xFF), UInt8(count >> 8 & 0xFF), UInt8(count & 0xFF)]
        #expect(frames[0] == header + length + Self.bytes(id))
        #expect(try ClientMessage.decode(frames) == .listSkills(requestID: id))
    }

    /// An envelope's bytes: the header's, then `bytes` as they are (lengths included by the caller).
    static func envelope(_ header: String, _ bytes: [UInt8]) -> [UInt8] { Array(header.utf8) + bytes }

    static let refusals: [(Multipart, String)] = {
        let request: [UInt8] = [7] + bytes("REQUEST")
        let skills: [UInt8] = [6] + bytes("SKILLS")
        let requestFields: [UInt8] = request + [2] + bytes("r1") + [0, 0, 4] + bytes("echo") + [0]
        return [
            // The length byte says 9; two bytes follow.
            ([envelope("SKB2C", request + [9] + bytes("r1"))], "says 9 bytes; only 2 follow"),
            ([envelope("SKB2C", skills + [0xFF, 0, 0])], "its length runs past the end"),
            // REQUEST's parameters inside its envelope, and a frame after it as well.
            (
                [envelope("SKB2C", requestFields + [2] + bytes("{}")), bytes("x")],
                "REQUEST carries fields 0 to 6 in its envelope"
            ),
            // A SKILLS with a frame after its envelope.
            ([envelope("SKB2C", skills + [1] + bytes("r")), bytes("x")], "every field in its envelope"),
            ([bytes("SKB2C"), bytes("SKILLS")], "the envelope holds no command"),
            ([bytes("SKB1C"), bytes("SKILLS"), bytes("r")], "expected header SKB2C"),
        ]
    }()

    @Test(
        "a truncated envelope, a wrong split, a missing command and a foreign header are refused, naming what is wrong",
        arguments: refusals)
    func refused(frames: Multipart, reason: String) {
        #expect {
            try ClientMessage.decode(frames)
        } throws: { error in
            (error as? SkillbusError)?.message.contains(reason) ?? false
        }
    }

    @Test("every message of every direction travels in its layout and decodes to itself")
    func layouts() throws {
        let invocation = Invocation(
            invocationID: "i1", roundID: "r", sessionID: "", skill: "echo", deadlineMs: 900, parameters: Self.bytes("{}"))
        let toWorker = BusToWorkerMessage.invoke(invocation).encoded()
        #expect(toWorker.count == 2 && toWorker[1] == Self.bytes("{}"))
        #expect(try BusToWorkerMessage.decode(toWorker) == .invoke(invocation))
        let result = WorkerMessage.result(invocationID: "i1", status: .ok, payload: Self.bytes(#"{"text":"x"}"#))
        #expect(result.encoded().count == 2)
        #expect(try WorkerMessage.decode(result.encoded()) == result)
        let reply = BusToClientMessage.reply(
            InvokeReply(requestID: "q", roundID: "r", status: .ok, agent: "a", durationMicros: 12, payload: Self.bytes("{}")))
        #expect(reply.encoded().count == 2)
        #expect(try BusToClientMessage.decode(reply.encoded()) == reply)
        // A HEARTBEAT without its optional registry field has nothing after its envelope.
        #expect(WorkerMessage.heartbeat(intervalMs: 1000, registry: nil).encoded().count == 1)
        // The same command name has its own layout in each direction: a bus's ROUND answer has 2 fields in its envelope.
        let round = BusToClientMessage.round(requestID: Self.bytes("q"), roundID: Self.bytes("r"), document: Self.bytes("{}"))
        #expect(round.encoded().count == 2)
        #expect(try BusToClientMessage.decode(round.encoded()) == round)
    }

    @Test("a message folded into one frame decodes as it does in its frames, and tells that its sender folds")
    func folded() throws {
        let request = ClientMessage.round(
            RoundRequest(
                requestID: "q", roundID: "r", timeoutMs: 900, body: Self.bytes(#"{"invoke":{"skill":"echo"}}"#)))
        let long = Array(repeating: UInt8(ascii: "x"), count: 300)
        let called = WorkerMessage.called(
            turnID: "t", claimID: "c", skill: "echo", parameters: Self.bytes("{}"), status: .ok, payload: long)
        let turn = BusToClientMessage.round(requestID: Self.bytes("q"), roundID: Self.bytes("r"), document: long)
        for (frames, layout) in [
            (request.encoded(), ClientMessage.layout), (called.encoded(), WorkerMessage.layout),
            (turn.encoded(), BusToClientMessage.layout),
        ] {
            let folded = Wire.folded(frames)
            #expect(folded.count == 1 && frames.count > 1)
            #expect(Wire.isFolded(folded, layout) && !Wire.isFolded(frames, layout))
        }
        #expect(try ClientMessage.decode(Wire.folded(request.encoded())) == request)
        #expect(try WorkerMessage.decode(Wire.folded(called.encoded())) == called)
        #expect(try BusToClientMessage.decode(Wire.folded(turn.encoded())) == turn)
        // A message with no frame fields says nothing about its sender.
        let heartbeat = WorkerMessage.heartbeat(intervalMs: 1000, registry: nil).encoded()
        #expect(Wire.folded(heartbeat) == heartbeat && !Wire.isFolded(heartbeat, WorkerMessage.layout))
    }

    /// A decode's value or error, to compare the in-place reader with the general path.
    static func outcome<Message>(_ decode: () throws(SkillbusError) -> Message) -> Result<Message, SkillbusError> {
        do throws(SkillbusError) { return .success(try decode()) } catch { return .failure(error) }
    }

    @Test("REQUEST, ROUND, INVOKE, RESULT and REPLY read in place decode as unpacking their fields does; else the same error")
    func readInPlace() {
        var random = SplitMix(seed: 15)
        func text(_ most: Int = 300) -> String {
            String((0..<Int.random(in: 0...most, using: &random)).map { _ in "aé-z9".randomElement(using: &random)! })
        }
        func number() -> Int {
            [0, 1, 7, 999, 86_400_000, 86_400_001, Int.random(in: 0...Int(Int32.max), using: &random)]
                .randomElement(using: &random)!
        }
        /// The message as sent and folded into one frame, then each with one of its envelope's bytes changed, cut
        /// short or lengthened.
        func variants(_ message: Multipart) -> [Multipart] {
            [message, Wire.folded(message)].flatMap(variantsOfForm)
        }
        func variantsOfForm(_ frames: Multipart) -> [Multipart] {
            var all = [frames]
            for _ in 0..<4 {
                var changed = frames
                let index = Int.random(in: 0..<changed[0].count, using: &random)
                switch Int.random(in: 0..<4, using: &random) {
                case 0: changed[0][index] = UInt8.random(in: 0...255, using: &random)
                case 1: changed[0].removeLast(Int.random(in: 1...changed[0].count, using: &random))
                case 2: changed[0].append(contentsOf: [0, 1, 0xFF].randomElement(using: &random).map { [$0] }!)
                default: changed.append(Array(text(8).utf8))
                }
                all.append(changed)
            }
            return all
        }
        /// Each variant decoded in place and through `unpack`: the same value or the same error. Returns how
        /// many variants decoded.
        func compare<Message: Equatable>(
            _ message: Multipart, header: [UInt8], _ layout: Wire.Layout,
            read: (Multipart) throws(SkillbusError) -> Message, fields: (Multipart) throws(SkillbusError) -> Message
        ) -> Int {
            var decoded = 0
            for frames in variants(message) {
                let general = Self.outcome { () throws(SkillbusError) in
                    try fields(Wire.unpack(frames, header: header, layout))
                }
                let direct = Self.outcome { () throws(SkillbusError) in try read(frames) }
                #expect(direct == general)
                if case .success = direct { decoded += 1 }
            }
            return decoded
        }
        var readInPlace = 0
        for _ in 0..<400 {
            let status: ReplyStatus = Bool.random(using: &random) ? .ok : .error
            let request = ClientMessage.invoke(
                InvokeRequest(
                    requestID: text(), roundID: text(), sessionID: text(140), skill: text(20),
                    timeoutMs: Bool.random(using: &random) ? nil : number(), parameters: Array(text().utf8)))
            readInPlace += compare(
                Wire.pack(request.fields(), ClientMessage.layout), header: Wire.clientHeaderBytes, ClientMessage.layout,
                read: ClientMessage.decode(_:), fields: ClientMessage.decode(fields:))
            let round = ClientMessage.round(
                RoundRequest(
                    requestID: text(), roundID: text(), sessionID: text(140),
                    timeoutMs: Bool.random(using: &random) ? nil : number(), body: Array(text().utf8)))
            readInPlace += compare(
                Wire.pack(round.fields(), ClientMessage.layout), header: Wire.clientHeaderBytes, ClientMessage.layout,
                read: ClientMessage.decode(_:), fields: ClientMessage.decode(fields:))
            let invoke = BusToWorkerMessage.invoke(
                Invocation(
                    invocationID: text(), roundID: text(), sessionID: text(), skill: text(20), deadlineMs: number(),
                    parameters: Array(text().utf8)))
            readInPlace += compare(
                invoke.encoded(), header: Wire.workerHeaderBytes, BusToWorkerMessage.layout,
                read: BusToWorkerMessage.decode(_:), fields: BusToWorkerMessage.decode(fields:))
            let reply = BusToClientMessage.reply(
                InvokeReply(
                    requestID: text(), roundID: text(), status: status, agent: text(), durationMicros: number(),
                    payload: Array(text().utf8)))
            readInPlace += compare(
                reply.encoded(), header: Wire.clientHeaderBytes, BusToClientMessage.layout,
                read: BusToClientMessage.decode(_:), fields: BusToClientMessage.decode(fields:))
            let result = WorkerMessage.result(invocationID: text(), status: status, payload: Array(text().utf8))
            readInPlace += compare(
                result.encoded(), header: Wire.workerHeaderBytes, WorkerMessage.layout,
                read: WorkerMessage.decode(_:), fields: WorkerMessage.decode(fields:))
        }
        // Both kinds were met: messages that decode, and broken ones.
        #expect(readInPlace > 800 && readInPlace < 400 * 5 * 10)
    }

    @Test("REQUEST, INVOKE, REPLY, ROUND's answer and RESULT, written into their envelopes, are the bytes packing gives")
    func writtenEnvelopes() {
        var random = SplitMix(seed: 14)
        for _ in 0..<500 {
            func text() -> String {
                String((0..<Int.random(in: 0...300, using: &random)).map { _ in "aé-z9".randomElement(using: &random)! })
            }
            let number = [0, 7, 10, 999, Int.random(in: 0...Int(Int32.max), using: &random)].randomElement(using: &random)!
            let invocation = BusToWorkerMessage.invoke(
                Invocation(
                    invocationID: text(), roundID: text(), sessionID: text(), skill: text(), deadlineMs: number,
                    parameters: Array(text().utf8)))
            #expect(invocation.encoded() == Wire.pack(invocation.fields(), BusToWorkerMessage.layout))
            let reply = BusToClientMessage.reply(
                InvokeReply(
                    requestID: text(), roundID: text(), status: Bool.random(using: &random) ? .ok : .error, agent: text(),
                    durationMicros: number, payload: Array(text().utf8)))
            #expect(reply.encoded() == Wire.pack(reply.fields(), BusToClientMessage.layout))
            let round = BusToClientMessage.round(
                requestID: Array(text().utf8), roundID: Array(text().utf8), document: Array(text().utf8))
            #expect(round.encoded() == Wire.pack(round.fields(), BusToClientMessage.layout))
            let result = WorkerMessage.result(
                invocationID: text(), status: Bool.random(using: &random) ? .ok : .error, payload: Array(text().utf8))
            #expect(result.encoded() == Wire.pack(result.fields(), WorkerMessage.layout))
            let timeout = [nil, -1, number].randomElement(using: &random)!
            let request = ClientMessage.invoke(
                InvokeRequest(
                    requestID: text(), roundID: text(), sessionID: text(), skill: text(), timeoutMs: timeout,
                    parameters: Array(text().utf8)))
            #expect(request.encoded() == Wire.pack(request.fields(), ClientMessage.layout))
        }
    }

    @Test("a v1 peer is answered in v1 framing, with its request id, and told this bus speaks v2")
    func v1Refusal() throws {
        let error = SkillbusError(.unsupportedProtocol, "speaks SKB2C")
        let client = try #require(Wire.v1Refusal([Self.bytes("SKB1C"), Self.bytes("REQUEST"), Self.bytes("r9")], error))
        #expect(client.count == 4 && client[0] == Self.bytes("SKB1C") && client[1] == Self.bytes("ERROR"))
        let sent = SkillbusError(json: try JSONValue(parsing: client[3]))
        #expect(client[2] == Self.bytes("r9") && sent == error)
        let worker = try #require(Wire.v1Refusal([Self.bytes("SKB1W"), Self.bytes("READY"), Self.bytes("{}")], error))
        #expect(worker.count == 3 && worker[0] == Self.bytes("SKB1W"))
        #expect(Wire.v1Refusal(ClientMessage.listSkills(requestID: "r").encoded(), error) == nil)
        // A request id that is not UTF-8 is not echoed.
        #expect(Wire.v1Refusal([Self.bytes("SKB1C"), Self.bytes("REQUEST"), [0xFF]], error)?[2] == [])
    }

    @Test("a refused v2 message's request id is read from its envelope, even when the rest is wrong")
    func refusedRequestID() {
        #expect(Wire.requestID(of: ClientMessage.cancel(requestID: "r7").encoded()) == "r7")
        #expect(Wire.requestID(of: [Self.bytes("SKB2C") + [5] + Self.bytes("DANCE") + [2] + Self.bytes("r8"), [1]]) == "r8")
        #expect(Wire.requestID(of: [Self.bytes("SKB2C") + [9]]) == "")
        // Past field 2 anything may be wrong: 40 fields, or a later length that runs past the end.
        let head = Self.bytes("SKB2C") + [7] + Self.bytes("REQUEST") + [2] + Self.bytes("r9")
        let many = head + Array(repeating: [1, 0x61], count: 37).flatMap { $0 }
        #expect(Wire.requestID(of: [many]) == "r9")
        #expect(throws: SkillbusError.self) { try Wire.unpack([many], header: Self.bytes("SKB2C"), [:]) }
        #expect(Wire.requestID(of: [head + [0xFF, 0, 0]]) == "r9")
        // A long length form for field 2 itself.
        #expect(Wire.requestID(of: [Self.bytes("SKB2C") + [7] + Self.bytes("REQUEST") + [0xFF, 0, 0, 0, 2] + Self.bytes("rA")]) == "rA")
    }
}
