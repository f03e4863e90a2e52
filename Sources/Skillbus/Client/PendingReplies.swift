import SkillbusZMQ
import Synchronization

/// What arrives for a request before the answer that ends its wait, by request id.
final class PartialAnswers: Sendable {
    /// ENTRY messages of snapshots being received.
    let snapshotEntries = Mutex<[String: [[UInt8]]]>([:])
    /// Who hears the STREAM pieces of a turn's reply.
    let replyPieces = Mutex<[String: @Sendable (String) -> Void]>([:])
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

/// Callers waiting for a reply, by request id. Whoever removes an entry resumes it, exactly once.
final class PendingReplies: Sendable {
    enum Answer: Sendable {
        case message(BusToClientMessage)
        case timedOut
        case cancelled
    }

    private struct Table {
        var waiting: [String: CheckedContinuation<Answer, Never>] = [:]
        /// Time-outs and cancellations that came before their caller was even registered.
        var early: [String: Answer] = [:]
    }

    private let table = Mutex(Table())

    /// Callers waiting, plus early answers not yet taken (none once every exchange is over).
    var count: Int { table.withLock { $0.waiting.count + $0.early.count } }

    /// Registers a caller; one whose wait already ended (timed out, cancelled) is answered at once.
    func add(_ requestID: String, _ continuation: CheckedContinuation<Answer, Never>) {
        let early = table.withLock { table -> Answer? in
            if let early = table.early.removeValue(forKey: requestID) { return early }
            table.waiting[requestID] = continuation
            return nil
        }
        if let early { continuation.resume(returning: early) }
    }

    /// Ends a caller's wait with `answer`, if it still waits. A reply for nobody is dropped; a time-out
    /// or a cancellation that overtook its caller's registration is kept for it.
    func finish(_ requestID: String, with answer: Answer) {
        let continuation = table.withLock { table -> CheckedContinuation<Answer, Never>? in
            if let continuation = table.waiting.removeValue(forKey: requestID) { return continuation }
            if case .message = answer { return nil }
            if table.early[requestID] == nil { table.early[requestID] = answer }
            return nil
        }
        continuation?.resume(returning: answer)
    }

    /// The exchange is over: drops a time-out or cancellation that raced with its answer.
    func forget(_ requestID: String) {
        table.withLock { _ = $0.early.removeValue(forKey: requestID) }
    }
}
