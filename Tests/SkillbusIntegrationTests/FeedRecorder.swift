import Foundation
import Skillbus
import SkillbusZMQ
import Synchronization

/// Every feed event of some topics as it arrives, stamped with the test's own clock when it came, so that a
/// test can wait for one with a deadline and measure how long after something it arrived.
final class FeedRecorder: Sendable {
    struct Event: Sendable {
        let topic: String
        let body: JSONValue
        let at: ContinuousClock.Instant

        subscript(key: String) -> JSONValue? { body[key] }
    }

    private struct State {
        var events: [Event] = []
        var waiters: [(id: Int, continuation: CheckedContinuation<Void, Never>)] = []
        var nextWaiter = 0
    }

    private let subscriber: FeedSubscriber
    private let state = Mutex(State())
    private let reader = Mutex<Task<Void, Never>?>(nil)

    private init(subscriber: FeedSubscriber) { self.subscriber = subscriber }

    /// Subscribes to `topics` and returns once the subscription is in place (a registry heartbeat came).
    static func start(_ cluster: TestCluster, topics: [String]) async throws -> FeedRecorder {
        try await start(feed: cluster.feed, topics: topics)
    }

    /// Returns once a registry heartbeat came, so the subscription is known to be in place; with `silent` (the
    /// feed of a group's standby, which publishes nothing) at once.
    static func start(feed: String, topics: [String], silent: Bool = false) async throws -> FeedRecorder {
        let subscriber = try await FeedSubscriber.connect(
            endpoint: feed, topics: topics + ["registry.heartbeat"], context: try ZMQContext())
        let recorder = FeedRecorder(subscriber: subscriber)
        recorder.reader.withLock {
            $0 = Task {
                for await (topic, event) in subscriber.events { recorder.append(Event(topic: topic, body: event, at: .now)) }
            }
        }
        if silent { return recorder }
        var cursor = 0
        _ = try await recorder.first(after: &cursor, within: .seconds(10)) { $0.topic == "registry.heartbeat" }
        return recorder
    }

    var events: [Event] { state.withLock { $0.events } }

    private func append(_ event: Event) {
        let waiters = state.withLock { state in
            state.events.append(event)
            defer { state.waiters = [] }
            return state.waiters.map(\.continuation)
        }
        for waiter in waiters { waiter.resume() }
    }

    /// The first event from `cursor` on that `matches`, within `limit`; `cursor` moves past it.
    func first(
        after cursor: inout Int, within limit: Duration, where matches: @escaping @Sendable (Event) -> Bool
    ) async throws -> Event {
        let deadline = ContinuousClock.now + limit
        while true {
            let events = self.events
            if let index = events[min(cursor, events.count)...].firstIndex(where: matches) {
                cursor = index + 1
                return events[index]
            }
            cursor = events.count
            guard ContinuousClock.now < deadline else { throw TimedOut(what: "a feed event") }
            await nextEvent(after: events.count, until: deadline)
        }
    }

    /// Returns when there are more than `count` events, or at `deadline`.
    private func nextEvent(after count: Int, until deadline: ContinuousClock.Instant) async {
        let id = state.withLock { state -> Int in
            state.nextWaiter += 1
            return state.nextWaiter
        }
        await withTaskGroup(of: Void.self) { group in
            group.addTask {
                await withCheckedContinuation { continuation in
                    let ready = self.state.withLock { state -> Bool in
                        if state.events.count > count || ContinuousClock.now >= deadline { return true }
                        state.waiters.append((id, continuation))
                        return false
                    }
                    if ready { continuation.resume() }
                }
            }
            group.addTask {
                try? await Task.sleep(until: deadline)
                let waiter = self.state.withLock { state in
                    state.waiters.firstIndex { $0.id == id }.map { state.waiters.remove(at: $0).continuation }
                }
                waiter?.resume()
            }
            await group.next()
            group.cancelAll()
        }
    }

    func close() {
        subscriber.close()
        reader.withLock { $0?.cancel() }
    }
}
