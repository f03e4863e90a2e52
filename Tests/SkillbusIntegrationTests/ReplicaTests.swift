import Foundation
import SkillbusZMQ
import Testing

@testable import Skillbus

@Suite("Registry replica: close() ends the snapshot loop promptly", .timeLimit(.minutes(2)))
struct ReplicaTests {
    let context: ZMQContext

    init() throws { context = try ZMQContext() }

    @Test("closed while a long snapshot request is in flight, the loop ends at once")
    func closeDuringSnapshot() async throws {
        let client = try await SkillbusClient.connect(endpoint: ClientTests.deadEndpoint, context: context)
        defer { client.close() }
        let replica = try await RegistryReplica.connect(
            client: client, feedEndpoint: ClientTests.deadEndpoint, context: context, snapshotTimeout: .seconds(600))
        try await waitUntil("the replica to ask for a snapshot") { client.waitingCallers == 1 }
        replica.close()
        #expect(await withDeadline(.seconds(10)) { await replica.finished } != nil)
        #expect(client.waitingCallers == 0)
        #expect(replica.wakeup.liveTimers == 0)
    }

    @Test("closed during a back-off wait, the loop ends at once and its timer with it")
    func closeDuringBackOff() async throws {
        let client = try await SkillbusClient.connect(endpoint: ClientTests.deadEndpoint, context: context)
        defer { client.close() }
        // Snapshots fail fast; the loop then waits 1 s, 2 s, … 32 s before the next.
        let replica = try await RegistryReplica.connect(
            client: client, feedEndpoint: ClientTests.deadEndpoint, context: context, snapshotTimeout: .milliseconds(1))
        try await waitUntil("the replica to back off") { replica.wakeup.liveTimers == 1 }
        replica.close()
        #expect(await withDeadline(.seconds(10)) { await replica.finished } != nil)
        #expect(replica.wakeup.liveTimers == 0)
    }

    @Test("closeAndWait returns once the loop and the feed socket have ended")
    func closeAndWait() async throws {
        let client = try await SkillbusClient.connect(endpoint: ClientTests.deadEndpoint, context: context)
        defer { client.close() }
        let replica = try await RegistryReplica.connect(
            client: client, feedEndpoint: ClientTests.deadEndpoint, context: context, snapshotTimeout: .seconds(600))
        #expect(await withDeadline(.seconds(10)) { await replica.closeAndWait() } != nil)
        #expect(replica.wakeup.liveTimers == 0)
    }
}
