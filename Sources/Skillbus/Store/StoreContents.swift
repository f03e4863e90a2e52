import Foundation

/// A session as the store keeps it in memory: its summary, plus what the next append needs.
struct SessionRecord: Sendable, Equatable {
    var summary: SessionSummary
    /// The role the title came from (`user` or `skillCall`), nil while there is no title: a user message
    /// replaces a title taken from a skill call.
    var titleRole: SessionMessage.Role?
    /// The session's latest distinct rounds, oldest first, at most `StoreContents.recentRoundLimit`.
    var recentRounds: [String]
}

/// One change waiting for the next commit.
enum StoreChange: Sendable {
    case message(session: String, message: SessionMessage, content: [UInt8])
    case setMemory(scope: String, key: String, value: [UInt8])
    case deleteMemory(scope: String, key: String)
}

/// What one commit writes: the queued changes in order, and the summaries of the sessions they touch as they
/// were when the batch was taken.
struct StoreBatch: Sendable {
    var changes: [StoreChange]
    var sessions: [SessionRecord]
}

/// Everything an agent store holds in memory, as a plain value (AgentStore keeps it behind a `Mutex`): the
/// session summaries, all memory, the changes not committed yet, and the storage problem if there is one.
/// Reads answer from here at once; writes change it at once and queue a `StoreChange`.
struct StoreContents: Sendable {
    /// How many recent rounds a session remembers to count its turns. A round with a user's message counts
    /// once even when rounds of other messages came between, as long as it is one of the session's last 16.
    static let recentRoundLimit = 16
    static let titleLength = 80

    var sessions: [String: SessionRecord] = [:]
    /// Scope column ("" or "s:<session>") → key → value.
    var memory: [String: [String: JSONValue]] = [:]
    private(set) var pending: [StoreChange] = []
    /// The last commit's failure; nil when it worked.
    var problem: SkillbusError?
    /// Set when close was asked for: writes are refused from then on.
    var closed = false
    /// When the store thread commits next (uptime nanoseconds); nil while nothing is scheduled.
    var flushDeadline: UInt64?

    /// Adds a message to `session`, creating the session on first use. `time` is in milliseconds.
    mutating func append(
        _ role: SessionMessage.Role, _ content: JSONValue, serialized: [UInt8], session: String, round: String,
        time: Int64
    ) -> SessionMessage {
        let date = SQLiteDatabase.date(milliseconds: time)
        var record =
            sessions[session]
            ?? SessionRecord(
                summary: SessionSummary(id: session, created: date, updated: date, turns: 0, messages: 0, title: ""),
                titleRole: nil, recentRounds: [])
        let message = SessionMessage(
            index: record.summary.messages, role: role, content: content, time: date, round: round)
        record.summary.messages += 1
        record.summary.updated = max(record.summary.updated, date)
        // A turn is a round with a user's message in it: a plain skill call's round (skillCall, skillResult) is none.
        if role == .user, !round.isEmpty, !record.recentRounds.contains(round) {
            record.summary.turns += 1
            record.recentRounds.append(round)
            if record.recentRounds.count > Self.recentRoundLimit { record.recentRounds.removeFirst() }
        }
        if record.titleRole != .user, role == .user || record.titleRole == nil,
            let text = SessionMessage.titleText(role, content), !text.isEmpty
        {
            record.summary.title = String(text.prefix(Self.titleLength))
            record.titleRole = role
        }
        sessions[session] = record
        pending.append(.message(session: session, message: message, content: serialized))
        return message
    }

    mutating func setMemory(_ key: String, _ value: JSONValue, serialized: [UInt8], scope: String) {
        memory[scope, default: [:]][key] = value
        pending.append(.setMemory(scope: scope, key: key, value: serialized))
    }

    /// Removes the entry; false (and nothing queued) when there was none.
    mutating func deleteMemory(_ key: String, scope: String) -> Bool {
        guard memory[scope]?.removeValue(forKey: key) != nil else { return false }
        if memory[scope]?.isEmpty == true { memory[scope] = nil }
        pending.append(.deleteMemory(scope: scope, key: key))
        return true
    }

    func memory(prefix: String, scope: String) -> [(key: String, value: JSONValue)] {
        guard let entries = memory[scope] else { return [] }
        return entries.filter { $0.key.utf8.starts(with: prefix.utf8) }.sorted { $0.key < $1.key }
            .map { (key: $0.key, value: $0.value) }
    }

    /// The summaries, newest update first (ties by id, so the order is stable).
    var sortedSessions: [SessionSummary] {
        sessions.values.map(\.summary).sorted {
            $0.updated != $1.updated ? $0.updated > $1.updated : $0.id < $1.id
        }
    }

    // MARK: - Committing

    /// Everything pending, with the summaries of the sessions it touches; nil when nothing is pending.
    func batch() -> StoreBatch? {
        guard !pending.isEmpty else { return nil }
        var touched: Set<String> = []
        for case .message(let session, _, _) in pending { touched.insert(session) }
        return StoreBatch(changes: pending, sessions: touched.sorted().compactMap { sessions[$0] })
    }

    /// The first `count` pending changes were committed: forgets them and clears the problem. Returns whether
    /// a problem was cleared.
    mutating func committed(_ count: Int) -> Bool {
        guard count <= pending.count else {
            preconditionFailure("StoreContents.committed: more changes committed than were pending")
        }
        pending.removeFirst(count)
        defer { problem = nil }
        return problem != nil
    }

    /// The messages of `session` that are not committed yet, in order.
    func pendingMessages(_ session: String) -> [SessionMessage] {
        pending.compactMap { change in
            if case .message(session, let message, _) = change { message } else { nil }
        }
    }

    /// Schedules a commit `interval` nanoseconds from `now` unless one is scheduled already; returns true when
    /// this scheduled it (the store thread must then be woken to notice).
    mutating func scheduleFlush(now: UInt64, interval: UInt64) -> Bool {
        guard flushDeadline == nil else { return false }
        let (deadline, overflow) = now.addingReportingOverflow(interval)
        flushDeadline = overflow ? UInt64.max : deadline
        return true
    }
}
