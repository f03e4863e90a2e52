/// The rounds single-flight remembers after everything in them finished: each round is one entry of bytes
/// (its id, the key of each execution, and each outcome's status, agent, duration and payload) appended to
/// an arena of large chunks, in the order the rounds finished. Rounds are forgotten in that order too, so
/// a chunk is freed whole once its last entry is forgotten: remembering 100,000 rounds costs their bytes
/// and about 24 more each, instead of several allocations each that live until the round is forgotten.
///
/// An entry that leaves out of order (its round runs again) is marked gone, and its bytes go with its chunk.
struct FinishedRounds: Sendable {
    /// An execution's key.
    enum Key: Equatable, Sendable {
        /// Canonical (`SingleFlight.canonicalKey`).
        case canonical([UInt8])
        /// The round's only invocation as it came: put in canonical form only when another invocation of
        /// the round must be compared with it.
        case raw(skill: String, parameters: [UInt8])

        fileprivate var byteCount: Int {
            switch self {
            case .canonical(let key): key.count
            case .raw(let skill, let parameters): skill.utf8.count + 1 + parameters.count
            }
        }
    }

    /// One finished execution of a round.
    struct Execution: Equatable, Sendable {
        let key: Key
        let outcome: Outcome
    }

    /// A key as it is stored: whether it is raw (`skill 0x00 parameters`), and its bytes.
    typealias StoredKey = (raw: Bool, bytes: UnsafeRawBufferPointer)

    static let chunkBytes = 256 * 1024

    private var chunks: [[UInt8]] = []
    /// Serial number of `chunks[chunkHead]`; chunks before the head are empty, and removed in batches.
    private var chunkHead = 0
    private var headChunkSerial = 0
    /// Where each entry starts, in finish order: its chunk's serial (high 32 bits) and offset (low 32).
    private var entries: [UInt64] = []
    private var entryHead = 0
    /// Serial number of `entries[entryHead]`.
    private var headEntrySerial = 0
    /// Round id hash → entry serial (its low 32 bits).
    private var index = HashBuckets()

    /// Rounds remembered.
    var count: Int { index.count }

    /// Chunks holding entries or being filled.
    var liveChunks: Int { chunks.count - chunkHead }

    /// When the oldest entry finished (it may be one marked gone).
    var oldestFinishedAt: UInt64? {
        entryHead < entries.count ? read(entrySerial: headEntrySerial) { $0.u64(1) } : nil
    }

    /// Remembers a round whose executions all finished.
    mutating func append(roundID: [UInt8], executions: some Collection<Execution>, finishedAt: UInt64) {
        let hash = HashBuckets.hash(roundID)
        var size = 1 + 8 + 4 + 4 + roundID.count + 4
        for execution in executions {
            size += 1 + 4 + execution.key.byteCount + 1 + 8 + 4 + execution.outcome.agent.count + 4
            size += execution.outcome.payload.count
        }
        if chunks.count == chunkHead || chunks[chunks.count - 1].capacity - chunks[chunks.count - 1].count < size {
            var chunk: [UInt8] = []
            chunk.reserveCapacity(max(Self.chunkBytes, size))
            chunks.append(chunk)
        }
        let chunk = chunks.count - 1
        let serial = headChunkSerial + chunk - chunkHead
        let offset = chunks[chunk].count
        entries.append(UInt64(truncatingIfNeeded: serial) << 32 | UInt64(offset))
        Self.write(into: &chunks[chunk], roundID: roundID, hash: hash, executions: executions, finishedAt: finishedAt)
        let entrySerial = headEntrySerial + entries.count - 1 - entryHead
        // The round is not remembered already (SingleFlight removes an entry before its round runs again).
        index.insert(hash: hash, value: UInt32(truncatingIfNeeded: entrySerial))
    }

    /// The entry of a remembered round.
    func find(_ roundID: [UInt8], hash: UInt32? = nil) -> Int? {
        let hash = hash ?? HashBuckets.hash(roundID)
        let (value, _) = index.find(hash: hash) { value in
            read(entrySerial: serial(of: value)) { entry in
                let length = Int(entry.u32(13))
                return roundID.withUnsafeBytes { $0.elementsEqual(entry[17..<17 + length]) }
            }
        }
        return value.map(serial(of:))
    }

    /// The outcome of the first execution of an entry whose key `matches`, read in place.
    func outcome(of entry: Int, where matches: (StoredKey) -> Bool) -> Outcome? {
        read(entrySerial: entry) { bytes in
            var outcome: Outcome?
            Self.forEachExecution(in: bytes) { raw, key, outcomeAt in
                guard matches((raw, UnsafeRawBufferPointer(rebasing: key))) else { return true }
                outcome = Self.outcome(in: bytes, at: outcomeAt)
                return false
            }
            return outcome
        }
    }

    /// Every execution of an entry.
    func executions(of entry: Int) -> [Execution] {
        read(entrySerial: entry) { bytes in
            var executions: [Execution] = []
            Self.forEachExecution(in: bytes) { raw, key, outcomeAt in
                let split = raw ? key.firstIndex(of: 0) : nil
                let stored: Key =
                    if let split {
                        .raw(
                            skill: String(decoding: key[..<split], as: UTF8.self),
                            parameters: Array(key[(split + 1)...]))
                    } else {
                        .canonical(Array(key))
                    }
                executions.append(Execution(key: stored, outcome: Self.outcome(in: bytes, at: outcomeAt)))
                return true
            }
            return executions
        }
    }

    /// Forgets an entry whose round runs again; its bytes are freed with the oldest entries.
    mutating func remove(_ entry: Int) {
        let (chunk, offset) = location(entrySerial: entry)
        chunks[chunk][offset] = 1
        let hash = read(entrySerial: entry) { $0.u32(9) }
        index.remove(hash: hash, value: UInt32(truncatingIfNeeded: entry))
    }

    /// Forgets the oldest entry; returns how many outcomes went with it (none when it was marked gone).
    mutating func removeOldest() -> Int {
        let entry = headEntrySerial
        let (gone, hash, executions) = read(entrySerial: entry) { bytes in
            (bytes[0] == 1, bytes.u32(9), Int(bytes.u32(17 + Int(bytes.u32(13)))))
        }
        if !gone { index.remove(hash: hash, value: UInt32(truncatingIfNeeded: entry)) }
        entryHead += 1
        headEntrySerial += 1
        // Chunks before the next entry's are done with (the last chunk stays: it is being filled).
        let keep = entryHead < entries.count ? location(entrySerial: headEntrySerial).chunk : chunks.count - 1
        while chunkHead < keep {
            chunks[chunkHead] = []
            chunkHead += 1
            headChunkSerial += 1
        }
        if entryHead > 4096 && entryHead * 2 > entries.count {
            entries.removeFirst(entryHead)
            entryHead = 0
        }
        if chunkHead > 64 && chunkHead * 2 > chunks.count {
            chunks.removeFirst(chunkHead)
            chunkHead = 0
        }
        return gone ? 0 : executions
    }

    // MARK: - Entry bytes
    //
    // u8 gone (1 once the round left out of order) · u64 finishedAt · u32 id hash · u32 id length · id ·
    // u32 executions · per execution: u8 key form (0 canonical, 1 raw) · u32 length · key ·
    // u8 status (0 ok, 1 error) · u64 duration in µs · u32 length · agent · u32 length · payload.
    // Little-endian.

    private func serial(of value: UInt32) -> Int {
        headEntrySerial + Int(value &- UInt32(truncatingIfNeeded: headEntrySerial))
    }

    private func location(entrySerial: Int) -> (chunk: Int, offset: Int) {
        let position = entries[entryHead + entrySerial - headEntrySerial]
        let serial = UInt32(truncatingIfNeeded: position >> 32)
        return (chunkHead + Int(serial &- UInt32(truncatingIfNeeded: headChunkSerial)), Int(position & 0xFFFF_FFFF))
    }

    private func read<Result>(entrySerial: Int, _ body: (UnsafeRawBufferPointer) -> Result) -> Result {
        let (chunk, offset) = location(entrySerial: entrySerial)
        return chunks[chunk].withUnsafeBytes { body(UnsafeRawBufferPointer(rebasing: $0[offset...])) }
    }

    private static func write(
        into chunk: inout [UInt8], roundID: [UInt8], hash: UInt32, executions: some Collection<Execution>,
        finishedAt: UInt64
    ) {
        func put<Value: FixedWidthInteger>(_ value: Value) {
            withUnsafeBytes(of: value.littleEndian) { chunk.append(contentsOf: $0) }
        }
        func put(bytes: [UInt8]) {
            put(UInt32(bytes.count))
            chunk.append(contentsOf: bytes)
        }
        chunk.append(0)
        put(finishedAt)
        put(hash)
        put(bytes: roundID)
        put(UInt32(executions.count))
        for execution in executions {
            switch execution.key {
            case .canonical(let key):
                chunk.append(0)
                put(bytes: key)
            case .raw(let skill, let parameters):
                chunk.append(1)
                put(UInt32(execution.key.byteCount))
                chunk.append(contentsOf: skill.utf8)
                chunk.append(0)
                chunk.append(contentsOf: parameters)
            }
            chunk.append(execution.outcome.status == .ok ? 0 : 1)
            put(UInt64(truncatingIfNeeded: execution.outcome.durationMicros))
            put(bytes: execution.outcome.agent)
            put(bytes: execution.outcome.payload)
        }
    }

    /// Calls `body` with each execution's key (whether raw, and its bytes) and where its outcome starts,
    /// until it returns false.
    private static func forEachExecution(
        in bytes: UnsafeRawBufferPointer, _ body: (Bool, Slice<UnsafeRawBufferPointer>, Int) -> Bool
    ) {
        var at = 17 + Int(bytes.u32(13))
        let count = Int(bytes.u32(at))
        at += 4
        for _ in 0..<count {
            let raw = bytes[at] == 1
            let length = Int(bytes.u32(at + 1))
            let key = bytes[at + 5..<at + 5 + length]
            let outcomeAt = at + 5 + length
            let agent = Int(bytes.u32(outcomeAt + 9))
            let payload = Int(bytes.u32(outcomeAt + 13 + agent))
            guard body(raw, key, outcomeAt) else { return }
            at = outcomeAt + 17 + agent + payload
        }
    }

    private static func outcome(in bytes: UnsafeRawBufferPointer, at start: Int) -> Outcome {
        let duration = bytes.u64(start + 1)
        let agentLength = Int(bytes.u32(start + 9))
        let payloadAt = start + 13 + agentLength
        let payloadLength = Int(bytes.u32(payloadAt))
        return Outcome(
            status: bytes[start] == 0 ? .ok : .error, agent: Array(bytes[start + 13..<payloadAt]),
            payload: Array(bytes[payloadAt + 4..<payloadAt + 4 + payloadLength]),
            durationMicros: Int(truncatingIfNeeded: duration))
    }
}

extension UnsafeRawBufferPointer {
    fileprivate func u32(_ offset: Int) -> UInt32 {
        UInt32(littleEndian: loadUnaligned(fromByteOffset: offset, as: UInt32.self))
    }

    fileprivate func u64(_ offset: Int) -> UInt64 {
        UInt64(littleEndian: loadUnaligned(fromByteOffset: offset, as: UInt64.self))
    }
}
