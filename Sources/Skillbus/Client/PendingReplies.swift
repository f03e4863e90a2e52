import SkillbusZMQ
import Synchronization

/// What arrives for a request before the answer that ends its wait, by request id.
final class PartialAnswers: Sendable {
    /// ENTRY messages of snapshots being received.
    let snapshotEntries = Mutex<[String: [[UInt8]]]>([:])
    /// Who hears the STREAM pieces of a turn's reply.
    let replyPieces = Mutex<[String: @Sendable (String) -> Void]>([:])
    /// Who follows a turn's states and calls (PROGRESS).
    let progress = Mutex<[String: @Sendable (String, TurnProgress) -> Void]>([:])
    /// Who hears the OUTPUT of a request's invocations: the round's invocation id (empty for a REQUEST)
    /// and the batch.
    let outputs = Mutex<[String: @Sendable (String, OutputBatch) -> Void]>([:])
    /// Who decides CONFIRMs, and how the answer goes back; without a decider every one is refused.
    let confirmer = Mutex<(@Sendable (Confirmation) async -> Bool)?>(nil)
    let reply = Mutex<(@Sendable (Multipart) -> Void)?>(nil)
}

/// The bus asks whether an invocation of a skill that needs confirmation may run.
public struct Confirmation: Sendable, Equatable {
    /// The request (REQUEST, ROUND or ASK) of this client that it belongs to.
    public var requestID: String
    public var skill: String
    public var parameters: JSONValue
}

/// Callers waiting for a reply, by request id, each until its deadline. Whoever removes an entry resumes
/// it, exactly once. The client's socket thread keeps the deadlines (`expire`, `untilNextDeadline`), so
/// a request costs no timer task and no thread hop besides the socket's own.
final class PendingReplies: Sendable {
    enum Answer: Sendable {
        case message(BusToClientMessage)
        case timedOut
        case cancelled
    }

    private struct Waiter {
        var continuation: CheckedContinuation<Answer, Never>
        var deadline: ContinuousClock.Instant
        /// Its caller gave up and waits only for the answer to its CANCEL: running out is `cancelled`.
        var gaveUp = false
        /// Its message is out (handed to the socket): a CANCEL sent now cannot overtake it.
        var sent = false
        /// Its caller gave up before that: the CANCEL goes right after the message (`sent`).
        var cancelAfterSend = false
        /// A message sent again until the answer comes (a ROUND, PROTOCOL §3.5.9).
        var resend: Resend?
        /// How it goes to another coordinator of a group (PROTOCOL §3.3), and when it is due to go (once).
        var again: Again?
        var againAt: ContinuousClock.Instant?

        /// When this waiter next needs the socket's thread: its deadline, or a message due before it.
        var nextTime: ContinuousClock.Instant {
            var time = deadline
            if let next = resend?.next { time = min(time, next) }
            if let againAt { time = min(time, againAt) }
            return time
        }
    }

    /// How a waiting request goes again to the coordinator a client moved to: after a `not_leader` refusal of
    /// it, always; after a move for another reason, when `afterMove` (rounds and reads, never a REQUEST:
    /// §3.5.9). Built anew for the time left; nil: not any more.
    struct Again: Sendable {
        var afterMove: Bool
        var message: @Sendable (ContinuousClock.Instant) -> Multipart?
    }

    /// How a waiting request is sent again: every `interval`, built anew for the time left (nil: no more).
    struct Resend: Sendable {
        var interval: Duration
        var next: ContinuousClock.Instant
        var message: @Sendable (ContinuousClock.Instant) -> Multipart?
    }

    private struct Table {
        var waiting: [String: Waiter] = [:]
        /// Cancellations that came before their caller was even registered.
        var early: [String: Answer] = [:]
        /// No waiter's deadline is earlier (it may be later than the earliest one left: that costs one
        /// early look, never a missed deadline).
        var earliest: ContinuousClock.Instant?
    }

    private let table = Mutex(Table())

    /// Callers waiting, plus early answers not yet taken (none once every exchange is over).
    var count: Int { table.withLock { $0.waiting.count + $0.early.count } }

    /// Registers a caller until `deadline`; one whose wait already ended (cancelled) is answered at once.
    /// Returns whether it waits (false: it was answered at once).
    @discardableResult
    func add(
        _ requestID: String, until deadline: ContinuousClock.Instant, resend: Resend? = nil, again: Again? = nil,
        _ continuation: CheckedContinuation<Answer, Never>
    ) -> Bool {
        let early = table.withLock { table -> Answer? in
            if let early = table.early.removeValue(forKey: requestID) { return early }
            let waiter = Waiter(continuation: continuation, deadline: deadline, resend: resend, again: again)
            table.waiting[requestID] = waiter
            table.earliest = min(table.earliest ?? waiter.nextTime, waiter.nextTime)
            return nil
        }
        guard let early else { return true }
        continuation.resume(returning: early)
        return false
    }

    /// What a caller that gives up is to do about the bus.
    enum GiveUp: Equatable {
        /// It was not waiting yet: nothing went to the bus, nothing is to cancel (`finish` it).
        case notWaiting
        /// Send the CANCEL now: the message it cancels is out.
        case cancelNow
        /// Its message is not out yet: the CANCEL goes right after it (`sent`), so it never overtakes it.
        case cancelAfterSend
    }

    /// The caller gave up and tells the bus: it waits for the bus's answer for `grace` more at most, and
    /// then ends as cancelled.
    func giveUp(_ requestID: String, within grace: Duration) -> GiveUp {
        table.withLock { table in
            guard var waiter = table.waiting[requestID] else { return .notWaiting }
            waiter.gaveUp = true
            waiter.resend = nil
            waiter.again = nil
            waiter.againAt = nil
            waiter.deadline = min(waiter.deadline, .now + grace)
            waiter.cancelAfterSend = !waiter.sent
            table.waiting[requestID] = waiter
            table.earliest = min(table.earliest ?? waiter.deadline, waiter.deadline)
            return waiter.sent ? .cancelNow : .cancelAfterSend
        }
    }

    /// The caller's message is out; true when it gave up meanwhile: its CANCEL is to go now.
    func sent(_ requestID: String) -> Bool {
        table.withLock { table in
            guard var waiter = table.waiting[requestID] else { return false }
            waiter.sent = true
            defer { table.waiting[requestID] = waiter }
            return waiter.cancelAfterSend
        }
    }

    /// Ends a caller's wait with `answer`, if it still waits. A reply for nobody is dropped; a
    /// cancellation that overtook its caller's registration is kept for it.
    func finish(_ requestID: String, with answer: Answer) {
        let waiter = table.withLock { table -> Waiter? in
            if let waiter = table.waiting.removeValue(forKey: requestID) { return waiter }
            if case .message = answer { return nil }
            if table.early[requestID] == nil { table.early[requestID] = answer }
            return nil
        }
        waiter?.continuation.resume(returning: answer)
    }

    /// Ends, as timed out, every wait whose deadline has come.
    func expire(now: ContinuousClock.Instant = .now) {
        let expired = table.withLock { table -> [Waiter] in
            guard let earliest = table.earliest, earliest <= now else { return [] }
            let due = table.waiting.filter { $0.value.deadline <= now }
            for requestID in due.keys { table.waiting.removeValue(forKey: requestID) }
            table.earliest = table.waiting.values.map(\.nextTime).min()
            return Array(due.values)
        }
        for waiter in expired { waiter.continuation.resume(returning: waiter.gaveUp ? .cancelled : .timedOut) }
    }

    /// The messages due to be sent again now; each is scheduled for its next interval.
    func dueResends(now: ContinuousClock.Instant = .now) -> [Multipart] {
        table.withLock { table -> [Multipart] in
            var messages: [Multipart] = []
            for (requestID, waiter) in table.waiting {
                if let againAt = waiter.againAt, againAt <= now {
                    table.waiting[requestID]?.againAt = nil
                    if let message = waiter.again?.message(now) { messages.append(message) }
                    // A round's regular resend counts from this copy.
                    if let resend = waiter.resend { table.waiting[requestID]?.resend?.next = now + resend.interval }
                    continue
                }
                guard let resend = waiter.resend, resend.next <= now else { continue }
                if let message = resend.message(now) {
                    messages.append(message)
                    table.waiting[requestID]?.resend?.next = now + resend.interval
                } else {
                    table.waiting[requestID]?.resend = nil
                }
            }
            if !messages.isEmpty || table.earliest.map({ $0 <= now }) == true {
                table.earliest = table.waiting.values.map(\.nextTime).min()
            }
            return messages
        }
    }

    /// A coordinator refused request `requestID` (`not_leader`): it goes again, at `at`, to the one moved to.
    /// False when nobody waits for it any more (or it may not go again).
    func sendAgain(_ requestID: String, at: ContinuousClock.Instant) -> Bool {
        table.withLock { table in
            guard table.waiting[requestID]?.again != nil else { return false }
            table.waiting[requestID]?.againAt = at
            table.earliest = min(table.earliest ?? at, at)
            return true
        }
    }

    /// The client moved to another coordinator: what may go again (`Again.afterMove`) goes there at `at`.
    func moved(at: ContinuousClock.Instant) {
        table.withLock { table in
            for (requestID, waiter) in table.waiting where waiter.again?.afterMove == true {
                table.waiting[requestID]?.againAt = at
                table.earliest = min(table.earliest ?? at, at)
            }
        }
    }

    /// Whether some caller waits for an answer.
    var anyWaiting: Bool { table.withLock { !$0.waiting.isEmpty } }

    /// How long until the next deadline; nil when nobody waits.
    func untilNextDeadline(now: ContinuousClock.Instant = .now) -> Duration? {
        table.withLock { $0.earliest }.map { max($0 - now, .zero) }
    }

    /// The exchange is over: drops a cancellation that raced with its answer.
    func forget(_ requestID: String) {
        table.withLock { _ = $0.early.removeValue(forKey: requestID) }
    }

    /// One exchange: registers the wait for `requestID` until `deadline`, then `send`s its message, and returns
    /// the answer. A caller cancelled meanwhile `cancel`s it on the bus right after the message, never before it
    /// (the bus would find nothing to cancel, then run it for nobody), and then waits `grace` for the bus's
    /// answer to the CANCEL, or, with no grace (nobody expires this table's waits), ends at once. Without
    /// `cancel`, a cancelled caller's wait just ends.
    func exchange(
        _ requestID: String, until deadline: ContinuousClock.Instant, resend: Resend? = nil, again: Again? = nil,
        send: @escaping @Sendable () -> Void, cancel: (@Sendable () -> Void)?, grace: Duration?
    ) async -> Answer {
        let cancelOnBus = { @Sendable in
            cancel?()
            if grace == nil { self.finish(requestID, with: .cancelled) }
        }
        defer { forget(requestID) }
        return await withTaskCancellationHandler {
            await withCheckedContinuation { continuation in
                // Already cancelled: answered at once, and nothing need go to the bus.
                guard add(requestID, until: deadline, resend: resend, again: again, continuation) else { return }
                send()
                // Cancelled between the two: the CANCEL follows the message.
                if sent(requestID) { cancelOnBus() }
            }
        } onCancel: {
            switch cancel == nil ? .notWaiting : giveUp(requestID, within: grace ?? .zero) {
            case .cancelNow: cancelOnBus()
            case .cancelAfterSend: break
            case .notWaiting: finish(requestID, with: .cancelled)
            }
        }
    }
}
