/// A complete copy of the registry as the bus sent it in answer to SNAPSHOT.
public struct RegistrySnapshot: Sendable, Equatable {
    public var epoch: String
    /// The sequence number of the last update the snapshot includes.
    public var sequence: UInt64
    public var registry: Registry

    public init(epoch: String, sequence: UInt64, registry: Registry) {
        self.epoch = epoch
        self.sequence = sequence
        self.registry = registry
    }
}

/// The Clone pattern's client side as a plain value: what to do with each snapshot, update and heartbeat.
/// No sockets and no clocks, so every rule is unit-tested. `RegistryReplica` drives it.
///
/// Subscribe first, then ask for a snapshot; updates that arrive meanwhile wait in a queue. The snapshot
/// replaces everything; queued updates newer than it are applied in order; older ones are dropped. Any gap
/// in the sequence, any update or heartbeat from another epoch (a restarted coordinator), or a heartbeat
/// that names a later sequence means the copy is incomplete: take a new snapshot.
public struct ReplicaSync: Sendable {
    public enum Outcome: Sendable, Equatable {
        /// The registry changed.
        case applied
        /// Nothing to do (an old or duplicate message, or one queued until the snapshot arrives).
        case unchanged
        /// Dropped as wrong; the reason is for the log.
        case ignored(String)
        /// The copy cannot be trusted until a new snapshot is loaded; the reason is for the log.
        case needsSnapshot(String)
    }

    public private(set) var registry = Registry()
    public private(set) var epoch: String?
    public private(set) var sequence: UInt64 = 0
    /// False until the first snapshot, and again from a detected gap until the next snapshot.
    public private(set) var isSynced = false
    private var queued: [RegistryUpdate] = []
    /// Updates kept while waiting for a snapshot; beyond this the oldest go (the snapshot covers them, or
    /// the gap they leave asks for another).
    static let queueLimit = 100_000

    public init() {}

    public mutating func receive(_ update: RegistryUpdate) -> Outcome {
        guard isSynced else {
            if queued.count >= Self.queueLimit { queued.removeFirst(queued.count / 2) }
            queued.append(update)
            return .unchanged
        }
        guard update.epoch == epoch else {
            return desync(queueing: update, "update from epoch \(update.epoch), replica holds epoch \(epoch ?? "-")")
        }
        if update.sequence <= sequence {
            return .ignored("update \(update.sequence) is not newer than \(sequence)")
        }
        guard update.sequence == sequence + 1 else {
            return desync(queueing: update, "missed updates \(sequence + 1)…\(update.sequence - 1)")
        }
        registry.set(update.agent, to: update.entry)
        sequence = update.sequence
        return .applied
    }

    /// The registry heartbeat names the coordinator's current epoch and sequence.
    public mutating func heartbeat(epoch heartbeatEpoch: String, sequence heartbeatSequence: UInt64) -> Outcome {
        guard isSynced else { return .unchanged }
        guard heartbeatEpoch == epoch else {
            return desync("the coordinator restarted (epoch \(heartbeatEpoch), replica holds \(epoch ?? "-"))")
        }
        if heartbeatSequence < sequence {
            return .ignored("heartbeat sequence \(heartbeatSequence) is behind the replica's \(sequence)")
        }
        guard heartbeatSequence == sequence else {
            return desync("missed updates \(sequence + 1)…\(heartbeatSequence)")
        }
        return .unchanged
    }

    /// Loads a snapshot, then the queued updates that follow it.
    public mutating func load(_ snapshot: RegistrySnapshot) -> Outcome {
        registry = snapshot.registry
        epoch = snapshot.epoch
        sequence = snapshot.sequence
        isSynced = true
        let pending = queued.filter { $0.epoch == snapshot.epoch && $0.sequence > snapshot.sequence }
            .sorted { $0.sequence < $1.sequence }
        queued.removeAll()
        for (index, update) in pending.enumerated() where update.sequence > sequence {
            if case .needsSnapshot(let reason) = receive(update) {
                queued += pending[(index + 1)...]  // still newer than the next snapshot may be
                return .needsSnapshot(reason)
            }
        }
        return .applied
    }

    /// Marks the copy stale; with `queueing`, keeps that update for after the next snapshot.
    private mutating func desync(queueing update: RegistryUpdate? = nil, _ reason: String) -> Outcome {
        isSynced = false
        if let update { queued.append(update) }
        return .needsSnapshot(reason)
    }

    public var position: RegistryPosition {
        RegistryPosition(epoch: epoch ?? "", sequence: sequence, digest: registry.digest)
    }
}
