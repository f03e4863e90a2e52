import Foundation
import SkillbusZMQ
import Synchronization

/// A live copy of the coordinator's registry that any process can hold (every worker does; so does
/// `skillbus skills`). It subscribes to `registry.` on the feed first, then asks the
/// bus for a snapshot, and from then on follows the sequenced updates. `ReplicaSync` holds the rules;
/// this class feeds it from the sockets and fetches a new snapshot whenever the rules ask for one.
public final class RegistryReplica: Sendable {
    private let client: SkillbusClient
    private let feed: SocketLoop
    private let logger: Logger?
    private let shared: Shared
    let wakeup: Wakeup
    /// Fetches snapshots until `close()`, which cancels it; it holds the parts it needs, not `self`.
    private let syncTask: Task<Void, Never>

    private final class Shared: Sendable {
        let state = Mutex(State())
    }

    private struct State {
        var sync = ReplicaSync()
        var position: RegistryPosition?
        var watchers: [UInt64: AsyncStream<Registry>.Continuation] = [:]
        var nextWatcher: UInt64 = 0
        var closed = false
        var snapshotsLoaded = 0
        var updatesApplied = 0

        /// Tells every watcher about the registry as it is now.
        func notify() {
            for watcher in watchers.values { watcher.yield(sync.registry) }
        }
    }

    /// The feed socket's handlers and the parts they share with the replica, made before the socket.
    private struct Parts {
        let shared = Shared()
        let wakeup = Wakeup()
        let configure: @Sendable (ZMQSocket) throws -> Void
        let onMessage: @Sendable (Multipart) -> Void

        init(
            feedEndpoint: String, credentials: CurveCredentials?, logger: Logger?,
            dropUpdate: (@Sendable (RegistryUpdate) -> Bool)?
        ) {
            let (shared, wakeup) = (self.shared, self.wakeup)
            configure = { socket in
                // The feed of a bus with keys is CURVE too, and takes the keys the client took to the bus.
                if let credentials { try socket.useCurveClient(credentials) }
                try socket.setMaxMessageSize(Wire.subscriberHardCap)
                try socket.subscribe("registry.")
                // A group's feeds, all at once: the leader's updates come whichever coordinator leads (§7).
                for feed in Endpoint.list(feedEndpoint) { try socket.connect(feed) }
            }
            onMessage = { message in
                RegistryReplica.receive(message, shared: shared, wakeup: wakeup, logger: logger, dropUpdate: dropUpdate)
            }
        }
    }

    private init(client: SkillbusClient, feed: SocketLoop, parts: Parts, logger: Logger?, snapshotTimeout: Duration) {
        self.client = client
        self.feed = feed
        self.logger = logger
        let (shared, wakeup) = (parts.shared, parts.wakeup)
        self.shared = shared
        self.wakeup = wakeup
        syncTask = Task {
            await RegistryReplica.syncLoop(
                shared: shared, client: client, wakeup: wakeup, logger: logger, snapshotTimeout: snapshotTimeout)
        }
    }

    /// Starts following the registry. `client` is used for snapshots (it may be shared with other work);
    /// `feedEndpoint` is the coordinator's feed. `dropUpdate` lets tests lose chosen updates on purpose.
    /// The synchronous form, for synchronous callers: it blocks the calling thread until the feed socket
    /// is connected. Async code uses `connect(client:feedEndpoint:…)`.
    public convenience init(
        client: SkillbusClient, feedEndpoint: String, context: ZMQContext, logger: Logger? = nil,
        dropUpdate: (@Sendable (RegistryUpdate) -> Bool)? = nil
    ) throws {
        let parts = Parts(
            feedEndpoint: feedEndpoint, credentials: client.credentials, logger: logger, dropUpdate: dropUpdate)
        let feed = try SocketLoop(
            context: context, type: .sub, name: "skillbus-replica", configure: parts.configure,
            onMessage: parts.onMessage)
        self.init(client: client, feed: feed, parts: parts, logger: logger, snapshotTimeout: Self.snapshotTimeout)
    }

    /// Starts following the registry, as `init` does, awaiting the feed socket instead of blocking.
    public static func connect(
        client: SkillbusClient, feedEndpoint: String, context: ZMQContext, logger: Logger? = nil,
        dropUpdate: (@Sendable (RegistryUpdate) -> Bool)? = nil
    ) async throws -> RegistryReplica {
        try await connect(
            client: client, feedEndpoint: feedEndpoint, context: context, logger: logger, dropUpdate: dropUpdate,
            snapshotTimeout: snapshotTimeout)
    }

    static func connect(
        client: SkillbusClient, feedEndpoint: String, context: ZMQContext, logger: Logger? = nil,
        dropUpdate: (@Sendable (RegistryUpdate) -> Bool)? = nil, snapshotTimeout: Duration
    ) async throws -> RegistryReplica {
        let parts = Parts(
            feedEndpoint: feedEndpoint, credentials: client.credentials, logger: logger, dropUpdate: dropUpdate)
        let feed = try await SocketLoop.start(
            context: context, type: .sub, name: "skillbus-replica", configure: parts.configure,
            onMessage: parts.onMessage)
        return RegistryReplica(
            client: client, feed: feed, parts: parts, logger: logger, snapshotTimeout: snapshotTimeout)
    }

    /// How long one snapshot request may take.
    static let snapshotTimeout = Duration.seconds(3)

    deinit { close() }

    /// Stops following: ends every `changes()` stream, cancels the snapshot loop (a snapshot in flight or
    /// a back-off wait ends at once) and stops the feed socket. Returns at once, never blocks.
    public func close() {
        let watchers = shared.state.withLock { state -> [AsyncStream<Registry>.Continuation] in
            state.closed = true
            defer { state.watchers.removeAll() }
            return Array(state.watchers.values)
        }
        for watcher in watchers { watcher.finish() }
        syncTask.cancel()
        wakeup.signal()
        feed.stop()
    }

    /// Returns once the snapshot loop has ended (after `close()`, promptly).
    var finished: Void {
        get async { await syncTask.value }
    }

    /// Closes, then awaits the snapshot loop and the feed socket's thread.
    func closeAndWait() async {
        close()
        await syncTask.value
        await feed.stopAndWait()
    }

    /// The registry as this replica holds it now.
    public var registry: Registry { shared.state.withLock { $0.sync.registry } }

    /// The registry with the epoch and sequence it stands at, read together: what is made from it holds until
    /// they change (a snapshot at the same epoch and sequence has the same contents, §8).
    public var versionedRegistry: (registry: Registry, epoch: String?, sequence: UInt64) {
        shared.state.withLock { ($0.sync.registry, $0.sync.epoch, $0.sync.sequence) }
    }

    /// True once a snapshot is loaded and no gap has been seen since.
    public var isSynced: Bool { shared.state.withLock { $0.sync.isSynced } }

    /// Epoch, sequence and digest of the contents; nil before the first snapshot.
    public var position: RegistryPosition? {
        shared.state.withLock { state in
            guard state.sync.epoch != nil else { return nil }
            if state.position?.sequence != state.sync.sequence || state.position?.epoch != state.sync.epoch {
                state.position = state.sync.position
            }
            return state.position
        }
    }

    /// How many snapshots were loaded and updates applied so far.
    public var statistics: (snapshots: Int, updates: Int) {
        shared.state.withLock { ($0.snapshotsLoaded, $0.updatesApplied) }
    }

    /// The registry after every change, starting with the current one when synced.
    public func changes() -> AsyncStream<Registry> {
        let (stream, continuation) = AsyncStream.makeStream(of: Registry.self, bufferingPolicy: .bufferingNewest(1))
        let shared = self.shared
        shared.state.withLock { state in
            guard !state.closed else { return continuation.finish() }
            let key = state.nextWatcher
            state.nextWatcher += 1
            state.watchers[key] = continuation
            continuation.onTermination = { _ in shared.state.withLock { _ = $0.watchers.removeValue(forKey: key) } }
            if state.sync.isSynced { continuation.yield(state.sync.registry) }
        }
        return stream
    }

    /// Waits until the replica is synced and `condition` holds for its registry; false after `timeout`.
    public func waitUntil(
        timeout: Duration, _ condition: @escaping @Sendable (Registry) -> Bool = { _ in true }
    ) async -> Bool {
        await withTaskGroup(of: Bool.self) { group in
            group.addTask {
                for await registry in self.changes() where condition(registry) && self.isSynced { return true }
                return false
            }
            group.addTask {
                try? await Task.sleep(for: timeout)
                return false
            }
            let result = await group.next() ?? false
            group.cancelAll()
            return result
        }
    }

    /// Runs on the feed socket's thread.
    private static func receive(
        _ message: Multipart, shared: Shared, wakeup: Wakeup, logger: Logger?,
        dropUpdate: (@Sendable (RegistryUpdate) -> Bool)?
    ) {
        let event: FeedEvent
        do {
            event = try FeedEvent(message: message)
        } catch {
            // An update we cannot read leaves a hole in the sequence, which the next one reveals.
            logger?.warning("ignored an unreadable registry message: \(error)")
            return
        }
        let outcome: ReplicaSync.Outcome
        switch event {
        case .registryUpdate(let update):
            if dropUpdate?(update) == true { return }
            outcome = shared.state.withLock { state in
                let outcome = state.sync.receive(update)
                if outcome == .applied {
                    state.updatesApplied += 1
                    state.notify()
                }
                return outcome
            }
        case .registryHeartbeat(let epoch, let sequence, _):
            outcome = shared.state.withLock { state in
                // A heartbeat while unsynced means the coordinator answers again: retry a failed snapshot now.
                state.sync.isSynced ? state.sync.heartbeat(epoch: epoch, sequence: sequence) : .needsSnapshot("")
            }
        default:
            return
        }
        switch outcome {
        case .needsSnapshot(let reason):
            if !reason.isEmpty { logger?.info("registry replica needs a new snapshot: \(reason)") }
            wakeup.signal()
        case .ignored(let reason):
            logger?.warning("registry replica ignored a message: \(reason)")
        case .applied, .unchanged:
            break
        }
    }

    /// Fetches a snapshot whenever the replica is not synced; after a failure it waits 1 s, then twice as
    /// long each time up to 32 s, unless the feed shows the coordinator is back sooner.
    /// Ends when the replica is closed or the task cancelled; every wait in it ends on cancellation.
    private static func syncLoop(
        shared: Shared, client: SkillbusClient, wakeup: Wakeup, logger: Logger?, snapshotTimeout: Duration
    ) async {
        var delayMs = 1000
        while !Task.isCancelled, !shared.state.withLock({ $0.closed }) {
            guard !shared.state.withLock({ $0.sync.isSynced }) else {
                await wakeup.wait(timeout: nil)
                continue
            }
            do {
                let snapshot = try await client.snapshot(timeout: snapshotTimeout)
                let outcome = shared.state.withLock { state in
                    let outcome = state.sync.load(snapshot)
                    state.snapshotsLoaded += 1
                    state.notify()
                    return outcome
                }
                delayMs = 1000
                if case .needsSnapshot(let reason) = outcome {
                    logger?.info("registry replica needs another snapshot: \(reason)")
                } else {
                    logger?.debug("registry replica loaded snapshot \(snapshot.epoch)/\(snapshot.sequence)")
                }
            } catch {
                if error.code == .cancelled { break }
                logger?.debug("registry snapshot failed: \(error); retrying in \(delayMs) ms")
                await wakeup.wait(timeout: .milliseconds(delayMs))
                delayMs = min(delayMs * 2, 32_000)
            }
        }
    }
}
