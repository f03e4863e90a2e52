import Dispatch
import Foundation
import SkillbusZMQ

/// The coordinator's thread: sockets, decoding, and carrying out the state machine's actions.
final class CoordinatorLoop {
    let router: any BusRouter
    let feed: ZMQSocket
    /// Keys and roles, when the coordinator has them (BusGuard.swift); nil: every peer may do anything.
    let busGuard: BusGuard?
    /// The operator HTTP endpoint (metrics, dashboard), when configured (HTTP/OperatorEndpoint.swift).
    let operatorEndpoint: OperatorEndpoint?
    let logger: Logger
    let maxMessageBytes: Int
    var state: CoordinatorState
    /// Notices a worker's connection closing (the ROUTER's socket monitor).
    let watch: ConnectionWatch
    /// The round journal, with a data directory (Journal/); its answers wait in `journalAnswers`. In a coordinator
    /// group it is opened when this coordinator takes the lead (`election`).
    var journal: RoundJournal?
    let journalAnswers = JournalMailbox()
    /// A coordinator group's election (PROTOCOL §3.11), and what its threads tell this one.
    let election: LeaderElection?
    let notices = GroupNotices()
    /// `answerAfterCommit`: the answers of rounds whose documents wait for their commit, by round id.
    let answerAfterCommit: Bool
    var heldAnswersByRound: [ByteKey: [(peer: PeerID, frames: Multipart)]] = [:]
    /// Why this coordinator stopped on its own (it lost the lead), for its exit status.
    var failure: String?
    /// The journal's backlog as last published on the feed.
    var publishedBacklog = 0
    /// What the actions of this pass of the loop gave the journal: handed over in one piece before the loop
    /// polls again (one hand-off per pass, however many rounds it accepted or ended).
    var journalEntries: [JournalEntry] = []
    /// Prefixes that feed subscribers asked for; events nobody wants are never built.
    var subscriptions = FeedSubscriptions()
    /// The events of this pass for each batch subscription (PROTOCOL §7), by its topic frame.
    var feedBatches: [(topic: [UInt8], body: [UInt8])] = []
    /// Stamps the published events.
    var feedClock = FeedClock()
    /// A batch this large goes out before the pass ends.
    static let feedBatchBytes = 256 << 10
    /// Messages and subscriptions refused for a limit (§9) since the start, and those published this tick.
    var overLimit = 0
    var overLimitPublished = 0
    var unroutable = 0
    var rejected = 0
    /// While a batch of bus messages is read: what the bus sends meanwhile, sent when the batch ends.
    var heldSends: [(peer: PeerID, frames: Multipart)]?
    /// Messages the last batch read.
    var lastBatch = 0
    var refusalsLogged = 0
    var refusalsSuppressed = 0
    static let refusalsLoggedPerTick = 10

    static let tickNanos: UInt64 = 100_000_000

    init(configuration: CoordinatorConfiguration, context: ZMQContext, logger: Logger, wakePipe: WakePipe) throws {
        self.logger = logger
        answerAfterCommit = configuration.answerAfterCommit
        self.maxMessageBytes = configuration.maxMessageBytes
        if let problem = BindCheck.problem(configuration) { throw SkillbusError(.invalidConfiguration, problem) }
        // The ZAP handler first: a CURVE socket accepts whoever comes while its context has none.
        busGuard = try configuration.security.map { try BusGuard(security: $0, context: context, logger: logger) }
        do {
            let hardCap = Wire.hardCap(forLimit: configuration.maxMessageBytes)
            if BusEngine.ownAllowed, ZMTPRouter.serves(configuration.bus) {
                let own = try ZMTPRouter(
                    bind: configuration.bus, maxFrameBytes: Int(hardCap), curve: busGuard?.busCurve)
                own.frameBatching = Wire.frameBatching
                router = own
                watch = ConnectionWatch()
            } else {
                let router = try ZMQSocket(context: context, type: .router)
                try router.setRouterMandatory(true)
                try router.setMaxMessageSize(hardCap)
                try router.setSendHighWaterMark(100_000)
                try router.setReceiveHighWaterMark(100_000)
                try busGuard?.protect(
                    router, domain: AccessPolicy.busDomain, name: "bus", context: context, monitored: true)
                watch = try ConnectionWatch(router: router, context: context, handshakes: busGuard != nil)
                try router.bind(configuration.bus)
                self.router = router
            }
            feed = try ZMQSocket(context: context, type: .xpub)
            try feed.setSendHighWaterMark(100_000)
            try feed.setMaxMessageSize(Wire.feedHardCap)
            try feed.setManualSubscriptions()
            try busGuard?.protect(feed, domain: AccessPolicy.feedDomain, name: "feed", context: context)
            try feed.bind(configuration.feed)
            operatorEndpoint = try configuration.http.map { try OperatorEndpoint(address: $0) }
        } catch {
            // The handler's thread holds a socket of the context: it must go, or ending the context hangs.
            busGuard?.close()
            throw error
        }
        do {
            let limits = RoundJournal.Limits(
                bytes: configuration.journalBytesLimit, retentionMs: configuration.roundRetentionMs,
                sessionRetentionMs: configuration.sessionRetentionMs)
            let onAnswers: @Sendable ([JournalAnswer]) -> Void = { [journalAnswers] answers in
                journalAnswers.post(answers)
                wakePipe.wake()
            }
            // A group's journal is in PostgreSQL, opened by the election when this coordinator takes the lead; a
            // data directory is then not used for it.
            if let group = configuration.ha {
                if let directory = configuration.dataDir {
                    logger.warning("the journal is in PostgreSQL (ha); the data directory \(directory) is not used for it")
                }
                let notices = notices
                var hooks = RoundJournal.Hooks()
                hooks.onFenced = { (error: SkillbusError) in
                    notices.lose(error.message)
                    wakePipe.wake()
                }
                hooks.onBacklog = { wakePipe.wake() }
                if configuration.answerAfterCommit {
                    hooks.onCommitted = { (ids: [[UInt8]]) in
                        notices.committed(ids)
                        wakePipe.wake()
                    }
                }
                journal = nil
                election = try LeaderElection(
                    settings: group, bus: router.lastEndpoint, feed: feed.lastEndpoint,
                    http: operatorEndpoint?.address, logger: logger,
                    openJournal: { [hooks] (epoch: Int) throws(SkillbusError) -> RoundJournal in
                        try RoundJournal(
                            group: group, epoch: epoch, limits: limits, logger: logger, hooks: hooks,
                            onAnswers: onAnswers)
                    }, notify: { wakePipe.wake() })
            } else {
                election = nil
                journal = try configuration.dataDir.map { directory throws(SkillbusError) in
                    try RoundJournal(directory: directory, limits: limits, logger: logger, onAnswers: onAnswers)
                }
            }
        } catch {
            router.close()
            feed.close()
            busGuard?.close()
            throw error
        }
        if let journal {
            let interrupted = journal.interruptedAtOpen.load(ordering: .relaxed)
            logger.info(
                "round journal in \(journal.location) (\(journal.storedBytes.load(ordering: .relaxed)) bytes"
                    + (interrupted > 0 ? ", \(interrupted) round(s) interrupted by the last stop)" : ")"))
        }
        if busGuard == nil && configuration.insecure {
            logger.error(
                "INSECURE: no keys, and --insecure: anyone who reaches \(configuration.bus) or \(configuration.feed) "
                    + "may register any agent name, answer any request and read the whole feed")
        }
        var settings = configuration.stateSettings
        settings.feedEndpoint = feed.lastEndpoint
        settings.wallClockAtZeroMs =
            Int64((Date().timeIntervalSince1970 * 1000).rounded(.down))
            - Int64(DispatchTime.now().uptimeNanoseconds / 1_000_000)
        state = CoordinatorState(settings: settings)
        if let election { state.group = GroupStatus(group: election.settings.group, leader: nil, leading: false) }
        if let journal { state.journalOpened(holding: journal.takeIDsAtOpen()) }
        if let sessions = journal?.takeSessionsAtOpen(), !sessions.isEmpty {
            state.restoreSessions(sessions)
            logger.info("the journal knew the agents of \(state.roster.count) session(s)")
        }
        // Until a watcher subscribes to them; the operator endpoint counts them all.
        state.publishesRequestEvents = operatorEndpoint != nil
        state.publishesRoundEvents = operatorEndpoint != nil
        state.publishesTurnEvents = operatorEndpoint != nil
    }

    func close() {
        // What the roster noted since the last tick goes into the journal's last commit (journal actions only).
        perform(state.saveRoster(now: DispatchTime.now().uptimeNanoseconds))
        submitJournalEntries()
        router.close()
        feed.close()
        watch.close()
        busGuard?.close()
        operatorEndpoint?.close()
        // A coordinator that lost the lead waits for its journal a moment at most (a commit may hang on a cut
        // network): it can write nothing more anyway (fencing), and its process ends. A leader that stops cleanly
        // closes its journal first, then gives the lead up, so a standby takes over at once and finds every commit.
        if failure == nil {
            journal?.close()
        } else if journal?.close(within: .seconds(2)) == false {
            logger.warning("the journal's thread did not stop within 2 s; leaving it")
        }
        election?.close(release: failure == nil && journal != nil)
        if unroutable > 0 || rejected > 0 {
            logger.info("stopped; \(rejected) bad message(s) refused, \(unroutable) reply(ies) to vanished peers")
        }
    }

    func run(control: Coordinator.Control) {
        logger.info(
            "bus on \(router.lastEndpoint) (\(router.engine), \(busGuard == nil ? "NULL" : "CURVE")), "
                + "feed on \(feed.lastEndpoint), registry epoch \(state.ledger.epoch)")
        var nextTick = DispatchTime.now().uptimeNanoseconds + Self.tickNanos
        let items = [
            router.pollItem, PollItem(.socket(feed)), PollItem(.fileDescriptor(control.wakePipe.readEnd)),
            watch.pollItem,
        ] + (busGuard?.pollItems ?? [])
        state.beginStartupGrace(now: DispatchTime.now().uptimeNanoseconds)
        defer {
            router.flush()
            sendFeedBatches()
        }
        while !control.stopping.load(ordering: .acquiring) {
            // What the last pass sent, to the network in one write per peer (Skillbus's own router); then what
            // it gave the journal, in one hand-off (waking the journal's thread costs a system call that answers
            // need not wait for: a round's document is committed after its answer anyway); then its feed batches.
            router.flush()
            submitJournalEntries()
            sendFeedBatches()
            var now = DispatchTime.now().uptimeNanoseconds
            // A retry's backoff ends when it ends, not at the next tick.
            let wake = state.nextTimer.map { min($0, nextTick) } ?? nextTick
            // A batch that stopped at its bound left messages read but not handled: look again at once.
            let timeoutMs = wake > now && !router.hasBufferedMessages ? Int((wake - now) / 1_000_000) + 1 : 0
            let ready: PollResult
            do {
                ready = try poll(items, timeoutMs: timeoutMs)
            } catch {
                // Nothing can be served without polling: say why the bus stops instead of vanishing.
                logger.error("polling the bus and feed sockets failed, stopping: \(error)")
                return
            }
            if ready.readable[2] {
                control.wakePipe.drain()
                if election != nil, !groupChanged() {
                    control.failure.withLock { $0 = failure }
                    return
                }
                if let deleted = journal?.takeDeletedIDs(), !deleted.isEmpty { state.journalDeleted(deleted) }
                let answers = journalAnswers.take()
                if !answers.isEmpty { perform(state.journalAnswered(answers, now: DispatchTime.now().uptimeNanoseconds)) }
                if answerAfterCommit { releaseAnswers(notices.takeCommitted()) }
            }
            if ready.readable[0] || router.hasBufferedMessages { drainBus() }
            if ready.readable[1] { drainSubscriptions() }
            if ready.readable[3] { drainConnectionEvents(now: now) }
            if ready.readable.dropFirst(4).contains(true) { busGuard?.drainMonitors() }
            now = DispatchTime.now().uptimeNanoseconds
            if let due = state.nextTimer, due <= now, now < nextTick { perform(state.fireTimers(now: now)) }
            if now >= nextTick {
                confirmLostConnections(now: now)
                router.expireHandshakes(now: .now)
                // A standby publishes nothing: a group's watchers subscribe to every feed (PROTOCOL §7), and its
                // own registry heartbeats would contradict the leader's.
                if election == nil || journal != nil { perform(state.tick(now: now)) }
                if election != nil { refreshGroup() }
                if let busGuard {
                    busGuard.handshakesFailed(router.takeHandshakeFailures())
                    perform(busGuard.tick())
                }
                operatorEndpoint?.publish(state)
                nextTick = now + Self.tickNanos
                if refusalsSuppressed > 0 {
                    logger.warning("refused \(refusalsSuppressed) more bad message(s) without logging each")
                    refusalsSuppressed = 0
                }
                refusalsLogged = 0
                overLimitPublished = 0
            }
        }
    }
}
