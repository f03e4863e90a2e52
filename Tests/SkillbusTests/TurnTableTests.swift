import Testing

@testable import Skillbus

/// Turns and what they hold, alone: a round's one lease, the claims of the turn holding it, and the marks of
/// cancelled turns' rounds.
@Suite("Turn table")
struct TurnTableTests {
    static let client: PeerID = [0xC1]
    static let alpha: PeerID = [0xA1]
    static let beta: PeerID = [0xB1]

    static func turn(_ requestID: String, round: String, on worker: PeerID = alpha, deadline: UInt64 = 100)
        -> TurnTable.Turn
    {
        TurnTable.Turn(
            client: client, requestID: requestID, worker: worker, agent: "alpha", deadline: deadline,
            round: Array(round.utf8))
    }

    static func key(_ round: String) -> ByteKey { ByteKey(Array(round.utf8)) }

    static let standing = TurnTable.Standing(agent: "alpha", message: "hi", parent: nil, depth: 0)

    @Test("a turn is found by its agent, its client's request and its round, until it ends")
    func turns() {
        var table = TurnTable()
        let first = table.start(Self.turn("ask-1", round: "R"), leasing: false, standing: Self.standing)
        let second = table.start(Self.turn("ask-2", round: "S", on: Self.beta, deadline: 50), leasing: false, standing: Self.standing)
        #expect(first != second && table.count == 2)
        #expect(table.turn(first, of: Self.alpha)?.requestID == "ask-1" && table.turn(first, of: Self.beta) == nil)
        #expect(table.turn(client: Self.client, requestID: "ask-2")?.id == second)
        #expect(table.turn(inRound: Array("R".utf8))?.id == first && table.turn(inRound: Array("T".utf8)) == nil)
        let foreign = table.answered(first, by: Self.beta)
        let own = table.answered(first, by: Self.alpha)
        #expect(foreign == nil && own != nil)
        let early = table.removeExpired(now: 49)
        let due = table.removeExpired(now: 50)
        #expect(early.isEmpty && due.map(\.id) == [second])
        #expect(table.count == 0)
    }

    @Test("a round's lease is its turn's until that turn gives it back; only the holder's claims enter")
    func leaseAndClaims() {
        var table = TurnTable()
        #expect(!table.hasLeases)
        let holder = table.start(Self.turn("ask-1", round: "R"), leasing: true, standing: Self.standing)
        #expect(table.lease(of: Self.key("R")) == TurnTable.Lease(holder: Self.alpha, turnID: holder))
        let execution = SingleFlight.ExecutionID(slot: 0, execution: 0)
        let claim = TurnTable.Claim(execution: execution, round: Array("R".utf8), accepted: 1)
        let key = TurnTable.ClaimKey(worker: Self.alpha, turnID: holder, claimID: "k1")
        table.claim(claim, as: key)
        table.claim(claim, as: TurnTable.ClaimKey(worker: Self.alpha, turnID: holder, claimID: "k2"))
        let taken = table.takeClaim(key)
        let again = table.takeClaim(key)
        #expect(taken?.execution == execution && again == nil)
        let rest = table.takeClaims { $0.turnID == holder }
        #expect(rest.map(\.key.claimID) == ["k2"])
        // Only the holder gives it back.
        let byOther = table.endLease(of: Self.key("R"), turnID: "t99")
        #expect(byOther == nil && table.hasLeases)
        let byHolder = table.endLease(of: Self.key("R"), turnID: holder)
        #expect(byHolder != nil && !table.hasLeases)
        let twice = table.endLease(of: Self.key("R"), turnID: holder)
        #expect(twice == nil)
    }

    @Test("a cancelled turn's round stays marked while the turn runs and for the grace after it ended")
    func cancelledRounds() {
        var table = TurnTable()
        let round = Array("R".utf8)
        #expect(!table.isCancelled(round: round))
        table.markCancelled(round: round)
        table.evictCancelled(now: 1_000_000_000_000)
        #expect(table.isCancelled(round: round))
        table.turnEnded(round: round, now: 10)
        table.evictCancelled(now: 9 + TurnTable.cancelledRoundGraceNanos)
        #expect(table.isCancelled(round: round))
        table.evictCancelled(now: 10 + TurnTable.cancelledRoundGraceNanos)
        #expect(!table.isCancelled(round: round))
        // A turn that was not cancelled leaves no mark when it ends.
        table.turnEnded(round: round, now: 20)
        #expect(!table.isCancelled(round: round))
    }

    @Test("a second lease on one round is refused: a round has at most one")
    func secondLease() async {
        await #expect(processExitsWith: .failure) {
            var table = TurnTable()
            _ = table.start(TurnTableTests.turn("ask-1", round: "R"), leasing: true, standing: TurnTableTests.standing)
            _ = table.start(TurnTableTests.turn("ask-2", round: "R"), leasing: true, standing: TurnTableTests.standing)
        }
    }
}
