/// Records written one after another into large chunks, in the order they are made, and freed a chunk at a time
/// from the oldest: for memories that forget in the order they remember (RememberedRounds, FinishedRounds). Kept as
/// arrays of their own, such records were allocations each freed thousands of records later, and a heap a third
/// larger. A chunk is named by a serial that stays the same as older chunks go.
struct ChunkArena: Sendable {
    static let chunkBytes = 256 * 1024

    private var chunks: [[UInt8]] = []
    /// `chunks[..<head]` are freed (empty), dropped in batches; `chunks[head]` has the serial `headSerial`.
    private var head = 0
    private var headSerial = 0

    /// Chunks holding records or being filled.
    var liveChunks: Int { chunks.count - head }

    /// Bytes written to those chunks.
    var storedBytes: Int { chunks[head...].reduce(0) { $0 + $1.count } }

    /// The serial of the oldest chunk kept.
    var oldestChunk: Int { headSerial }

    /// Where a record of `size` bytes written next starts: at the end of the last chunk, or of a new one when the
    /// last has less room left (`opened`).
    mutating func reserve(_ size: Int) -> (chunk: Int, offset: Int, opened: Bool) {
        var opened = false
        if chunks.count == head || chunks[chunks.count - 1].capacity - chunks[chunks.count - 1].count < size {
            var chunk: [UInt8] = []
            chunk.reserveCapacity(max(Self.chunkBytes, size))
            chunks.append(chunk)
            opened = true
        }
        return (headSerial + chunks.count - 1 - head, chunks[chunks.count - 1].count, opened)
    }

    /// Appends to the last chunk (after `reserve`). The chunk is taken out while `body` runs, so that no append
    /// goes through the array of chunks.
    mutating func writeLast<Result>(_ body: (inout [UInt8]) -> Result) -> Result {
        var chunk: [UInt8] = []
        swap(&chunk, &chunks[chunks.count - 1])
        defer { swap(&chunk, &chunks[chunks.count - 1]) }
        return body(&chunk)
    }

    /// Calls `body` with the bytes of chunk `serial`.
    func read<Result>(_ serial: Int, _ body: (UnsafeRawBufferPointer) -> Result) -> Result {
        chunks[head + serial - headSerial].withUnsafeBytes(body)
    }

    /// Overwrites one byte of a record.
    mutating func set(_ byte: UInt8, chunk serial: Int, offset: Int) { chunks[head + serial - headSerial][offset] = byte }

    /// Frees the chunks before chunk `serial` (nil: all but the last, which is being filled).
    mutating func free(before serial: Int?) {
        let keep = serial.map { head + $0 - headSerial } ?? chunks.count - 1
        while head < keep {
            chunks[head] = []
            head += 1
            headSerial += 1
        }
        if head > 64 && head * 2 > chunks.count {
            chunks.removeFirst(head)
            head = 0
        }
    }
}
