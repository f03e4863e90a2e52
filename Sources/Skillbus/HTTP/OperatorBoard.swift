import Foundation
import SkillbusZMQ
import Synchronization

/// The bus as the HTTP side sees it: a copy the coordinator's thread takes at every tick (100 ms).
public struct BusSnapshot: Sendable, Equatable {
    public struct Agent: Sendable, Equatable {
        public var name: String
        public var capacity: Int
        public var inFlight: Int
        public var state: AgentState
        public var skills: [String]
    }

    public var metrics = BusMetrics()
    /// Live agents, sorted by name.
    public var agents: [Agent] = []
    public var waiting = 0
    public var runningRounds = 0
    public var registryEpoch = ""
    public var registrySequence: UInt64 = 0
    public var registrySkills = 0
    /// The coordinator's group, when it is in one (PROTOCOL §3.11).
    public var group: GroupStatus?

    public init() {}

    /// Every skill on offer with the agents offering it, sorted by identifier and by name.
    public var providers: [(skill: String, agents: [String])] {
        var table: [String: [String]] = [:]
        for agent in agents { for skill in agent.skills { table[skill, default: []].append(agent.name) } }
        return table.keys.sorted().map { ($0, table[$0] ?? []) }
    }
}

/// Where the coordinator's thread leaves what the HTTP thread serves: the latest `BusSnapshot`, and the
/// events published since the HTTP thread last looked (it looks every 100 ms). Each hand-over is one short
/// lock and no system call; the coordinator never waits for the HTTP thread, and events beyond `eventLimit`
/// are dropped (and counted) rather than held.
final class OperatorBoard: Sendable {
    static let eventLimit = 10_000

    struct Posted: Sendable {
        var event: FeedEvent
        var time: Date
    }

    private struct Queue {
        var events: [Posted] = []
        var dropped = 0
    }

    private let latest = Mutex(BusSnapshot())
    private let queue = Mutex(Queue())
    /// Wakes the HTTP thread to stop.
    let wakePipe: WakePipe

    init() throws {
        wakePipe = try WakePipe()
    }

    /// Coordinator's thread.
    func publish(_ snapshot: BusSnapshot) {
        latest.withLock { $0 = snapshot }
    }

    /// Coordinator's thread: hands one event over, or counts it as dropped when the HTTP thread is behind.
    func post(_ event: FeedEvent) {
        let time = Date()
        queue.withLock { queue in
            guard queue.events.count < Self.eventLimit else { return queue.dropped += 1 }
            queue.events.append(Posted(event: event, time: time))
        }
    }

    /// HTTP thread.
    var snapshot: BusSnapshot { latest.withLock { $0 } }

    /// HTTP thread: the events posted since the last call, and how many were dropped so far in all.
    func takeEvents() -> (events: [Posted], dropped: Int) {
        queue.withLock { queue in
            defer { queue.events = [] }
            return (queue.events, queue.dropped)
        }
    }
}
