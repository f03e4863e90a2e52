import Glibc

/// The rounds single-flight remembers after everything in them finished: each round is one entry of bytes
/// (its id, the key of each execution, and each outcome's status, agent, duration and payload) appended to
/// a `ChunkArena`, in the order the rounds finished. Rounds are forgotten in that order too, so
/// a chunk is freed whole once its last entry is forgotten: remembering 100,000 rounds costs their bytes
/// and about 24 more each, instead of several allocations each that live until the round is forgotten. A
/// value that many rounds of a chunk share (the same parameters, agent or outcome) is kept there once.
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

    static let chunkBytes = ChunkArena.chunkBytes

    private var arena = ChunkArena()
    /// Where each entry starts, in finish order: its chunk's serial (high 32 bits) and offset (low 32).
    private var entries: [UInt64] = []
    private var entryHead = 0
    /// Serial number of `entries[entryHead]`.
    private var headEntrySerial = 0
    /// Round id hash → entry serial (its low 32 bits).
    private var index = HashBuckets()
    /// Values written to the last chunk, by a hash of their bytes: where each stands, plus one (0: none).
    private var recentValues = noRecentValues
    private static let noRecentValues = [UInt32](repeating: 0, count: 256)

    /// Rounds remembered.
    var count: Int { index.count }

    /// Chunks holding entries or being filled.
    var liveChunks: Int { arena.liveChunks }

    /// Bytes written to those chunks.
    var storedBytes: Int { arena.storedBytes }

    /// When the oldest entry finished (it may be one marked gone).
    var oldestFinishedAt: UInt64? {
        entryHead < entries.count ? read(entrySerial: headEntrySerial) { chunk, start in chunk.u64(start + 1) } : nil
    }

    /// Remembers a round whose executions all finished.
    mutating func append(roundID: [UInt8], executions: some Collection<Execution>, finishedAt: UInt64) {
        let hash = HashBuckets.hash(roundID)
        var size = 1 + 8 + 4 + 4 + roundID.count + 4
        for execution in executions {
            size += 1 + 4 + execution.key.byteCount + 1 + 8 + 4 + execution.outcome.agent.count + 4
            size += execution.outcome.payload.count
        }
        let (serial, offset, opened) = arena.reserve(size)
        if opened { recentValues = Self.noRecentValues }
        entries.append(UInt64(truncatingIfNeeded: serial) << 32 | UInt64(offset))
        write(roundID: roundID, hash: hash, executions: executions, finishedAt: finishedAt)
        let entrySerial = headEntrySerial + entries.count - 1 - entryHead
        // The round is not remembered already (SingleFlight removes an entry before its round runs again).
        index.insert(hash: hash, value: UInt32(truncatingIfNeeded: entrySerial))
    }

    /// The entry of a remembered round.
    func find(_ roundID: [UInt8], hash: UInt32? = nil) -> Int? {
        let hash = hash ?? HashBuckets.hash(roundID)
        let (value, _) = index.find(hash: hash) { value in
            read(entrySerial: serial(of: value)) { chunk, start in
                let length = Int(chunk.u32(start + 13))
                return roundID.withUnsafeBytes { $0.sameBytes(as: chunk[start + 17..<start + 17 + length]) }
            }
        }
        return value.map(serial(of:))
    }

    /// The outcome of the first execution of an entry whose key `matches`, read in place.
    func outcome(of entry: Int, where matches: (StoredKey) -> Bool) -> Outcome? {
        read(entrySerial: entry) { chunk, start in
            var outcome: Outcome?
            Self.forEachExecution(in: chunk, at: start) { raw, key, outcomeAt in
                guard matches((raw, UnsafeRawBufferPointer(rebasing: key))) else { return true }
                outcome = Self.outcome(in: chunk, at: outcomeAt)
                return false
            }
            return outcome
        }
    }

    /// Every execution of an entry.
    func executions(of entry: Int) -> [Execution] {
        read(entrySerial: entry) { chunk, start in
            var executions: [Execution] = []
            Self.forEachExecution(in: chunk, at: start) { raw, key, outcomeAt in
                let split = raw ? key.firstIndex(of: 0) : nil
                let stored: Key =
                    if let split {
                        .raw(
                            skill: String(decoding: key[..<split], as: UTF8.self),
                            parameters: Array(key[(split + 1)...]))
                    } else {
                        .canonical(Array(key))
                    }
                executions.append(Execution(key: stored, outcome: Self.outcome(in: chunk, at: outcomeAt)))
                return true
            }
            return executions
        }
    }

    /// Forgets an entry whose round runs again; its bytes are freed with the oldest entries.
    mutating func remove(_ entry: Int) {
        let (chunk, offset) = location(entrySerial: entry)
        arena.set(1, chunk: chunk, offset: offset)
        let hash = read(entrySerial: entry) { chunk, start in chunk.u32(start + 9) }
        index.remove(hash: hash, value: UInt32(truncatingIfNeeded: entry))
    }

    /// Forgets the oldest entry; returns how many outcomes went with it (none when it was marked gone).
    mutating func removeOldest() -> Int {
        let entry = headEntrySerial
        let (gone, hash, executions) = read(entrySerial: entry) { chunk, start in
            (chunk[start] == 1, chunk.u32(start + 9), Int(chunk.u32(start + 17 + Int(chunk.u32(start + 13)))))
        }
        if !gone { index.remove(hash: hash, value: UInt32(truncatingIfNeeded: entry)) }
        entryHead += 1
        headEntrySerial += 1
        // Chunks before the next entry's are done with (the last chunk stays: it is being filled).
        arena.free(before: entryHead < entries.count ? location(entrySerial: headEntrySerial).chunk : nil)
        if entryHead > 4096 && entryHead * 2 > entries.count {
            entries.removeFirst(entryHead)
            entryHead = 0
        }
        return gone ? 0 : executions
    }

    // MARK: - Entry bytes
    //
    // u8 gone (1 once the round left out of order) · u64 finishedAt · u32 id hash · u32 id length · id ·
    // u32 executions · per execution: u8 key form (0 canonical, 1 raw) · value key ·
    // u8 status (0 ok, 1 error) · u64 duration in µs · value agent · value payload.
    // A value is u32 length · bytes, or, when the same bytes stand earlier in the chunk, u32 0x8000_0000 ·
    // u32 where they stand (their length word): rounds that ask the same thing, and the agent names of
    // every round, are kept once per chunk, and freed with it. Little-endian.

    private static let sharedValue: UInt32 = 0x8000_0000

    private func serial(of value: UInt32) -> Int {
        headEntrySerial + Int(value &- UInt32(truncatingIfNeeded: headEntrySerial))
    }

    private func location(entrySerial: Int) -> (chunk: Int, offset: Int) {
        let position = entries[entryHead + entrySerial - headEntrySerial]
        let serial = UInt32(truncatingIfNeeded: position >> 32)
        let oldest = arena.oldestChunk
        return (oldest + Int(serial &- UInt32(truncatingIfNeeded: oldest)), Int(position & 0xFFFF_FFFF))
    }

    /// Calls `body` with the entry's chunk and where in it the entry starts.
    private func read<Result>(entrySerial: Int, _ body: (UnsafeRawBufferPointer, Int) -> Result) -> Result {
        let (chunk, offset) = location(entrySerial: entrySerial)
        return arena.read(chunk) { body($0, offset) }
    }

    /// Writes a value at the end of `chunk` (the last one): a reference to the same bytes written earlier
    /// in it when the table of recent values has them, else the bytes. The value's bytes are `first`,
    /// `second` and `third` one after the other.
    private static func putValue(
        into chunk: inout [UInt8], recent: inout [UInt32], _ first: UnsafeRawBufferPointer,
        _ second: UnsafeRawBufferPointer = UnsafeRawBufferPointer(start: nil, count: 0),
        _ third: UnsafeRawBufferPointer = UnsafeRawBufferPointer(start: nil, count: 0)
    ) {
        let count = first.count + second.count + third.count
        func put(_ value: UInt32) {
            withUnsafeBytes(of: value.littleEndian) { chunk.append(contentsOf: $0) }
        }
        func putBytes() {
            put(UInt32(count))
            chunk.append(contentsOf: first)
            chunk.append(contentsOf: second)
            chunk.append(contentsOf: third)
        }
        // Values shorter than a reference are written as they are.
        guard count >= 8 else { return putBytes() }
        let slot = Int(truncatingIfNeeded: mix(third, into: mix(second, into: mix(first, into: 0))) >> 56)
        let earlier = Int(recent[slot]) - 1
        let same =
            earlier >= 0
            && chunk.withUnsafeBytes { bytes in
                guard Int(bytes.u32(earlier)) == count else { return false }
                let start = earlier + 4
                return first.sameBytes(as: bytes[start..<start + first.count])
                    && second.sameBytes(as: bytes[start + first.count..<start + first.count + second.count])
                    && third.sameBytes(as: bytes[start + first.count + second.count..<start + count])
            }
        if same {
            put(sharedValue)
            put(UInt32(earlier))
        } else {
            recent[slot] = UInt32(chunk.count + 1)
            putBytes()
        }
    }

    /// A quick hash for the table of recent values: a miss only costs the bytes a reference would save,
    /// and a match is compared byte for byte, so chosen collisions can do no harm.
    private static func mix(_ bytes: UnsafeRawBufferPointer, into hash: UInt64) -> UInt64 {
        var hash = hash
        var at = 0
        while at + 8 <= bytes.count {
            hash = (hash ^ bytes.loadUnaligned(fromByteOffset: at, as: UInt64.self)) &* 0xFF51_AFD7_ED55_8CCD
            hash ^= hash >> 29
            at += 8
        }
        while at < bytes.count {
            hash = (hash ^ UInt64(bytes[at])) &* 0x0000_0100_0000_01B3
            at += 1
        }
        return hash &* 0xC4CE_B9FE_1A85_EC53
    }

    /// A value's bytes, and where the next field starts.
    private static func value(in chunk: UnsafeRawBufferPointer, at start: Int) -> (Slice<UnsafeRawBufferPointer>, Int) {
        let word = chunk.u32(start)
        if word == sharedValue {
            let earlier = Int(chunk.u32(start + 4))
            let count = Int(chunk.u32(earlier))
            return (chunk[earlier + 4..<earlier + 4 + count], start + 8)
        }
        return (chunk[start + 4..<start + 4 + Int(word)], start + 4 + Int(word))
    }

    private mutating func write(
        roundID: [UInt8], hash: UInt32, executions: some Collection<Execution>, finishedAt: UInt64
    ) {
        // The table of recent values is taken out too, so that the closure leaves `self` alone.
        var recent: [UInt32] = []
        swap(&recent, &recentValues)
        defer { swap(&recent, &recentValues) }
        arena.writeLast { chunk in
            func put<Value: FixedWidthInteger>(_ value: Value) {
                withUnsafeBytes(of: value.littleEndian) { chunk.append(contentsOf: $0) }
            }
            chunk.append(0)
            put(finishedAt)
            put(hash)
            put(UInt32(roundID.count))
            chunk.append(contentsOf: roundID)
            put(UInt32(executions.count))
            for execution in executions {
                switch execution.key {
                case .canonical(let key):
                    chunk.append(0)
                    key.withUnsafeBytes { Self.putValue(into: &chunk, recent: &recent, $0) }
                case .raw(var skill, let parameters):
                    chunk.append(1)
                    skill.withUTF8 { skill in
                        withUnsafeBytes(of: UInt8(0)) { zero in
                            parameters.withUnsafeBytes {
                                Self.putValue(into: &chunk, recent: &recent, UnsafeRawBufferPointer(skill), zero, $0)
                            }
                        }
                    }
                }
                chunk.append(execution.outcome.status == .ok ? 0 : 1)
                put(UInt64(truncatingIfNeeded: execution.outcome.durationMicros))
                execution.outcome.agent.withUnsafeBytes { Self.putValue(into: &chunk, recent: &recent, $0) }
                execution.outcome.payload.withUnsafeBytes { Self.putValue(into: &chunk, recent: &recent, $0) }
            }
        }
    }

    /// Calls `body` with each execution's key (whether raw, and its bytes) and where its outcome starts,
    /// until it returns false.
    private static func forEachExecution(
        in chunk: UnsafeRawBufferPointer, at start: Int, _ body: (Bool, Slice<UnsafeRawBufferPointer>, Int) -> Bool
    ) {
        var at = start + 17 + Int(chunk.u32(start + 13))
        let count = Int(chunk.u32(at))
        at += 4
        for _ in 0..<count {
            let raw = chunk[at] == 1
            let (key, outcomeAt) = value(in: chunk, at: at + 1)
            guard body(raw, key, outcomeAt) else { return }
            at = value(in: chunk, at: value(in: chunk, at: outcomeAt + 9).1).1
        }
    }

    private static func outcome(in chunk: UnsafeRawBufferPointer, at start: Int) -> Outcome {
        let (agent, payloadAt) = value(in: chunk, at: start + 9)
        return Outcome(
            status: chunk[start] == 0 ? .ok : .error, agent: Array(agent), payload: Array(value(in: chunk, at: payloadAt).0),
            durationMicros: Int(truncatingIfNeeded: chunk.u64(start + 1)))
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

extension UnsafeRawBufferPointer {
    /// Byte for byte equal, compared with memcmp (elementsEqual compared one byte per loop step).
    func sameBytes(as other: Slice<UnsafeRawBufferPointer>) -> Bool {
        guard count == other.count else { return false }
        guard count > 0, let base = baseAddress, let otherBase = other.base.baseAddress else { return true }
        return memcmp(base, otherBase + other.startIndex, count) == 0
    }
}
