import Testing

@testable import Skillbus

/// The lease rules of a coordinator group (PROTOCOL §3.11), without a database.
@Suite("Leader lease")
struct LeaderLeaseTests {
    static let ms: UInt64 = 1_000_000

    @Test("a standby claims only a row it saw unchanged for one whole lease, and expired by the server's clock")
    func claimAfterOneLease() {
        var lease = LeaderLease(leaseMs: 2000)
        let row = LeaderLease.Row(epoch: 3, renewals: 10, expired: false)
        #expect(lease.read(row, at: 100 * Self.ms) == .wait)
        #expect(lease.read(row, at: 1000 * Self.ms) == .wait)
        // A whole lease, but the server says the lease still holds.
        #expect(lease.read(row, at: 2100 * Self.ms) == .wait)
        var expired = row
        expired.expired = true
        #expect(lease.read(expired, at: 2099 * Self.ms) == .wait)
        #expect(lease.read(expired, at: 2100 * Self.ms) == .claim(epoch: 3, renewals: 10))
    }

    @Test("a renewal seen, or a new epoch, starts the lease over; no row calls for the first leader")
    func renewalsReset() {
        var lease = LeaderLease(leaseMs: 1000)
        #expect(lease.read(.init(epoch: 1, renewals: 1, expired: true), at: 0) == .wait)
        #expect(lease.read(.init(epoch: 1, renewals: 2, expired: true), at: 900 * Self.ms) == .wait)
        #expect(lease.read(.init(epoch: 1, renewals: 2, expired: true), at: 1800 * Self.ms) == .wait)
        #expect(lease.read(.init(epoch: 2, renewals: 2, expired: true), at: 1900 * Self.ms) == .wait)
        #expect(
            lease.read(.init(epoch: 2, renewals: 2, expired: true), at: 2900 * Self.ms) == .claim(epoch: 2, renewals: 2)
        )
        #expect(lease.read(nil, at: 3000 * Self.ms) == .create)
        #expect(lease.seen == nil)
    }

    @Test("a PostgreSQL restart costs no failover: the leader renews before a standby has seen a whole lease")
    func restartWithoutFailover() {
        var lease = LeaderLease(leaseMs: 2000)
        // Reads before the restart, then reads that fail while the server is down.
        #expect(lease.read(.init(epoch: 5, renewals: 40, expired: false), at: 0) == .wait)
        lease.readFailed()
        // Down for 5 s: the first read after it sees the row unchanged and expired, but counts from itself on...
        #expect(lease.read(.init(epoch: 5, renewals: 40, expired: true), at: 5000 * Self.ms) == .wait)
        // ...only when it saw it first, so the leader's renewal 500 ms later wins.
        #expect(lease.read(.init(epoch: 5, renewals: 41, expired: false), at: 5500 * Self.ms) == .wait)
        #expect(lease.servingUntil(sentAt: 5000 * Self.ms) == 7000 * Self.ms)
    }

    @Test("a refused connection lets the leader serve on; a timeout does not")
    func failures() {
        #expect(
            LeaderLease.failure(
                "cannot connect to PostgreSQL at x: connection to server at \"127.0.0.1\", port 5 failed: Connection refused"
            ) == .refused)
        #expect(LeaderLease.failure("PostgreSQL at x, renew: server closed the connection unexpectedly") == .refused)
        #expect(LeaderLease.failure("FATAL: the database system is starting up") == .refused)
        #expect(LeaderLease.failure("cannot connect to PostgreSQL at x: timeout expired") == .unanswered)
        #expect(
            LeaderLease.failure("PostgreSQL at x, renew: could not receive data from server: Connection timed out")
                == .unanswered)
        #expect(LeaderLease.failure("no route to host") == .unanswered)
    }
}

extension LeaderLeaseTests {
    @Test("a lead given up by a leader that stopped cleanly is claimed at once")
    func released() {
        var lease = LeaderLease(leaseMs: 2000)
        #expect(
            lease.read(.init(epoch: 4, renewals: 8, expired: true, released: true), at: 0)
                == .claim(epoch: 4, renewals: 8))
    }

    @Test("a leader whose lease is longer than the standby's is waited for as long as its own lease")
    func longerLeaderLease() {
        var lease = LeaderLease(leaseMs: 1000)
        let row = LeaderLease.Row(epoch: 2, renewals: 9, expired: true, leaseMs: 3000)
        #expect(lease.read(row, at: 0) == .wait)
        #expect(lease.read(row, at: 2999 * Self.ms) == .wait)
        #expect(lease.read(row, at: 3000 * Self.ms) == .claim(epoch: 2, renewals: 9))
    }

    @Test("a coordinator restarted on the endpoint its row names takes its lead back at once")
    func reclaim() {
        var lease = LeaderLease(leaseMs: 2000)
        #expect(lease.read(.init(epoch: 7, renewals: 3, expired: false, mine: true), at: 0) == .reclaim(epoch: 7))
    }
}
