import Dispatch
import Foundation
import Synchronization

/// A coordinator group's election (PROTOCOL §3.11), on a thread and a PostgreSQL connection of its own (never
/// the coordinator's thread, never the journal's connection). Every `leaseMs / 8` a standby reads the group's
/// row in `skillbus_leaders` and claims the lead by `LeaderLease`'s rules; every `leaseMs / 4` the leader renews.
///
/// What the coordinator's thread reads: `servingUntil` (one atomic load per message: the leader serves while its
/// own clock is before it), `known` (whom a standby's refusal names), and `takeEvents()` after `notify` woke it.
final class LeaderElection: Sendable {
    enum Event: Sendable {
        /// This coordinator leads now, with the journal it opened at its epoch.
        case leading(GroupLeader, RoundJournal)
        /// It lost the lead (its epoch is not the group's, or its lease ran out unanswered): it must stop.
        case lost(String)
    }

    let settings: CoordinatorGroupSettings
    /// This coordinator as the group's rows name it (`http`: its dashboard, nil when it serves none).
    let me: GroupMember
    /// Uptime nanoseconds until which this coordinator may serve; 0 while it is a standby.
    let servingUntil = Atomic<UInt64>(0)
    /// The leader as last read (a standby's refusal names it), or this coordinator once it leads.
    let known = Mutex<GroupLeader?>(nil)
    /// The group's members seen lately, this one among them, sorted by name (`GroupMembers`).
    let members = Mutex<[GroupMember]>([])
    private let events = Mutex<[Event]>([])
    private let stopping = Atomic<Bool>(false)
    private let releasing = Atomic<Bool>(false)
    private let wakeup = DispatchSemaphore(value: 0)
    private let exited = DispatchSemaphore(value: 0)
    let logger: Logger

    /// Connects (a database nobody answers stops the coordinator at start, as a journal's would), makes the tables
    /// when missing, and starts the thread. `openJournal` runs on the election's thread when it wins, with the
    /// epoch it won; `notify` wakes the coordinator's thread after each event. `http`: the operator endpoint's
    /// bound address, nil when the coordinator serves none.
    init(
        settings: CoordinatorGroupSettings, bus: String, feed: String, http: HTTPAddress? = nil, logger: Logger,
        openJournal: @escaping @Sendable (Int) throws(SkillbusError) -> RoundJournal,
        notify: @escaping @Sendable () -> Void
    ) throws(SkillbusError) {
        self.settings = settings
        let endpoints = settings.advertised(bus: bus, feed: feed)
        me = GroupMember(
            name: settings.memberName, http: settings.advertisedHTTP(bound: http), bus: endpoints.bus,
            feed: endpoints.feed)
        self.logger = logger
        let opened = DispatchSemaphore(value: 0)
        let outcome = Mutex<SkillbusError?>(nil)
        let thread = Thread { [self] in
            let connection: PostgresConnection
            do throws(SkillbusError) {
                connection = try connect()
            } catch {
                outcome.withLock { $0 = error }
                opened.signal()
                exited.signal()
                return
            }
            run(connection, openJournal: openJournal, notify: notify, started: opened)
            connection.close()
            exited.signal()
        }
        thread.name = "skillbus-election"
        thread.start()
        opened.wait()
        if let error = outcome.withLock({ $0 }) { throw error }
    }

    /// Whether this coordinator may serve at `now` (uptime nanoseconds).
    @inline(__always)
    func serving(_ now: UInt64) -> Bool { now < servingUntil.load(ordering: .relaxed) }

    func takeEvents() -> [Event] {
        events.withLock { list in
            defer { list = [] }
            return list
        }
    }

    /// Stops the thread (at the coordinator's stop). With `release`, a leader gives its lead up (the coordinator
    /// serves no more and closed its journal), so a standby takes over at once; without, after the lease.
    func close(release: Bool = false) {
        releasing.store(release, ordering: .relaxed)
        stopping.store(true, ordering: .relaxed)
        wakeup.signal()
        exited.wait()
        exited.signal()
    }

    // MARK: - On the thread

    private func connect() throws(SkillbusError) -> PostgresConnection {
        // Statements that hang (a row held by a stopped leader's transaction) give up within half a lease.
        let half = String(max(100, settings.leaseMs / 2))
        let connection = try PostgresConnection(
            url: settings.database, password: settings.password, applicationName: "skillbus election",
            timeoutMs: settings.leaseMs, settings: [("statement_timeout", half), ("lock_timeout", half)])
        // Whatever the network does (a middlebox that drops a connection silently), a renewal fails in time.
        connection.answerTimeoutMs = max(100, settings.leaseMs / 2)
        do {
            try PostgresJournalSchema.prepare(connection)
        } catch {
            connection.close()
            throw error
        }
        return connection
    }

    /// `started` is called after the first pass: a coordinator restarted in place takes its lead back before it
    /// reads any message.
    private func run(
        _ first: PostgresConnection, openJournal: @Sendable (Int) throws(SkillbusError) -> RoundJournal,
        notify: @Sendable () -> Void, started: DispatchSemaphore
    ) {
        var starting = true
        defer { if starting { started.signal() } }
        var connection: PostgresConnection? = first
        var lease = LeaderLease(leaseMs: settings.leaseMs)
        var epoch: Int?
        var refusedLogged = false
        var membersDue: UInt64 = 0
        func lose(_ reason: String) {
            servingUntil.store(0, ordering: .relaxed)
            events.withLock { $0.append(.lost(reason)) }
            notify()
        }
        while !stopping.load(ordering: .relaxed) {
            let start = DispatchTime.now().uptimeNanoseconds
            do throws(SkillbusError) {
                if connection?.isOpen != true {
                    connection?.close()
                    connection = nil
                    connection = try connect()
                }
                guard let database = connection else { continue }
                if let held = epoch {
                    guard try renew(database, epoch: held) else {
                        lose("another coordinator leads group '\(settings.group)' now (this one led epoch \(held))")
                        return
                    }
                    servingUntil.store(lease.servingUntil(sentAt: start), ordering: .relaxed)
                    if refusedLogged {
                        logger.info("the database of group '\(settings.group)' answers again; still leading")
                        refusedLogged = false
                    }
                } else if let won = try standby(database, &lease) {
                    let leader = GroupLeader(
                        name: me.name, bus: me.bus, feed: me.feed, epoch: won.epoch,
                        since: FeedEvent.timestamp(milliseconds: won.sinceMs), http: me.http)
                    let journal: RoundJournal
                    do {
                        journal = try openJournal(won.epoch)
                    } catch {
                        lose(
                            "took the lead of group '\(settings.group)' but could not open its journal: \(error.message)"
                        )
                        return
                    }
                    epoch = won.epoch
                    known.withLock { $0 = leader }
                    servingUntil.store(lease.servingUntil(sentAt: start), ordering: .relaxed)
                    events.withLock { $0.append(.leading(leader, journal)) }
                    notify()
                }
                // After the lease's own statement, about once a lease: what the group's dashboards need.
                if start >= membersDue {
                    membersDue = start + lease.leaseNanos
                    refreshMembers(database)
                }
            } catch {
                if epoch != nil {
                    switch LeaderLease.failure(error.message) {
                    case .refused:
                        // The server is down for every coordinator alike: no standby can take over until it is
                        // back, and this leader renews first then. It serves on from memory.
                        servingUntil.store(lease.servingUntil(sentAt: start), ordering: .relaxed)
                        if !refusedLogged {
                            logger.warning(
                                "the database of group '\(settings.group)' refuses connections (\(error.message)); "
                                    + "leading on from memory until it is back")
                            refusedLogged = true
                        }
                    case .unanswered:
                        if DispatchTime.now().uptimeNanoseconds >= servingUntil.load(ordering: .relaxed) {
                            lose(
                                "the lease of group '\(settings.group)' ran out: the database did not answer for "
                                    + "\(settings.leaseMs) ms (\(error.message))")
                            return
                        }
                    }
                } else {
                    lease.readFailed()
                    logger.debug("election: \(error.message)")
                }
            }
            if starting {
                started.signal()
                starting = false
            }
            // The leader renews every quarter lease; a standby reads every eighth, since a failover takes up to one
            // lease plus the time between the leader's last renewal and the first read that sees it.
            let period = epoch == nil ? lease.leaseNanos / 8 : lease.leaseNanos / 4
            _ = wakeup.wait(timeout: DispatchTime(uptimeNanoseconds: start + period))
        }
        if let held = epoch, releasing.load(ordering: .relaxed), let database = connection {
            servingUntil.store(0, ordering: .relaxed)
            do throws(SkillbusError) {
                try database.run("release", Self.release, [.text(settings.group), .integer(Int64(held))])
                logger.info(
                    "gave up the lead of group '\(settings.group)' (epoch \(held)): a standby takes over at once")
            } catch {
                logger.warning("could not give up the lead of group '\(settings.group)': \(error.message)")
            }
        }
    }

    /// One read of the group's row as a standby, and the claim or the insert it calls for; the epoch won, if any.
    private func standby(_ database: PostgresConnection, _ lease: inout LeaderLease) throws(SkillbusError)
        -> (epoch: Int, sinceMs: Int64)?
    {
        var row: LeaderLease.Row?
        var leader: GroupLeader?
        try database.run("leader", Self.read, [.text(settings.group)]) { result in
            row = LeaderLease.Row(
                epoch: result.int(0), renewals: result.int64(1), expired: result.bool(2), leaseMs: result.int(7),
                released: result.bool(8),
                mine: result.text(3) == me.name && result.text(4) == me.bus)
            leader = GroupLeader(
                name: result.text(3), bus: result.text(4), feed: result.text(5), epoch: result.int(0),
                since: FeedEvent.timestamp(milliseconds: result.int64(6)), http: result.isNull(9) ? nil : result.text(9)
            )
        }
        let now = DispatchTime.now().uptimeNanoseconds
        known.withLock { $0 = leader }
        let sinceMs = RoundJournal.nowMs()
        let mine: [PostgresConnection.Value] = [
            .text(settings.group), .text(me.name), .text(me.bus), .text(me.feed), .integer(sinceMs),
            .integer(Int64(settings.leaseMs)), me.http.map { .text($0) } ?? .null,
        ]
        switch lease.read(row, at: now) {
        case .wait:
            return nil
        case .create:
            guard try database.run("create", Self.create, mine) == 1 else { return nil }
            logger.info("won the lead of group '\(settings.group)' as '\(me.name)' (epoch 1, the group's first leader)")
            return (1, sinceMs)
        case .claim(let epoch, let renewals):
            var won: Int?
            try database.run("claim", Self.claim, mine + [.integer(Int64(epoch)), .integer(renewals)]) {
                won = $0.int(0)
            }
            guard let won else { return nil }
            logger.info(
                "won the lead of group '\(settings.group)' as '\(me.name)' (epoch \(won)): '\(leader?.name ?? "?")' "
                    + "did not renew its lease for \(settings.leaseMs) ms")
            return (won, sinceMs)
        case .reclaim(let epoch):
            var won: Int?
            try database.run("reclaim", Self.reclaim, mine + [.integer(Int64(epoch))]) { won = $0.int(0) }
            guard let won else { return nil }
            logger.info(
                "won the lead of group '\(settings.group)' back as '\(me.name)' (epoch \(won)): restarted on the "
                    + "endpoint it led on, \(me.bus)")
            return (won, sinceMs)
        }
    }

    /// Renews the lease of `epoch`; false when the group is at another epoch (the lead was lost).
    private func renew(_ database: PostgresConnection, epoch: Int) throws(SkillbusError) -> Bool {
        try database.run(
            "renew", Self.renew, [.text(settings.group), .integer(Int64(epoch)), .integer(Int64(settings.leaseMs))])
            == 1
    }

    static let read =
        "SELECT epoch, renewals, lease_until < now(), name, bus, feed, since, lease_ms, released, http "
        + "FROM skillbus_leaders WHERE grp = $1"
    static let create =
        "INSERT INTO skillbus_leaders (grp, epoch, name, bus, feed, since, lease_until, lease_ms, renewals, http) "
        + "VALUES ($1, 1, $2, $3, $4, $5, now() + $6::bigint * interval '1 millisecond', $6, 0, $7) "
        + "ON CONFLICT (grp) DO NOTHING"
    static let claim =
        "UPDATE skillbus_leaders SET epoch = epoch + 1, name = $2, bus = $3, feed = $4, since = $5, "
        + "lease_until = now() + $6::bigint * interval '1 millisecond', lease_ms = $6, renewals = 0, released = false, "
        + "http = $7 WHERE grp = $1 AND epoch = $8 AND renewals = $9 AND lease_until < now() RETURNING epoch"
    /// Only the row naming this coordinator at this endpoint, which its restart proved free.
    static let reclaim =
        "UPDATE skillbus_leaders SET epoch = epoch + 1, feed = $4, since = $5, "
        + "lease_until = now() + $6::bigint * interval '1 millisecond', lease_ms = $6, renewals = 0, released = false, "
        + "http = $7 WHERE grp = $1 AND epoch = $8 AND name = $2 AND bus = $3 RETURNING epoch"
    /// Only after the coordinator stopped serving and closed its journal.
    static let release =
        "UPDATE skillbus_leaders SET released = true, lease_until = now() - interval '1 millisecond', "
        + "renewals = renewals + 1 WHERE grp = $1 AND epoch = $2"
    static let renew =
        "UPDATE skillbus_leaders SET lease_until = now() + $3::bigint * interval '1 millisecond', "
        + "lease_ms = $3, renewals = renewals + 1 WHERE grp = $1 AND epoch = $2"
}
