import Testing

@testable import Skillbus

/// The request table alone, with no sockets and no coordinator: each accepted request is one entry whose phase
/// its operations move, the queues and lookups are indices into it, and the worker slots follow its running
/// entries.
@Suite("Request table")
struct RequestTableTests {
    static let alpha: PeerID = [0xA1]
    static let beta: PeerID = [0xB1]
    static let client: PeerID = [0xC1]

    static func worker(_ peer: PeerID, _ name: String, skills: [String], capacity: Int = 2) -> CoordinatorState.Worker {
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

    static func request(
        _ id: String, skill: String = "echo", accepted: UInt64 = 0, deadline: UInt64 = 100, round: String = "",
        shared: SingleFlight.ExecutionID? = nil
    ) -> CoordinatorState.Request {
        var request = CoordinatorState.Request(
            origin: .client(client, requestID: Array(id.utf8)), requestID: Array(id.utf8), roundID: Array(round.utf8),
            sessionID: [], skill: skill, parameters: Array("{}".utf8), accepted: accepted, deadline: deadline)
        request.client = client
        request.shared = shared
        return request
    }

    static func origin(_ id: String) -> Waiter { .client(client, requestID: Array(id.utf8)) }

    func workers(capacity: Int = 2) -> WorkerTable {
        var table = WorkerTable()
        table.insert(Self.worker(Self.alpha, "alpha", skills: ["echo", "sleep"], capacity: capacity))
        return table
    }

    @Test("running entries hold their worker's slots: a start takes one, finish and abandonment give it back")
    func runningEntries() {
        var table = workers()
        var requests = RequestTable()
        let first = requests.startRunning(Self.request("a", deadline: 10), on: Self.alpha, workers: &table)
        let second = requests.startRunning(Self.request("b", deadline: 10), on: Self.alpha, workers: &table)
        #expect(first != second && table[Self.alpha]?.inFlight == 2 && requests.runningCount == 2)
        // Only the worker it was sent to can end it.
        #expect(requests.finish(first, from: Self.beta, workers: &table) == nil)
        #expect(requests.finish(first, from: Self.alpha, workers: &table)?.request.requestID == Array("a".utf8))
        #expect(table[Self.alpha]?.inFlight == 1)
        #expect(requests.finish(first, from: Self.alpha, workers: &table) == nil)
        // Ids it never gave find nothing, however they are spelled.
        for stranger in ["", "i", "i0", "i02", "x2", "i2x", "i-2", "i99999999999999999999", second + "0"] {
            #expect(requests.finish(stranger, from: Self.alpha, workers: &table) == nil)
        }
        #expect(RequestTable.number(of: second, prefix: "i").map(RequestTable.invocationID) == second)
        // Answered at its deadline, it is no longer found by its origin, and keeps the slot until the grace passed.
        #expect(requests.key(origin: Self.origin("b")) != nil)
        #expect(requests.answerRunning(where: { $0.deadline <= 10 }).map(\.invocationID) == [second])
        #expect(requests.key(origin: Self.origin("b")) == nil && requests.running(second)?.answered == true)
        #expect(requests.answerRunning(where: { _ in true }).isEmpty)
        #expect(requests.abandon(now: 14, grace: 5, workers: &table).isEmpty && table[Self.alpha]?.inFlight == 1)
        #expect(
            requests.abandon(now: 15, grace: 5, workers: &table) == [Self.alpha] && table[Self.alpha]?.inFlight == 0)
        #expect(requests.runningCount == 0 && requests.count == 0)
    }

    @Test("running entries: slots are reused and ids stay unique through many starts and ends")
    func runningSlotsReused() {
        var table = workers(capacity: 10_000)
        var requests = RequestTable()
        var live: [String: String] = [:]  // invocation id → request id
        for round in 0..<3 {
            for index in 0..<700 {
                let requestID = "\(round)-\(index)"
                let id = requests.startRunning(Self.request(requestID, deadline: 10), on: Self.alpha, workers: &table)
                #expect(live.updateValue(requestID, forKey: id) == nil)
            }
            let ending = live.sorted(by: { $0.key < $1.key }).enumerated().filter { $0.offset % 3 != 0 }.map(\.element)
            for (id, requestID) in ending {
                #expect(requests.finish(id, from: Self.alpha, workers: &table)?.request.requestText == requestID)
                live[id] = nil
            }
            #expect(requests.runningCount == live.count && table[Self.alpha]?.inFlight == live.count)
        }
        for (id, requestID) in live {
            #expect(requests.running(id)?.request.requestText == requestID)
            #expect(
                requests.key(origin: Self.origin(requestID)).flatMap { requests.running(at: $0)?.invocationID } == id)
        }
        for id in live.keys { #expect(requests.finish(id, from: Self.alpha, workers: &table) != nil) }
        #expect(requests.runningCount == 0 && table[Self.alpha]?.inFlight == 0 && requests.count == 0)
    }

    @Test("queued entries: agent-bound ones first, then the oldest for any of the worker's skills; one count")
    func queuedEntries() {
        var table = workers(capacity: 4)
        var requests = RequestTable()
        requests.queue(Self.request("late-echo", accepted: 5))
        requests.queue(Self.request("early-sleep", skill: "sleep", accepted: 1))
        var bound = Self.request("bound", accepted: 9)
        bound.target = Self.alpha
        requests.queue(bound)
        requests.queue(Self.request("other", skill: "math", accepted: 0))
        #expect(requests.queuedCount == 4 && requests.waiting.count(of: Self.client) == 4)
        var order: [String] = []
        while let worker = table[Self.alpha],
            let key = requests.nextQueued(for: worker, now: 10, promotionNanos: 0, ready: { _ in true })
        {
            let started = requests.startRunning(key, on: Self.alpha, now: 10, attemptDeadline: 0, workers: &table)
            #expect(started.request.attemptStarted == 10 && requests.running(started.invocationID) != nil)
            order.append(started.request.requestText)
        }
        #expect(order == ["bound", "early-sleep", "late-echo"])
        #expect(requests.queuedCount == 1 && requests.runningCount == 3 && table[Self.alpha]?.inFlight == 3)
        #expect(requests.waiting.count(of: Self.client) == 1 && requests.waiting.isWaiting(skill: "math"))
        #expect(requests.removeExpiredQueued(now: 99, targeted: false).isEmpty)
        let expired = requests.removeExpiredQueued(now: 100, targeted: false)
        #expect(expired.map(\.request.skill) == ["math"] && requests.queuedCount == 0)
        var stray = Self.request("x")
        stray.target = Self.beta
        requests.queue(stray)
        #expect(requests.removeExpiredQueued(now: 100, targeted: true).map(\.target) == [Self.beta])
        #expect(requests.queuedCount == 0 && requests.waiting.count(of: Self.client) == 0 && requests.count == 3)
    }

    @Test("a queued entry that `ready` holds back waits; the next one in its lane goes")
    func readyHoldsBack() {
        let table = workers()
        var requests = RequestTable()
        requests.queue(Self.request("held", accepted: 1))
        requests.queue(Self.request("free", accepted: 2))
        let worker = table[Self.alpha]!
        let key = requests.nextQueued(for: worker, now: 5, promotionNanos: 0) { $0.requestText != "held" }
        #expect(key.map { requests[$0].request.requestText } == "free")
        #expect(requests.nextQueued(for: worker, now: 5, promotionNanos: 0) { _ in false } == nil)
    }

    @Test("confirming entries: found by id and origin, approved only by the client asked, expired by deadline")
    func confirmingEntries() {
        var requests = RequestTable()
        let first = requests.confirm(Self.request("a"), asking: Self.client, deadline: 50)
        let second = requests.confirm(Self.request("b"), asking: Self.client, deadline: 20)
        #expect(first == "c1" && second == "c2" && requests.confirmingCount == 2)
        let key = requests.key(origin: Self.origin("a"))
        #expect(key.map { requests[$0].phase } == .confirming(id: 1, client: Self.client, deadline: 50))
        #expect(requests.approve(first, by: Self.beta) == nil && requests.approve("c9", by: Self.client) == nil)
        #expect(requests.approve(first, by: Self.client)?.requestText == "a")
        #expect(requests.approve(first, by: Self.client) == nil && requests.key(origin: Self.origin("a")) == nil)
        #expect(requests.removeExpiredConfirmations(now: 19).isEmpty)
        #expect(requests.removeExpiredConfirmations(now: 20).map(\.confirmationID) == [second])
        #expect(requests.confirmingCount == 0 && requests.count == 0)
    }

    @Test("entries backing off leave soonest first when due; one that leaves early leaves the order too")
    func backingOffEntries() {
        var requests = RequestTable()
        requests.backOff(Self.request("late"), until: 30)
        requests.backOff(Self.request("early"), until: 10)
        requests.backOff(Self.request("gone"), until: 20)
        requests.backOff(Self.request("tie"), until: 10)
        #expect(requests.nextDue == 10 && requests.backingOffCount == 4)
        let gone = requests.removeUnstarted { $0.request.requestText == "gone" }
        #expect(gone.map(\.phase) == [.backingOff(until: 20)] && requests.backingOffCount == 3)
        #expect(requests.removeDue(now: 9).isEmpty)
        #expect(requests.removeDue(now: 25).map(\.requestText) == ["early", "tie"])
        #expect(requests.nextDue == 30 && requests.key(origin: Self.origin("late")) != nil)
        #expect(requests.removeDue(now: 30).map(\.requestText) == ["late"] && requests.nextDue == nil)
        #expect(requests.count == 0)
    }

    @Test("one lookup by execution finds the entry that runs it, in whatever phase, until it is answered")
    func executionLookup() throws {
        var table = workers()
        var requests = RequestTable()
        let execution = SingleFlight.ExecutionID(slot: 3, execution: 1)
        let other = SingleFlight.ExecutionID(slot: 3, execution: 2)
        requests.queue(Self.request("shared", round: "R", shared: execution))
        #expect(requests.key(execution: other) == nil)
        let key = try #require(requests.key(execution: execution))
        #expect(requests[key].phase == .queued && requests.key(origin: Self.origin("shared")) == key)
        let started = requests.startRunning(key, on: Self.alpha, now: 1, attemptDeadline: 0, workers: &table)
        #expect(
            requests.key(execution: execution) == key && requests.running(at: key)?.invocationID == started.invocationID
        )
        #expect(requests.answer(key)?.answered == true && requests.answer(key) == nil)
        #expect(requests.key(execution: execution) == nil && requests.key(origin: Self.origin("shared")) == nil)
        #expect(requests.finish(started.invocationID, from: Self.alpha, workers: &table)?.answered == true)
        #expect(table[Self.alpha]?.inFlight == 0 && requests.count == 0)
    }

    @Test("a client that reuses a request id: each entry is found until it leaves, the oldest first")
    func repeatedOrigin() {
        var table = workers()
        var requests = RequestTable()
        let first = requests.startRunning(Self.request("same"), on: Self.alpha, workers: &table)
        requests.queue(Self.request("same"))
        let key = requests.key(origin: Self.origin("same"))
        #expect(key.flatMap { requests.running(at: $0)?.invocationID } == first)
        _ = requests.finish(first, from: Self.alpha, workers: &table)
        #expect(requests.key(origin: Self.origin("same")).map { requests[$0].phase } == .queued)
    }

    @Test("a worker that leaves takes its running entries, which hold no slot any more")
    func workerLeaves() {
        var table = workers()
        table.insert(Self.worker(Self.beta, "beta", skills: ["echo"]))
        var requests = RequestTable()
        _ = requests.startRunning(Self.request("a"), on: Self.alpha, workers: &table)
        let onBeta = requests.startRunning(Self.request("b"), on: Self.beta, workers: &table)
        _ = table.remove(Self.alpha)
        #expect(requests.removeRunning(on: Self.alpha).map(\.request.requestText) == ["a"])
        #expect(requests.runningCount == 1 && requests.running(onBeta) != nil && table[Self.beta]?.inFlight == 1)
    }

    @Test("a CANCEL is watched until its worker reports; one still running after the grace is handed out once")
    func cancelWatch() throws {
        var table = workers()
        var requests = RequestTable()
        let ignored = requests.startRunning(Self.request("a"), on: Self.alpha, workers: &table)
        let reported = requests.startRunning(Self.request("b"), on: Self.alpha, workers: &table)
        for id in [ignored, reported] {
            let key = try #require(requests.key(invocation: id))
            let running = requests.answer(key)
            requests.watchCancel(try #require(running), at: 10)
        }
        _ = requests.finish(reported, from: Self.alpha, workers: &table)
        #expect(requests.removeIgnoredCancels(now: 14, grace: 5).isEmpty)
        let late = requests.removeIgnoredCancels(now: 15, grace: 5)
        #expect(late.map(\.running.invocationID) == [ignored] && late.map(\.sent) == [10])
        #expect(requests.removeIgnoredCancels(now: 99, grace: 5).isEmpty)
    }

    @Test("waiters: a joined client until it is answered; a withdrawn one until its outcome passes it by")
    func waiters() {
        var waiters = Waiters()
        let execution = SingleFlight.ExecutionID(slot: 0, execution: 0)
        #expect(waiters.isEmpty && waiters.joined(Self.origin("j")) == nil && !waiters.passBy(Self.origin("j")))
        waiters.join(Self.origin("j"), execution, round: Array("R".utf8))
        waiters.join(Self.origin("k"), execution, round: Array("S".utf8))
        #expect(waiters.joined(Self.origin("j"))?.execution == execution)
        #expect(waiters.joined(round: Array("R".utf8)) == [Self.origin("j")])
        waiters.withdraw(Self.origin("j"))
        #expect(waiters.hasWithdrawn(Self.origin("j")) && !waiters.hasWithdrawn(Self.origin("k")))
        // Answered when it withdrew: the outcome passes it by, once.
        waiters.answered(Self.origin("j"))
        #expect(waiters.passBy(Self.origin("j")) && !waiters.passBy(Self.origin("j")))
        waiters.withdraw(Self.origin("k"))
        waiters.answered(Self.origin("k"))
        waiters.forget(Self.origin("k"))
        #expect(waiters.isEmpty)
    }

    @Test("through random operations a worker's inFlight equals its running entries and every count its phase's")
    func invariantsHold() {
        var table = workers(capacity: 3)
        var requests = RequestTable()
        var generator = SystemRandomNumberGenerator()
        var next = 0
        for step in 0..<2000 {
            let now = UInt64(step)
            switch Int.random(in: 0..<7, using: &generator) {
            case 0:
                next += 1
                if table[Self.alpha]!.hasFreeSlot {
                    _ = requests.startRunning(
                        Self.request("r\(next)", deadline: now + 40), on: Self.alpha, workers: &table)
                } else {
                    requests.queue(Self.request("r\(next)", accepted: now, deadline: now + 40))
                }
            case 1:
                let running = requests.keys { if case .running = $0.phase { true } else { false } }
                if let key = running.randomElement(using: &generator), let id = requests.running(at: key)?.invocationID
                {
                    #expect(requests.finish(id, from: Self.alpha, workers: &table) != nil)
                }
            case 2:
                if let worker = table[Self.alpha], worker.hasFreeSlot,
                    let key = requests.nextQueued(for: worker, now: now, promotionNanos: 0, ready: { _ in true })
                {
                    _ = requests.startRunning(key, on: Self.alpha, now: now, attemptDeadline: 0, workers: &table)
                }
            case 3: _ = requests.answerRunning { $0.deadline <= now }
            case 4: _ = requests.abandon(now: now, grace: 5, workers: &table)
            case 5:
                next += 1
                requests.backOff(Self.request("r\(next)", deadline: now + 40), until: now + 3)
            default:
                for request in requests.removeDue(now: now) { requests.queue(request) }
                _ = requests.removeExpiredQueued(now: now, targeted: false)
            }
            var running = 0
            var queued = 0
            var backingOff = 0
            for key in requests.keys(where: { _ in true }) {
                switch requests[key].phase {
                case .running: running += 1
                case .queued: queued += 1
                case .backingOff: backingOff += 1
                case .confirming: break
                }
                if requests[key].isAwaited {
                    #expect(requests.key(origin: requests[key].request.origin) == key)
                }
            }
            #expect(table[Self.alpha]?.inFlight == running && requests.runningCount == running)
            #expect(requests.queuedCount == queued && requests.backingOffCount == backingOff)
            #expect(requests.count == running + queued + backingOff)
        }
    }

    @Test("a running entry cannot leave other than by its worker's report: that would keep its slot taken")
    func wrongTransitionStops() async {
        await #expect(processExitsWith: .failure) {
            var table = WorkerTable()
            table.insert(RequestTableTests.worker(RequestTableTests.alpha, "alpha", skills: ["echo"]))
            var requests = RequestTable()
            _ = requests.startRunning(RequestTableTests.request("a"), on: RequestTableTests.alpha, workers: &table)
            if let key = requests.key(origin: RequestTableTests.origin("a")) { _ = requests.remove(key) }
        }
    }
}
