import Testing

@testable import Skillbus

/// What waits to start, alone: REQUESTs and ROUNDs parked in the startup grace, behind a turn's lease, or for the
/// journal, each leaving its wait only through the part's operations.
@Suite("Parked requests")
struct ParkedRequestsTests {
    static let client: PeerID = [0xC1]
    static let other: PeerID = [0xC2]

    static func invoke(_ id: String, round: String = "") -> InvokeRequest {
        InvokeRequest(requestID: id, roundID: round, skill: "echo", timeoutMs: 1000, parameters: Array("{}".utf8))
    }

    static func round(_ id: String, client: PeerID = client, text: String = "hi") throws -> AcceptedRound {
        let body: JSONValue = ["invoke": ["skill": "echo", "params": ["text": .string(text)]]]
        let spec = try RoundSpec(json: body, stepLimit: 10)
        return AcceptedRound(
            request: RoundRequest(requestID: "q-" + id, roundID: id, body: body.serialized()), spec: spec,
            body: spec.json.serialized(), retries: nil, priority: .normal, noCache: false,
            clients: [(client, Array(("q-" + id).utf8))], arrived: 5)
    }

    static func key(_ id: String) -> ByteKey { ByteKey(Array(id.utf8)) }

    @Test("the grace: it lasts until its end; everything parked in it leaves at once, in arrival order")
    func grace() throws {
        var parked = ParkedRequests()
        #expect(!parked.inGrace(now: 0) && parked.isEmpty)
        parked.beginGrace(until: 100)
        #expect(parked.inGrace(now: 99) && !parked.inGrace(now: 100))
        parked.park(Self.invoke("a"), client: Self.client, arrived: 1, .grace)
        parked.park(try Self.round("R"), .grace)
        #expect(parked.hasGraceItems && parked.round(Self.key("R"), in: .grace)?.arrived == 5)
        #expect(parked.graceContains { if case .round = $0 { true } else { false } })
        let taken = parked.takeGrace()
        #expect(taken.count == 2 && !parked.hasGraceItems && parked.isEmpty)
        if case .invoke(let request, _, _) = taken.first { #expect(request.requestID == "a") } else { Issue.record() }
    }

    @Test("the same round sent again joins the one parked, once per client; another body is a conflict")
    func joinRound() throws {
        var parked = ParkedRequests()
        for wait in [ParkedRequests.Wait.grace, .journal] {
            #expect(parked.join(try Self.round("R"), in: wait) == nil)
            parked.park(try Self.round("R"), wait)
            #expect(parked.join(try Self.round("R", client: Self.other), in: wait) == true)
            #expect(parked.join(try Self.round("R", client: Self.other), in: wait) == true)
            #expect(parked.join(try Self.round("R", text: "other"), in: wait) == false)
            #expect(parked.round(Self.key("R"), in: wait)?.clients.map(\.client) == [Self.client, Self.other])
            let found = parked.round { $0.request.roundID == "R" }
            #expect(found?.wait == (wait == .journal ? .journal : .grace))
            parked.removeRound(Self.key("R"), from: wait)
            #expect(parked.round(Self.key("R"), in: wait) == nil)
        }
    }

    @Test("behind a lease: released with it, oldest first; expired ones leave alone")
    func lease() {
        var parked = ParkedRequests()
        parked.park(Self.invoke("a", round: "T"), client: Self.client, arrived: 1, .lease(Self.key("T")))
        parked.park(Self.invoke("b", round: "T"), client: Self.client, arrived: 2, .lease(Self.key("T")))
        parked.park(Self.invoke("c", round: "U"), client: Self.client, arrived: 3, .lease(Self.key("U")))
        let expired = parked.removeExpiredLeased { if case .invoke(_, _, 3) = $0 { true } else { false } }
        #expect(expired.count == 1)
        let released = parked.releaseLease(Self.key("T")).compactMap { item -> String? in
            if case .invoke(let request, _, _) = item { return request.requestID }
            return nil
        }
        #expect(released == ["a", "b"] && parked.releaseLease(Self.key("T")).isEmpty && parked.isEmpty)
    }

    @Test("a cancelled REQUEST leaves whichever wait it is in, with that wait")
    func removeRequests() {
        var parked = ParkedRequests()
        parked.park(Self.invoke("a", round: "T"), client: Self.client, arrived: 1, .grace)
        parked.park(Self.invoke("b", round: "T"), client: Self.client, arrived: 2, .lease(Self.key("T")))
        parked.park(Self.invoke("c", round: "T"), client: Self.other, arrived: 3, .lease(Self.key("T")))
        let gone = parked.removeRequests { $0.client == Self.client }
        #expect(gone.map(\.request.requestID) == ["a", "b"] && gone.map(\.wait) == [.grace, .lease(Self.key("T"))])
        #expect(parked.removeRequests { $0.wait.isLease }.map(\.request.requestID) == ["c"] && parked.isEmpty)
    }

    @Test("the journal: its answer starts the round waiting for it; after a cancel it is the cancelled one's")
    func journal() throws {
        var parked = ParkedRequests()
        parked.park(try Self.round("R"), .journal)
        #expect(!parked.isAcceptOutstanding(Self.key("R")))
        guard case .pending(let accepted)? = parked.journalAnswered(Self.key("R")) else {
            Issue.record("the answer was not the pending round's")
            return
        }
        #expect(accepted.request.roundID == "R" && parked.journalAnswered(Self.key("R")) == nil)
        // Cancelled while the journal held its accept, then sent again: the answer is the cancelled one's, and the
        // round sent again waits on, its accept to go now.
        parked.park(try Self.round("S"), .journal)
        parked.removeRound(Self.key("S"), from: .journal)
        parked.park(try Self.round("S", client: Self.other), .journal)
        #expect(parked.isAcceptOutstanding(Self.key("S")))
        guard case .cancelled(let resent)? = parked.journalAnswered(Self.key("S")) else {
            Issue.record("the answer was not the cancelled round's")
            return
        }
        #expect(resent?.clients.map(\.client) == [Self.other] && !parked.isAcceptOutstanding(Self.key("S")))
        #expect(parked.round(Self.key("S"), in: .journal) != nil)
    }

    @Test("a REQUEST never waits for the journal: only ROUNDs are journaled")
    func requestForTheJournal() async {
        await #expect(processExitsWith: .failure) {
            var parked = ParkedRequests()
            parked.park(ParkedRequestsTests.invoke("a"), client: ParkedRequestsTests.client, arrived: 0, .journal)
        }
    }
}
