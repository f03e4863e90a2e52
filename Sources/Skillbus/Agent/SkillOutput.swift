import SkillbusZMQ
import Synchronization

/// Where one invocation's partial output goes (`SkillExecutionContext.emit`): OUTPUT messages to the bus,
/// in batches. A batch goes at once when none went in the last `interval`, otherwise one `interval` after
/// the previous one (so at most one per interval, however fast the skill emits), and the last one when
/// the invocation ends, before its RESULT. Every send happens under the lock, so batches leave in order
/// and none can follow the RESULT.
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
    }

    private struct State {
        var pending: [OutputPart] = []
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
        let bytes = part.serialized().count + 1
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
            state.pendingBytes += bytes
            let now = ContinuousClock.now
            let due = state.lastSent.map { $0 + route.interval } ?? now
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
            Task {
                try? await Task.sleep(until: due, clock: .continuous)
                self.state.withLock { state in
                    state.flushScheduled = false
                    if !state.closed { self.flush(&state) }
                }
            }
        case .overflowed(let error, let first):
            if first { route.stop(invocationID) }
            throw error
        }
    }

    /// The invocation ended: what is pending goes now, before the RESULT, and nothing after it. Returns the
    /// error that stopped it when its output overflowed.
    func close() -> SkillbusError? {
        state.withLock { state in
            flush(&state)
            state.closed = true
            return state.overflow
        }
    }

    private func flush(_ state: inout State, at now: ContinuousClock.Instant = .now) {
        guard !state.pending.isEmpty else { return }
        let batch = OutputBatch(first: state.sent, parts: state.pending)
        route.send(WorkerMessage.output(invocationID: invocationID, batch).encoded())
        state.sent += state.pending.count
        state.pending.removeAll(keepingCapacity: true)
        state.pendingBytes = 0
        state.lastSent = now
    }
}
