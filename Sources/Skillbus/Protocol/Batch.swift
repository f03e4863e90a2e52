import SkillbusZMQ

/// Batched: several messages in one frame (PROTOCOL §2.2). Under CURVE every frame is a box, and sealing or
/// opening one costs about as much as the small message in it; messages that leave for one peer at the same
/// moment (a burst of INVOKEs, of RESULTs, of REPLYs) then cost one box instead of one each.
extension Wire {
    /// The command of a batch: `BATCH`, in either dialect.
    static let batchCommand = Array("BATCH".utf8)
    /// The most messages one batch holds: the envelope's 32 fields less the header and the command.
    public static let maxBatchMessages = maxEnvelopeFields - 2
    /// The most bytes one batch takes: within the smallest frame limit a peer may have (`hardCap` of the least
    /// maxMessageBytes, 256: 5120 bytes); a receiver keeps a batch this large whatever its maxMessageBytes.
    public static let maxBatchBytes = 4096

    /// One frame holding `messages` (each one frame: a folded message of this dialect), in order.
    public static func batched<Messages: Collection<[UInt8]>>(_ messages: Messages) -> [UInt8] {
        var frame = Array(messages.first?.prefix(5) ?? [])
        frame.reserveCapacity(messages.reduce(12) { $0 + $1.count + 5 })
        appendField(batchCommand, to: &frame)
        for message in messages { appendField(message, to: &frame) }
        return frame
    }

    /// The messages a received message carries: those of a batch `batching` can split, else itself.
    public static func messages(in received: Multipart, _ batching: FrameBatching) -> [Multipart] {
        guard received.count == 1, let messages = batching.split(received[0]) else { return [received] }
        return messages.map { [$0] }
    }

    /// Whether a frame is a batch: its envelope's command is BATCH. Cheap: the common message is not.
    static func isBatch(_ frame: [UInt8]) -> Bool {
        frame.count >= 11 && frame[5] == 5 && frame[6] == UInt8(ascii: "B") && frame[6..<11].elementsEqual(batchCommand)
    }

    /// The messages of a batch in order, each as the one frame it travels as; nil when `frames` is no batch.
    /// Throws `malformed_message` naming what is wrong: a truncated field, no message, a message of the other
    /// dialect (or none), a batch inside a batch.
    static func unbatched(_ frames: Multipart) throws(SkillbusError) -> Multipart? {
        guard frames.count == 1, isBatch(frames[0]) else { return nil }
        let frame = frames[0]
        let header = frame[0..<5]
        var messages: Multipart = []
        var index = 11
        while index < frame.count {
            guard messages.count < maxBatchMessages else {
                throw SkillbusError(.malformedMessage, "BATCH holds more than \(maxBatchMessages) messages")
            }
            let range = try nextField(of: frame, at: &index, number: messages.count + 2)
            let message = Array(frame[range])
            guard message.starts(with: header) else {
                let dialect = String(decoding: header, as: UTF8.self)
                throw SkillbusError(
                    .malformedMessage, "BATCH message \(messages.count + 1) does not start with \(dialect)")
            }
            guard !isBatch(message) else {
                throw SkillbusError(
                    .malformedMessage, "BATCH message \(messages.count + 1) is a BATCH (batches do not nest)")
            }
            messages.append(message)
        }
        guard !messages.isEmpty else { throw SkillbusError(.malformedMessage, "BATCH holds no message") }
        return messages
    }
}

extension Wire {
    /// What the own engine needs to fold and batch messages for peers that take them so (§2.1, §2.2).
    public static let frameBatching = FrameBatching(
        most: maxBatchMessages, maxBytes: maxBatchBytes, fold: { folded($0)[0] }, combine: { batched($0) },
        split: { frame in (try? unbatched([frame])) ?? nil })
}
