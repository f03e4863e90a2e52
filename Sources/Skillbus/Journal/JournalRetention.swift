/// What the coordinator's journal writes, and what it answers. The state machine emits entries as actions
/// (`CoordinatorAction.journal`); the journal's thread commits them in batches and answers each `accept`.
public enum JournalEntry: Sendable, Equatable {
    /// A round was accepted: recorded as running before any of it runs, unless the id is journaled already.
    case accept(roundID: [UInt8], body: [UInt8], idempotent: Bool)
    /// The round ended with this document, kept for the retention window. Its body too: a round that started
    /// without a row of its own (an idempotent one the journal cannot hold: CoordinatorState+EarlyRounds) gets its
    /// whole row now.
    case finish(roundID: [UInt8], body: [UInt8], document: [UInt8])
    /// The round ended with nothing to keep (cancelled, refused, or failed in a way that may be tried again).
    case forget(roundID: [UInt8])
    /// An agent served a session: its row in the session roster, written or brought up to date.
    case member(SessionMembership)
    /// The roster forgot a session (least recently served past its limit, or idle too long): its rows go.
    case forgetSession([UInt8])
}

/// One agent's part in one session as the roster keeps it and the journal stores it (PROTOCOL §3.6).
public struct SessionMembership: Sendable, Equatable {
    public var session: [UInt8]
    public var agent: String
    /// The role the agent had when it last served the session; "" for none.
    public var role: String
    /// When it served the session first and last, in milliseconds since 1970.
    public var firstMs: Int64
    public var lastMs: Int64

    public init(session: [UInt8], agent: String, role: String, firstMs: Int64, lastMs: Int64) {
        self.session = session
        self.agent = agent
        self.role = role
        self.firstMs = firstMs
        self.lastMs = lastMs
    }
}

/// The journal's answer to an `accept`, once committed.
public enum JournalAnswer: Sendable, Equatable {
    /// Recorded as running (new, or an interrupted idempotent round run again): the round may start.
    case accepted(roundID: [UInt8])
    /// The id finished before (perhaps in an earlier lifetime of the coordinator): its document.
    case stored(roundID: [UInt8], document: [UInt8])
    /// It was running when an earlier coordinator stopped, and not every skill of it is idempotent.
    case interrupted(roundID: [UInt8])
    /// The id is journaled with another body.
    case conflict(roundID: [UInt8])
    /// The journal could not record it: the round must not run.
    case failed(roundID: [UInt8], SkillbusError)

    public var roundID: [UInt8] {
        switch self {
        case .accepted(let id), .stored(let id, _), .interrupted(let id), .conflict(let id), .failed(let id, _): id
        }
    }
}

/// Which ended rounds the journal drops: those that ended before the retention window, and then the oldest
/// while the journal holds more bytes than its limit. Running rounds are never dropped. A plain value, so the
/// rule is tested without a database.
struct JournalRetention: Sendable, Equatable {
    struct Row: Sendable, Equatable {
        var id: String
        var bytes: Int
        /// When it ended, in milliseconds since 1970.
        var finished: Int64
    }

    var limitBytes: Int
    var retentionMs: Int64

    /// The prefix of `oldest` (ended rows, oldest first) to delete when the journal holds `totalBytes`, and the
    /// total after deleting them.
    func expired(_ oldest: [Row], totalBytes: Int, nowMs: Int64) -> (drop: [Row], totalBytes: Int) {
        var total = totalBytes
        var drop: [Row] = []
        for row in oldest {
            guard row.finished < nowMs - retentionMs || total > limitBytes else { break }
            drop.append(row)
            total -= row.bytes
        }
        return (drop, total)
    }
}
