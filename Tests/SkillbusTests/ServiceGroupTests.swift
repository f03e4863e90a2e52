import Synchronization
import Testing

@testable import Skillbus

/// What the services of a test did, in order.
final class Journal: Sendable {
    private let entries = Mutex<[String]>([])
    func note(_ entry: String) { entries.withLock { $0.append(entry) } }
    var all: [String] { entries.withLock { $0 } }
}

/// A service that runs until cancelled (then notes "stopped NAME"), or does what `body` says.
private struct Recorder: Service {
    let name: String
    let journal: Journal
    var body: (@Sendable () async throws -> Void)?

    func run() async throws {
        journal.note("started \(name)")
        if let body { return try await body() }
        do {
            try await Task.sleep(for: .seconds(3600))
        } catch {
            journal.note("stopped \(name)")
        }
    }
}

private struct Broken: Error, Equatable {}

@Suite("ServiceGroup: run until the first stop, then shut down last started first")
struct ServiceGroupTests {
    /// A stop-signal stream the test feeds instead of the process's signals.
    let signals: AsyncStream<Int32>
    let raise: AsyncStream<Int32>.Continuation

    init() { (signals, raise) = AsyncStream.makeStream(of: Int32.self) }

    /// Waits (yielding, with a deadline) until the journal holds `count` entries.
    func journal(_ journal: Journal, reaches count: Int) async -> Bool {
        await withDeadline(.seconds(10)) {
            while journal.all.count < count { await Task.yield() }
            return true
        } == true
    }

    @Test("a stop signal stops every service, the last started first")
    func signalStopsAll() async throws {
        let journal = Journal()
        let group = ServiceGroup(services: ["a", "b", "c"].map { Recorder(name: $0, journal: journal) })
        let running = Task { try await group.run(until: signals) }
        #expect(await self.journal(journal, reaches: 3))
        raise.yield(15)
        let outcome = try #require(await withDeadline(.seconds(10)) { try? await running.value })
        #expect(outcome == .init(reason: .signal(15), abandoned: []))
        #expect(journal.all.suffix(3) == ["stopped c", "stopped b", "stopped a"])
    }

    @Test("a service that returns by itself stops the others")
    func serviceFinishing() async throws {
        let journal = Journal()
        let quitter = Recorder(name: "b", journal: journal) { journal.note("b quits") }
        let group = ServiceGroup(services: [
            Recorder(name: "a", journal: journal), quitter, Recorder(name: "c", journal: journal),
        ])
        let outcome = try #require(await withDeadline(.seconds(10)) { try? await group.run(until: signals) })
        #expect(outcome == .init(reason: .serviceFinished(index: 1), abandoned: []))
        #expect(journal.all.contains("stopped a") && journal.all.contains("stopped c"))
    }

    @Test("a service's error is thrown, after the others have stopped")
    func serviceThrowing() async throws {
        let journal = Journal()
        let thrower = Recorder(name: "b", journal: journal) { throw Broken() }
        let group = ServiceGroup(services: [Recorder(name: "a", journal: journal), thrower])
        let thrown = await withDeadline(.seconds(10)) { () -> Broken? in
            do {
                try await group.run(until: signals)
                return nil
            } catch {
                return error as? Broken
            }
        }
        #expect(thrown == .some(Broken()))
        #expect(journal.all.contains("stopped a"))
    }

    @Test("cancelling the group's task shuts the services down and reports cancelled")
    func cancelled() async throws {
        let journal = Journal()
        let group = ServiceGroup(services: ["a", "b"].map { Recorder(name: $0, journal: journal) })
        let running = Task { try await group.run(until: signals) }
        #expect(await self.journal(journal, reaches: 2))
        running.cancel()
        let outcome = try #require(await withDeadline(.seconds(10)) { try? await running.value })
        #expect(outcome == .init(reason: .cancelled, abandoned: []))
        #expect(journal.all.suffix(2) == ["stopped b", "stopped a"])
    }

    @Test("a service that ignores cancellation is left behind after the grace period; the others stopped first")
    func gracePeriod() async throws {
        let journal = Journal()
        let release = OneShot<Void>()
        let stubborn = Recorder(name: "a", journal: journal) { await release.value() }
        let group = ServiceGroup(
            // Long enough that the two that do stop always make it on a loaded machine; the stubborn one
            // costs the test that long.
            services: [stubborn, Recorder(name: "b", journal: journal), Recorder(name: "c", journal: journal)],
            gracePeriod: .seconds(2))
        let running = Task { try await group.run(until: signals) }
        #expect(await self.journal(journal, reaches: 3))
        raise.yield(2)
        let outcome = try #require(await withDeadline(.seconds(10)) { try? await running.value })
        #expect(outcome == .init(reason: .signal(2), abandoned: [0]))
        #expect(journal.all.suffix(2) == ["stopped c", "stopped b"])
        release.offer(())
    }
}
