import SkillbusZMQ
import Testing

@testable import Skillbus

@Suite("Batches: several messages in one frame (PROTOCOL §2.2)")
struct BatchTests {
    static func bytes(_ text: String) -> [UInt8] { Array(text.utf8) }
    static let skills = ClientMessage.listSkills(requestID: "s1").encoded()[0]
    static let cancel = ClientMessage.cancel(requestID: "r9").encoded()[0]

    @Test("a batch is a BATCH envelope whose fields are whole folded messages, byte for byte as §2.2 shows")
    func layout() throws {
        let invoke = ClientMessage.invoke(
            InvokeRequest(requestID: "r1", roundID: "", skill: "echo", parameters: Self.bytes("{}")))
        let request = Wire.folded(invoke.encoded())[0]
        let frame = Wire.batched([request, Self.skills])
        let expected: [UInt8] = Self.bytes("SKB2C") + [5] + Self.bytes("BATCH") + [UInt8(request.count)] + request
        #expect(frame == expected + [UInt8(Self.skills.count)] + Self.skills)
        let messages = try #require(try Wire.unbatched([frame]))
        #expect(messages == [request, Self.skills])
        #expect(try ClientMessage.decode([messages[0]]) == invoke)
    }

    @Test("any other message is no batch: a REQUEST, two frames, a command that only starts like it")
    func notBatches() throws {
        #expect(try Wire.unbatched([Self.skills]) == nil)
        #expect(try Wire.unbatched([Wire.batched([Self.skills]), []]) == nil)
        #expect(try Wire.unbatched([Self.bytes("SKB2C") + [6] + Self.bytes("BATCHY")]) == nil)
        #expect(Wire.messages(in: [Self.cancel], Wire.frameBatching) == [[Self.cancel]])
        let batch = Wire.batched([Self.skills, Self.cancel])
        #expect(Wire.messages(in: [batch], Wire.frameBatching) == [[Self.skills], [Self.cancel]])
    }

    static let empty: [UInt8] = bytes("SKB2C") + [5] + bytes("BATCH")
    static let worker: [UInt8] = bytes("SKB2W") + [9] + bytes("HEARTBEAT")
    static let malformedCases: [([UInt8], String)] = [
        (empty, "BATCH holds no message"),
        (empty + [40, 1, 2], "envelope field 2 says 40 bytes; only 2 follow"),
        (Wire.batched([skills, worker]), "BATCH message 2 does not start with SKB2C"),
        (Wire.batched([skills, Wire.batched([cancel])]), "BATCH message 2 is a BATCH (batches do not nest)"),
        (Wire.batched(Array(repeating: cancel, count: 31)), "BATCH holds more than 30 messages"),
    ]

    @Test("a malformed batch is refused naming what is wrong", arguments: malformedCases)
    func malformed(frame: [UInt8], problem: String) {
        #expect(throws: SkillbusError(.malformedMessage, problem)) { try Wire.unbatched([frame]) }
    }

    @Test("what leaves together goes in batches of at most 30 messages and 4096 bytes, in order; a lone one as it is")
    func grouping() throws {
        let batching = Wire.frameBatching
        #expect(batching.frames(carrying: [Self.skills]) == [Self.skills])
        #expect(batching.frames(carrying: [Self.skills], announce: true) == [Wire.batched([Self.skills])])
        #expect(batching.frames(carrying: [Self.skills, Self.cancel]) == [Wire.batched([Self.skills, Self.cancel])])

        let many = (0..<35).map { ClientMessage.cancel(requestID: "r\($0)").encoded()[0] }
        let frames = batching.frames(carrying: many)
        #expect(frames.count == 2)
        #expect(try frames.flatMap { try Wire.unbatched([$0]) ?? [$0] } == many)
        #expect(try Wire.unbatched([frames[0]])?.count == 30)

        // A message too large for a batch goes alone between batches; every frame stays within the bound.
        let parameters = [UInt8](repeating: 0x61, count: 5000)
        let large = Wire.folded(
            ClientMessage.invoke(InvokeRequest(requestID: "big", roundID: "", skill: "echo", parameters: parameters))
                .encoded())[0]
        let medium: [UInt8] = Self.bytes("SKB2C") + [4] + Self.bytes("PING") + [UInt8](repeating: 0x62, count: 2500)
        let mixed = batching.frames(carrying: [Self.skills, Self.cancel, large, Self.cancel, medium, medium])
        #expect(mixed.count == 4)
        #expect(mixed[1] == large && mixed[3] == medium)
        let carried = try mixed.flatMap { try Wire.unbatched([$0]) ?? [$0] }
        #expect(carried == [Self.skills, Self.cancel, large, Self.cancel, medium, medium])
        #expect(mixed.filter { Wire.isBatch($0) }.allSatisfy { $0.count <= Wire.maxBatchBytes })
    }
}
