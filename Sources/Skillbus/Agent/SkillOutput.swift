import SkillbusZMQ
import Synchronization

/// Where one invocation's partial output goes (`SkillExecutionContext.emit`): OUTPUT messages to the bus,
/// in batches. The first part waits one `interval` for others to join it (a skill that ends sooner sends
/// one batch, with its RESULT); after that a part goes at once when no batch went in the last `interval`,
/// otherwise one `interval` after the previous batch — so at most one batch per interval, however fast the
/// skill emits — and the last batch when the invocation ends, before its RESULT. Every send happens under
/// the lock, so batches leave in order and none can follow the RESULT.
///
/// Bounded: past `maxOutputBytes` an emit fails with `output_too_large`, the invocation is stopped, and its
/// RESULT says so whatever the skill returns.
final class SkillOutput: Sendable {
    /// How the worker wants output sent and bounded.
    struct Route: Sendable {
        var maxOutputBytes: Int
        /// The bus refuses larger messages: a batch stays below it.
        var maxMessageBytes: Int
        var interval: Duration = .milliseconds(25)
        let send: @Sendable (Multipart) -> Void
        /// Stops the invocation with this id (the worker cancels its task) once its output overflowed.
        let stop: @Sendable (String) -> Void
        /// The agent's one timer for batches that must wait.
        let clock: OutputClock
    }

    private struct State {
        var pending: [OutputPart] = []
        /// The pending parts as the wire writes them, comma-separated: each part is written once.
        var written: [UInt8] = []
        var pendingBytes = 0
        /// Bytes emitted so far (each part's JSON plus one, as the bus counts them).
        var emitted = 0
        /// Parts sent so far: the next batch's `first`.
        var sent = 0
        var lastSent: ContinuousClock.Instant?
        var flushScheduled = false
        var closed = false
        var overflow: SkillbusError?
    }

    let invocationID: String
    let skill: String
    let route: Route
    private let state = Mutex(State())

    init(invocationID: String, skill: String, route: Route) {
        self.invocationID = invocationID
        self.skill = skill
        self.route = route
    }

    /// Room for a batch's parts in one message, its other frames aside.
    private var batchLimit: Int { max(64, route.maxMessageBytes - 1024) }
    /// A batch this large goes at once: a flood must not pile up for a whole interval.
    private var eagerBytes: Int { min(64 << 10, batchLimit / 2) }

    func emit(_ part: OutputPart) throws(SkillbusError) {
        let encoded = part.serialized()
        let bytes = encoded.count + 1
        enum Next { case nothing, schedule(ContinuousClock.Instant), overflowed(SkillbusError, first: Bool) }
        let next = state.withLock { state -> Next in
            if let overflow = state.overflow { return .overflowed(overflow, first: false) }
            // After the invocation ended (a task the skill left behind): nobody waits any more.
            guard !state.closed else { return .nothing }
            if state.emitted + bytes > route.maxOutputBytes || bytes > batchLimit {
                let error = bytes > batchLimit
                    ? SkillbusError(
                        .outputTooLarge,
                        "'\(skill)' emitted a part of \(bytes) bytes; one part may have at most \(batchLimit) bytes",
                        details: ["limit": .number(Double(batchLimit))])
                    : SkillbusError(
                        .outputTooLarge,
                        "'\(skill)' emitted more than \(route.maxOutputBytes) bytes of output (the agent's "
                            + "maxOutputBytes); it was stopped",
                        details: ["limit": .number(Double(route.maxOutputBytes))])
                state.overflow = error
                return .overflowed(error, first: true)
            }
            if state.pendingBytes + bytes > batchLimit { flush(&state) }
            state.emitted += bytes
            state.pending.append(part)
            if !state.written.isEmpty { state.written.append(UInt8(ascii: ",")) }
            state.written.append(contentsOf: encoded)
            state.pendingBytes += bytes
            let now = ContinuousClock.now
            let due = state.lastSent.map { $0 + route.interval } ?? now + route.interval
            if due <= now || state.pendingBytes >= eagerBytes {
                flush(&state, at: now)
                return .nothing
            }
            guard !state.flushScheduled else { return .nothing }
            state.flushScheduled = true
            return .schedule(due)
        }
        switch next {
        case .nothing:
            return
        case .schedule(let due):
            route.clock.schedule(self, at: due)
        case .overflowed(let error, let first):
            if first { route.stop(invocationID) }
            throw error
        }
    }

    /// The invocation ended: what is pending goes now, before the RESULT, and nothing after it. Returns the
    /// error that stopped it when its output overflowed.
    func close() -> SkillbusError? {
        let (overflow, scheduled) = state.withLock { state in
            flush(&state)
            state.closed = true
            return (state.overflow, state.flushScheduled)
        }
        // Only an invocation that emitted can have a batch waiting: the others never touch the clock.
        if scheduled { route.clock.cancel(self) }
        return overflow
    }

    /// The clock's call: the batch that waited goes now.
    fileprivate func flushWaiting() {
        state.withLock { state in
            state.flushScheduled = false
            if !state.closed { flush(&state) }
        }
    }

    private func flush(_ state: inout State, at now: ContinuousClock.Instant = .now) {
        guard !state.pending.isEmpty else { return }
        var frame: [UInt8] = [UInt8(ascii: "[")]
        frame.reserveCapacity(state.written.count + 2)
        frame.append(contentsOf: state.written)
        frame.append(UInt8(ascii: "]"))
        let batch = OutputBatch(first: state.sent, parts: state.pending, partsFrame: frame)
        route.send(WorkerMessage.output(invocationID: invocationID, batch).encoded())
        state.sent += state.pending.count
        state.pending.removeAll(keepingCapacity: true)
        state.written.removeAll(keepingCapacity: true)
        state.pendingBytes = 0
        state.lastSent = now
    }
}

/// One timer for all of an agent's batches that must wait (`SkillOutput`): a single task that runs only
/// while some batch waits, instead of a task and a timer for every invocation that emits.
final class OutputClock: Sendable {
    private struct State {
        var waiting: [ObjectIdentifier: (output: SkillOutput, due: ContinuousClock.Instant)] = [:]
        var ticking = false
    }

    private let state = Mutex(State())

    init() {}

    func schedule(_ output: SkillOutput, at due: ContinuousClock.Instant) {
        let start = state.withLock { state -> Bool in
            state.waiting[ObjectIdentifier(output)] = (output, due)
            defer { state.ticking = true }
            return !state.ticking
        }
        // Ends by itself once nothing waits: the next batch that must wait starts it again.
        if start { Task { await self.tick() } }
    }

    func cancel(_ output: SkillOutput) {
        state.withLock { _ = $0.waiting.removeValue(forKey: ObjectIdentifier(output)) }
    }

    private func tick() async {
        while true {
            let next = state.withLock { state -> ContinuousClock.Instant? in
                guard let earliest = state.waiting.values.map(\.due).min() else {
                    state.ticking = false
                    return nil
                }
                return earliest
            }
            guard let next else { return }
            try? await Task.sleep(until: next, clock: .continuous)
            let due = state.withLock { state -> [SkillOutput] in
                let now = ContinuousClock.now
                let ready = state.waiting.filter { $0.value.due <= now }
                for key in ready.keys { state.waiting[key] = nil }
                return ready.values.map(\.output)
            }
            for output in due { output.flushWaiting() }
        }
    }
}
