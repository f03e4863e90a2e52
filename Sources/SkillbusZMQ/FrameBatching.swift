/// How messages that leave for one peer at the same flush become one frame, for peers that take them so: the
/// protocol above ZMTP says how (Skillbus: PROTOCOL §2.2); the engine only holds the messages until the flush.
/// Under CURVE every frame is a box, and a small message costs about one box's sealing and opening: a burst
/// of them to one peer then costs one box.
public struct FrameBatching: Sendable {
    /// The most messages one frame holds, and the most bytes (a message larger than that goes alone).
    public let most: Int
    public let maxBytes: Int
    /// One frame of a message of several frames (every message in a batch is one frame).
    public let fold: @Sendable (Multipart) -> [UInt8]
    /// One frame of several one-frame messages, in order.
    public let combine: @Sendable (ArraySlice<[UInt8]>) -> [UInt8]
    /// The messages of a frame that is a batch; nil for any other frame.
    public let split: @Sendable ([UInt8]) -> Multipart?

    /// What a message takes in a batch beyond its own bytes: its length, at most 5 bytes.
    public static let lengthBytes = 5
    /// Room in a batch for its messages and their lengths: the batch's own header and command take the rest.
    var room: Int { maxBytes - 16 }

    /// Whether `count` held messages of `bytes` bytes (their lengths included) fill a batch: then it may go at
    /// once, and the peer works on it while the sender makes the next.
    public func fills(count: Int, bytes: Int) -> Bool { count >= most || bytes >= room }

    /// The frames that carry `messages` (one frame each) in order: batches of at most `most` messages and
    /// `maxBytes` bytes; a message alone as it is, unless `announce` (a batch of one tells the peer that this
    /// side reads batches) and it fits in one.
    public func frames(carrying messages: Multipart, announce: Bool = false) -> Multipart {
        var frames: Multipart = []
        var start = 0
        while start < messages.count {
            var end = start
            var bytes = 0
            while end < messages.count, end - start < most, bytes + messages[end].count + Self.lengthBytes <= room {
                bytes += messages[end].count + Self.lengthBytes
                end += 1
            }
            if end - start <= 1 && !(announce && end > start) {
                frames.append(messages[start])
                start += 1
            } else {
                frames.append(combine(messages[start..<end]))
                start = end
            }
        }
        return frames
    }

    public init(
        most: Int, maxBytes: Int, fold: @escaping @Sendable (Multipart) -> [UInt8],
        combine: @escaping @Sendable (ArraySlice<[UInt8]>) -> [UInt8],
        split: @escaping @Sendable ([UInt8]) -> Multipart?
    ) {
        self.most = most
        self.maxBytes = maxBytes
        self.fold = fold
        self.combine = combine
        self.split = split
    }
}

extension ZMTPConnection {
    /// Holds a message for the next flush's batch (`queueBatch`).
    func holdForBatch(_ frames: Multipart, _ batching: FrameBatching) {
        let frame = frames.count == 1 ? frames[0] : batching.fold(frames)
        batchBytes += frame.count
        batch.append(frame)
    }

    /// Whether what `holdForBatch` holds fills a batch.
    func holdsFullBatch(_ batching: FrameBatching) -> Bool {
        batching.fills(count: batch.count, bytes: batchBytes + FrameBatching.lengthBytes * batch.count)
    }

    /// Queues a message: held for the next flush's batch with `batching`, else as it is.
    func queue(_ frames: Multipart, batching: FrameBatching?) throws(ZMTP.Violation) {
        guard let batching else { return try queueMessage(frames) }
        holdForBatch(frames, batching)
    }

    /// Queues what `holdForBatch` held, in order (`FrameBatching.frames`).
    func queueBatch(_ batching: FrameBatching, announce: Bool = false) throws(ZMTP.Violation) {
        guard !batch.isEmpty else { return }
        let held = batch
        batch.removeAll(keepingCapacity: true)
        batchBytes = 0
        for frame in batching.frames(carrying: held, announce: announce) { try queueMessage([frame]) }
    }
}
