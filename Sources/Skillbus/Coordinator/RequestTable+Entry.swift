/// What the `RequestTable` holds and hands out: an entry, its phase, and a running entry as the operations that
/// answer or end it return it.
extension RequestTable {
    enum Phase: Sendable, Equatable {
        /// Held until `client` approves it (confirmation id `c` and the number), at most until `deadline`.
        case confirming(id: UInt64, client: PeerID, deadline: UInt64)
        /// Waiting for a free slot: in its skill's lane for its priority, or in its target agent's queue.
        case queued
        /// Waiting out the backoff before its next attempt, until `until`.
        case backingOff(until: UInt64)
        /// Sent to `worker` as invocation `i` and the number. `answered`: its waiters were answered (its deadline
        /// passed, or it was cancelled) and it only holds the slot until the worker reports; `outputBytes`: the
        /// partial output relayed so far.
        case running(invocation: UInt64, worker: PeerID, answered: Bool, outputBytes: Int)

        var isBackingOff: Bool {
            if case .backingOff = self { return true }
            return false
        }

        /// Queued or backing off: it will run unless something takes it out.
        var waitsToRun: Bool { self == .queued || isBackingOff }
    }

    struct Entry: Sendable {
        var request: Request
        var phase: Phase
        /// `request.origin`'s hash, to take the entry out of the origin index without hashing it again.
        let originHash: UInt32

        /// Whether anybody still waits for it: every entry but a running one already answered.
        var isAwaited: Bool {
            if case .running(_, _, true, _) = phase { return false }
            return true
        }
    }

    /// A running entry as the operations that answer or end it hand it out.
    struct Running: Sendable {
        let invocation: UInt64
        let worker: PeerID
        let answered: Bool
        let request: Request

        var invocationID: String { RequestTable.invocationID(invocation) }
    }
}
