import Testing

@testable import Skillbus

/// The parts the coordinator's state is made of, each alone: the worker table, the wait queues, the
/// running invocations and the round table keep their invariants through their operations.
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

    @Test("running invocations hold their worker's slots: start takes one, end and abandonment give it back")
    func runningInvocations() {
        var table = WorkerTable()
        table.insert(worker(alpha, "alpha", skills: ["echo"]))
        var running = RunningInvocations()
        let first = running.start(request("a", deadline: 10), on: alpha, workers: &table)
        let second = running.start(request("b", deadline: 10), on: alpha, workers: &table)
        #expect(first != second && table[alpha]?.inFlight == 2 && running.count == 2)
        // Only the worker it was sent to can end it.
        #expect(running.end(first, from: beta, workers: &table) == nil)
        #expect(running.end(first, from: alpha, workers: &table)?.request.requestID == Array("a".utf8))
        #expect(table[alpha]?.inFlight == 1)
        #expect(running.end(first, from: alpha, workers: &table) == nil)
        // Ids it never gave find nothing, however they are spelled.
        for stranger in ["", "i", "i0", "i02", "x2", "i2x", "i-2", "i99999999999999999999", second + "0"] {
            #expect(running.end(stranger, from: alpha, workers: &table) == nil)
        }
        #expect(RunningInvocations.number(of: second).map(RunningInvocations.invocationID) == second)
        // Answered at its deadline, it keeps the slot until the grace has passed too.
        #expect(running.answer(where: { $0.request.deadline <= 10 }).map(\.invocationID) == [second])
        #expect(running.answer(where: { _ in true }).isEmpty)
        #expect(running.abandon(now: 14, grace: 5, workers: &table).isEmpty && table[alpha]?.inFlight == 1)
        #expect(running.abandon(now: 15, grace: 5, workers: &table) == [alpha] && table[alpha]?.inFlight == 0)
        #expect(running.count == 0)
    }

    @Test("running invocations: slots are reused and ids stay unique through many starts and ends")
    func runningInvocationsReuseSlots() {
        var table = WorkerTable()
        table.insert(worker(alpha, "alpha", skills: ["echo"]))
        var running = RunningInvocations()
        var live: [String: String] = [:]  // invocation id → request id
        for round in 0..<3 {
            for index in 0..<700 {
                let requestID = "\(round)-\(index)"
                let id = running.start(request(requestID, deadline: 10), on: alpha, workers: &table)
                #expect(live.updateValue(requestID, forKey: id) == nil)
            }
            for (id, requestID) in live.sorted(by: { $0.key < $1.key }).enumerated().filter({ $0.offset % 3 != 0 }).map(\.element) {
                #expect(running.end(id, from: alpha, workers: &table)?.request.requestText == requestID)
                live[id] = nil
            }
            #expect(running.count == live.count && table[alpha]?.inFlight == live.count)
        }
        for (id, requestID) in live { #expect(running[id]?.request.requestText == requestID) }
        for id in live.keys { #expect(running.end(id, from: alpha, workers: &table) != nil) }
        #expect(running.count == 0 && table[alpha]?.inFlight == 0)
    }

    @Test("wait queues: agent-bound requests first, then the oldest for any of the worker's skills; one count")
    func waitQueues() {
        var queues = WaitQueues()
        let alphaWorker = worker(alpha, "alpha", skills: ["echo", "sleep"])
        queues.append(request("late-echo", accepted: 5), skill: "echo")
        queues.append(request("early-sleep", accepted: 1), skill: "sleep")
        queues.append(request("bound", accepted: 9), target: alpha)
        queues.append(request("other", accepted: 0), skill: "math")
        #expect(queues.count == 4)
        let order = (0..<4).compactMap { _ in queues.next(for: alphaWorker, now: 10, promotionNanos: 0) }.map(\.requestText)
        #expect(order == ["bound", "early-sleep", "late-echo"])
        #expect(queues.count == 1)
        #expect(queues.removeExpiredBySkill(now: 99).isEmpty)
        #expect(queues.removeExpiredBySkill(now: 100).map(\.skill) == ["math"] && queues.count == 0)
        queues.append(request("x"), target: beta)
        #expect(queues.removeTargeted(where: { _ in true }).map(\.target) == [beta] && queues.count == 0)
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
