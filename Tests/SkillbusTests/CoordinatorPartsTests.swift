import Testing

@testable import Skillbus

/// The parts the coordinator's state is made of, each alone: the worker table and the round table keep their
/// invariants through their operations (the request table has RequestTableTests).
@Suite("Coordinator parts")
struct CoordinatorPartsTests {
    let alpha: PeerID = [0xA1]
    let beta: PeerID = [0xB1]

    func worker(_ peer: PeerID, _ name: String, skills: [String], capacity: Int = 2) -> CoordinatorState.Worker {
        let descriptors = skills.map {
            SkillDescriptor(identifier: $0, displayName: $0, description: "", parameters: ParameterSchema([]))
        }
        return CoordinatorState.Worker(
            peer: peer, name: name, nameFrame: Array(name.utf8), capacity: capacity, heartbeatMs: 1000,
            skills: Dictionary(uniqueKeysWithValues: descriptors.map { ($0.identifier, $0) }), lastHeard: 0,
            registration: Registration(name: name, capacity: capacity, heartbeatMs: nil, skills: descriptors),
            offers: descriptors.map(SkillOffer.parsed),
            welcome: Welcome(heartbeatMs: 1000, accepted: skills, refused: [], feed: "", epoch: "e"))
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
