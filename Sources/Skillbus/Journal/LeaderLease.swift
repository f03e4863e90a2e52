/// The rules of a coordinator group's lease (PROTOCOL §3.11), as a plain value: what a standby does with each
/// read of the group's row, until when a leader serves, and how a failed renewal counts. `LeaderElection` does the
/// I/O; these rules are tested without a database or a thread. Times are the coordinator's own monotonic clock
/// (uptime nanoseconds); the server's clock only decides `lease_until < now()`.
struct LeaderLease: Sendable, Equatable {
    let leaseNanos: UInt64

    /// The group's row as a standby reads it.
    struct Row: Sendable, Equatable {
        var epoch: Int
        var renewals: Int64
        /// The server's `lease_until < now()`.
        var expired: Bool
        /// The lease the leader took (its `ha.leaseMs`); 0: unknown.
        var leaseMs = 0
        /// The leader stopped cleanly: it serves no more and its journal is closed.
        var released = false
        /// The row names this coordinator, at the bus endpoint it has just bound: it was this coordinator before a
        /// restart, and the process that held the lead is gone (it would hold that endpoint still).
        var mine = false
    }

    /// The row as this standby last saw it, and when the first read that saw it so came back.
    struct Seen: Sendable, Equatable {
        var epoch: Int
        var renewals: Int64
        var since: UInt64
    }
    private(set) var seen: Seen?

    enum Standby: Sendable, Equatable {
        /// Keep reading.
        case wait
        /// The group has no row: insert one with epoch 1 (only one coordinator's insert succeeds).
        case create
        /// Take over with one conditional update that succeeds only if the row is still this one and expired.
        case claim(epoch: Int, renewals: Int64)
        /// Take back this coordinator's own lead after a restart, at once (the update checks name and endpoint).
        case reclaim(epoch: Int)
    }

    init(leaseMs: Int) { leaseNanos = UInt64(leaseMs) * 1_000_000 }

    /// A read that succeeded came back at `now`. A standby claims only a row it has seen unchanged for one whole
    /// lease: the first read that saw it came back at or after the leader's last renewal was sent, so after
    /// `since + lease` that leader's own gate (`servingUntil`) has closed, clock rates being equal.
    mutating func read(_ row: Row?, at now: UInt64) -> Standby {
        guard let row else {
            seen = nil
            return .create
        }
        if row.mine { return .reclaim(epoch: row.epoch) }
        if row.released && row.expired { return .claim(epoch: row.epoch, renewals: row.renewals) }
        guard let seen, seen.epoch == row.epoch, seen.renewals == row.renewals else {
            seen = Seen(epoch: row.epoch, renewals: row.renewals, since: now)
            return .wait
        }
        // The longer of the two leases: a leader configured with a longer one than this standby keeps its gate open
        // that long.
        let wait = max(leaseNanos, UInt64(max(0, row.leaseMs)) * 1_000_000)
        return now >= seen.since + wait && row.expired ? .claim(epoch: row.epoch, renewals: row.renewals) : .wait
    }

    /// A read failed: the standby starts watching over with its next read that succeeds. So when the database was
    /// away (restarted), a standby waits one whole lease after it is back, and the leader renews first.
    mutating func readFailed() { seen = nil }

    /// A renewal (or the claim) sent at `sentAt` succeeded: the leader serves until one lease after it was sent.
    func servingUntil(sentAt: UInt64) -> UInt64 { sentAt + leaseNanos }

    /// How a failed renewal counts.
    enum Failure: Sendable, Equatable {
        /// The server refused or closed the connection (it is down or restarting, for every coordinator alike):
        /// the leader serves on from memory.
        case refused
        /// No answer (a cut network, a hung server): the lease runs out by itself.
        case unanswered
    }

    /// libpq says "Connection refused" when nobody listens, and a server shutting down or starting up says so;
    /// anything else, a timeout above all, counts as no answer.
    static func failure(_ message: String) -> Failure {
        let text = message.lowercased()
        if text.contains("timeout") || text.contains("timed out") { return .unanswered }
        let refusals = [
            "connection refused", "server closed the connection", "terminating connection", "shutting down",
            "starting up", "in recovery mode", "no connection to the server", "is closed",
        ]
        return refusals.contains { text.contains($0) } ? .refused : .unanswered
    }
}
