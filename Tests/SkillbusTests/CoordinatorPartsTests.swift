import Testing

@testable import Skillbus

/// The parts the coordinator's state is made of, each alone: the worker table and the round table keep their
/// invariants through their operations (the request table has RequestTableTests).
@Suite("Coordinator parts")
struct CoordinatorPartsTests {
    let alpha: PeerID = [0xA1]
    let beta: PeerID = [0xB1]

    func worker(_ peer: PeerID, _ name: String, skills: [String], capacity: Int = 2) -> CoordinatorState.Worker {
        RequestTableTests.worker(peer, name, skills: skills, capacity: capacity)
    }

    func request(_ id: String, skill: String = "echo", accepted: UInt64 = 0, deadline: UInt64 = 100) -> CoordinatorState.Request {
        CoordinatorState.Request(
            origin: .client([0xC1], requestID: Array(id.utf8)), requestID: Array(id.utf8), roundID: [], sessionID: [],
            skill: skill, parameters: Array("{}".utf8), accepted: accepted, deadline: deadline)
    }

    @Test("the worker table keeps providers, names and peers in step through insert, skill changes and removal")
    func workerTable() {
        var table = WorkerTable()
        table.insert(worker(alpha, "alpha", skills: ["echo", "sleep"]))
        table.insert(worker(beta, "beta", skills: ["echo"]))
        #expect(table.providers(of: "echo") == [alpha, beta])
        #expect(table.offeredSkills == ["echo", "sleep"])
        #expect(table.peer(named: "beta") == beta)
        let withdrawn = table.setSkills(
            of: alpha,
            to: ["math": SkillDescriptor(identifier: "math", displayName: "", description: "", parameters: .init([]))])
        #expect(Set(withdrawn) == ["echo", "sleep"])
        #expect(table.providers(of: "echo") == [beta] && !table.offers("sleep") && table.providers(of: "math") == [alpha])
        #expect(table.remove(beta)?.name == "beta")
        #expect(table.peer(named: "beta") == nil && !table.offers("echo") && table.offeredSkills == ["math"])
        #expect(table.remove(beta) == nil && table.count == 1)
    }

    @Test("least loaded provider first, only with a free slot; ties rotate")
    func pickProvider() {
        var table = WorkerTable()
        table.insert(worker(alpha, "alpha", skills: ["echo"], capacity: 1))
        table.insert(worker(beta, "beta", skills: ["echo"], capacity: 1))
        let first = table.pickProvider([alpha, beta])
        let second = table.pickProvider([alpha, beta])
        #expect(first != nil && second != nil && first != second)
        table.update(alpha) { $0.inFlight = 1 }
        #expect(table.pickProvider([alpha, beta]) == beta)
        table.update(beta) { $0.inFlight = 1 }
        #expect(table.pickProvider([alpha, beta]) == nil)
    }

    @Test("the descriptor index follows the registry's attempt timeouts and cache lifetimes, skill by skill")
    func descriptorIndex() {
        func descriptor(_ identifier: String, attemptMs: Int? = nil, cacheMs: Int? = nil) -> SkillDescriptor {
            SkillDescriptor(
                identifier: identifier, displayName: identifier, description: "", parameters: ParameterSchema([]),
                retry: attemptMs.map { RetryPolicy(attemptTimeoutMs: $0) }, pure: cacheMs != nil, cacheMs: cacheMs)
        }
        var registry = Registry()
        _ = registry.set(
            "alpha", to: Registry.Agent(name: "alpha", capacity: 1, skills: [descriptor("slow", attemptMs: 50)]))
        _ = registry.set(
            "beta", to: Registry.Agent(name: "beta", capacity: 1, skills: [descriptor("pure", cacheMs: 1000)]))
        var index = DescriptorIndex()
        #expect(!index.hasCacheLifetimes && index.attemptTimeoutMs(of: "slow") == nil)
        index.refresh(["slow", "pure", "echo"], from: registry)
        #expect(index.attemptTimeoutMs(of: "slow") == 50 && index.attemptTimeoutMs(of: "pure") == nil)
        #expect(index.hasCacheLifetimes && index.cacheLifetimeMs(of: "pure") == 1000)
        #expect(index.cacheLifetimeMs(of: "echo") == nil)
        // The skill leaves the registry: its entries go at the next refresh, but a departing worker's still count.
        _ = registry.set("alpha", to: nil)
        index.refresh(["slow"], from: registry)
        #expect(index.attemptTimeoutMs(of: "slow") == nil && index.descriptor(of: "slow", in: registry) == nil)
        index.beginDeparture(["slow": descriptor("slow", attemptMs: 50)])
        #expect(index.descriptor(of: "slow", in: registry)?.retry?.attemptTimeoutMs == 50)
        index.endDeparture()
        #expect(index.descriptor(of: "slow", in: registry) == nil && index.descriptor(of: "pure", in: registry) != nil)
    }

    @Test("the workers are due the bus's heartbeat once per interval")
    func heartbeatSchedule() {
        var table = WorkerTable()
        let first = table.heartbeatDue(now: 1000, interval: 1000)
        let tooSoon = table.heartbeatDue(now: 1999, interval: 1000)
        let next = table.heartbeatDue(now: 2000, interval: 1000)
        #expect(first && !tooSoon && next)
    }

    @Test("the retry order's jitter is a number from 0 to 1, the same from the same seed")
    func retryJitter() {
        var one = RetryQueue(jitterSeed: 42)
        var other = RetryQueue(jitterSeed: 42)
        let numbers = (0..<100).map { _ in one.nextJitter() }
        #expect(numbers.allSatisfy { (0..<1).contains($0) } && Set(numbers).count == 100)
        #expect(numbers == (0..<100).map { _ in other.nextJitter() })
    }

    @Test("the round table counts running rounds and forgets finished ones by age and by number")
    func roundTable() {
        var table = RoundTable()
        func run(_ id: String) -> RoundRun {
            RoundRun(
                id: Array(id.utf8), session: [], spec: .invoke(skill: "echo", parameters: [:]), body: [], accepted: 0,
                deadline: 100, clients: [], invocations: [])
        }
        for id in ["a", "b", "c"] { table.start(run(id), key: ByteKey(Array(id.utf8))) }
        #expect(table.runningCount == 3)
        let joined = table.join(ByteKey(Array("a".utf8)), client: [1], requestID: [2])
        #expect(joined)
        table.finish(ByteKey(Array("a".utf8)), document: [1], keep: true, now: 10)
        table.finish(ByteKey(Array("b".utf8)), document: [2], keep: true, now: 20)
        table.start(run("d"), key: ByteKey(Array("d".utf8)))
        table.finish(ByteKey(Array("d".utf8)), document: [4], keep: false, now: 20)
        #expect(table.runningCount == 1 && table.finishedCount == 2)
        // A finished round is remembered by its body and document only; one not kept is not remembered at all.
        #expect(table.finishedRound(ByteKey(Array("a".utf8)))?.document == [1])
        #expect(table[ByteKey(Array("a".utf8))] == nil && table.holds(ByteKey(Array("a".utf8))))
        #expect(!table.holds(ByteKey(Array("d".utf8))))
        // A finished round takes no more changes and no more clients.
        let joinedLate = table.join(ByteKey(Array("a".utf8)), client: [1], requestID: [3])
        #expect(!joinedLate)
        let changed: Void? = table.update(ByteKey(Array("a".utf8))) { $0.stopped = true }
        #expect(changed == nil)
        table.evict(now: 15, retentionNanos: 5, limit: 10)
        #expect(!table.holds(ByteKey(Array("a".utf8))) && table.finishedRound(ByteKey(Array("b".utf8))) != nil)
        table.evict(now: 16, retentionNanos: 1000, limit: 0)
        #expect(!table.holds(ByteKey(Array("b".utf8))) && table.isRunning(ByteKey(Array("c".utf8))))
    }
}
