/// Which coordinator of a group a client or worker talks to, and when it moves (PROTOCOL §3.3, §4.4): a plain
/// state machine with no sockets, so that following the leader is tested on its own. Its owner tells it what
/// happened (a refusal, something heard, a tick) and performs the `Move` it returns.
public struct CoordinatorChoice: Sendable, Equatable {
    /// The endpoints it may use: the given list, then each leader it was sent to that the list did not name.
    public private(set) var endpoints: [String]
    /// The index in `endpoints` of the one it talks to now.
    public private(set) var current = 0
    /// Moves since the current coordinator last answered anything but a refusal: they set the back-off.
    public private(set) var movesWithoutAnswer = 0
    /// When messages may go to the current coordinator (after a move, its back-off).
    public private(set) var notBefore: ContinuousClock.Instant?
    /// When anything (a refusal too) last came from the current coordinator; nil: nothing since the move.
    public private(set) var lastHeard: ContinuousClock.Instant?
    /// A probe (a cheap question) sent to the current coordinator and not answered yet.
    public private(set) var probeSent: ContinuousClock.Instant?

    /// The first back-off after a move that found no answer, doubled at each further one up to `maxBackoff`.
    public static let firstBackoff: Duration = .milliseconds(100)
    public static let maxBackoff: Duration = .seconds(2)
    /// How long a coordinator may stay silent, with something waiting for it, before it is given up
    /// (the ROUND resend interval of §3.5.9).
    public static let silence: Duration = .seconds(1)

    /// `endpoints` must not be empty (`Endpoint.listProblem` has checked it).
    public init(endpoints: [String]) {
        precondition(!endpoints.isEmpty, "a coordinator choice needs at least one endpoint")
        self.endpoints = endpoints
    }

    /// The endpoint it talks to now.
    public var endpoint: String { endpoints[current] }

    /// Whether there is any other coordinator to move to on silence (a single endpoint keeps today's behaviour:
    /// it waits for its coordinator, as before groups existed).
    public var isGroup: Bool { endpoints.count > 1 }

    public struct Move: Sendable, Equatable {
        public var from: String
        public var to: String
        /// When messages may go to `to`: now, or after the back-off.
        public var at: ContinuousClock.Instant
        public var reason: String
    }

    /// The back-off before the move that is number `moves` + 1 since the last answer: none for the first (a
    /// named leader is followed at once), then 0.1 s doubling to 2 s.
    public static func backoff(afterMoves moves: Int) -> Duration {
        guard moves > 0 else { return .zero }
        var delay = firstBackoff
        for _ in 1..<min(moves, 16) where delay < maxBackoff { delay *= 2 }
        return min(delay, maxBackoff)
    }

    /// Something came from `endpoint`: a refusal (`refusal`) or any other message, which counts as an answer.
    public mutating func heard(from endpoint: String, refusal: Bool = false, now: ContinuousClock.Instant) {
        guard endpoint == self.endpoint else { return }
        lastHeard = now
        probeSent = nil
        if !refusal { movesWithoutAnswer = 0 }
    }

    /// `endpoint` refused a message with `not_leader`, naming `leader`'s bus endpoint or none. A refusal from
    /// the current coordinator moves to the leader it names (also one not in the list), else to the next
    /// endpoint; a late refusal from one already left moves nothing. Returns the move, if any.
    public mutating func refused(
        by endpoint: String, leader: String?, now: ContinuousClock.Instant
    ) -> Move? {
        guard endpoint == self.endpoint else { return nil }
        heard(from: endpoint, refusal: true, now: now)
        if let leader, leader != endpoint {
            let index =
                endpoints.firstIndex(of: leader)
                ?? {
                    endpoints.append(leader)
                    return endpoints.count - 1
                }()
            return move(to: index, now: now, reason: "it is a standby; the leader is at \(leader)")
        }
        return move(to: (current + 1) % endpoints.count, now: now, reason: "it is a standby and knows no leader")
    }

    /// What to do at a tick of the owner's thread while `waiting` (something waits for an answer).
    public enum Tick: Sendable, Equatable {
        case nothing
        /// Ask the current coordinator something cheap: nothing came from it for `silence`.
        case probe
        case move(Move)
    }

    /// A group's client gives up a coordinator that answered nothing — not even a probe — for `silence` while
    /// something waits for it, and moves to the next endpoint. A single endpoint never moves on silence.
    public mutating func tick(waiting: Bool, now: ContinuousClock.Instant) -> Tick {
        guard isGroup, waiting else {
            probeSent = nil
            return .nothing
        }
        if let notBefore, now < notBefore { return .nothing }
        if let probeSent {
            guard now - probeSent >= Self.silence else { return .nothing }
            return .move(
                move(
                    to: (current + 1) % endpoints.count, now: now,
                    reason: "it answered nothing for \(Self.silence)"))
        }
        if let lastHeard, now - lastHeard < Self.silence { return .nothing }
        probeSent = now
        return .probe
    }

    /// When `tick` next has something to decide, while something waits; nil: not before an event.
    public func nextTick(waiting: Bool) -> ContinuousClock.Instant? {
        guard isGroup, waiting else { return nil }
        if let probeSent { return probeSent + Self.silence }
        if let notBefore, lastHeard == nil { return notBefore }
        return lastHeard.map { $0 + Self.silence } ?? notBefore
    }

    /// Leaves the current coordinator for the next endpoint (a worker whose coordinator went silent, §4.4).
    public mutating func leave(reason: String, now: ContinuousClock.Instant) -> Move {
        move(to: (current + 1) % endpoints.count, now: now, reason: reason)
    }

    private mutating func move(to index: Int, now: ContinuousClock.Instant, reason: String) -> Move {
        let from = endpoint
        let at = now + Self.backoff(afterMoves: movesWithoutAnswer)
        movesWithoutAnswer += 1
        current = index
        notBefore = at
        lastHeard = nil
        probeSent = nil
        return Move(from: from, to: endpoint, at: at, reason: reason)
    }
}
