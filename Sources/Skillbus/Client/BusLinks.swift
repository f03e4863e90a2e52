import SkillbusZMQ
import Synchronization

/// A client's connection to the coordinators of its list (PROTOCOL §3.3): one open at a time, to the one its
/// `CoordinatorChoice` names; a move closes it and opens the next. With one endpoint it is just that connection.
final class BusLinks: Sendable {
    /// One open connection: its socket, and with keys what hears a refusal of them.
    struct Link: Sendable {
        let endpoint: String
        let socket: SocketLoop
        let refusals: RefusalWatch?
        /// With keys, each message goes folded into one frame (PROTOCOL §2.1): under CURVE every frame is a box.
        let folds: Bool

        func send(_ message: Multipart) { socket.send(folds ? Wire.folded(message) : message) }

        func stop() {
            socket.stop()
            refusals?.stop()
        }
    }

    /// Opens a connection to an endpoint, its inbound messages going to this object.
    typealias Opener = @Sendable (String, BusLinks) throws -> Link

    private struct State {
        var choice: CoordinatorChoice
        var link: Link?
        /// The last `not_leader` refusal's words, for an unanswered caller's error.
        var lastRefusal: String?
        var stopped = false
    }

    private let state: Mutex<State>
    private let open: Opener
    /// Whether anything but the plain one-coordinator path can happen: a group, or a refusal seen. Until then a
    /// message heard costs no lock.
    private let following: Atomic<Bool>
    /// Hears each move, once (a worker logs it); set before the first message goes.
    let onMove = Mutex<(@Sendable (CoordinatorChoice.Move) -> Void)?>(nil)

    init(endpoints: [String], open: @escaping Opener) {
        let choice = CoordinatorChoice(endpoints: endpoints)
        state = Mutex(State(choice: choice))
        following = Atomic(choice.isGroup)
        self.open = open
    }

    /// Installs the first connection (made by the connecting initialiser, sync or async).
    func start(_ link: Link) { state.withLock { $0.link = link } }

    /// The endpoints as given, then the leaders followed outside them.
    var endpoints: [String] { state.withLock { $0.choice.endpoints } }
    /// The endpoint talked to now.
    var endpoint: String { state.withLock { $0.choice.endpoint } }
    var lastRefusal: String? { state.withLock { $0.lastRefusal } }
    var keyRefused: Bool { state.withLock { $0.link?.refusals?.keyRefused } == true }
    /// The open connection's socket: its thread runs tasks that prefer it.
    var socket: SocketLoop? { state.withLock { $0.link?.socket } }

    func send(_ message: Multipart) { state.withLock { $0.link }?.send(message) }

    func stop() {
        let link = state.withLock { state -> Link? in
            state.stopped = true
            return state.link
        }
        link?.stop()
    }

    func stopAndWait() async {
        let link = state.withLock { state -> Link? in
            state.stopped = true
            return state.link
        }
        await link?.socket.stopAndWait()
        link?.refusals?.stop()
    }

    /// Something that is not a refusal came from `endpoint`.
    func heard(from endpoint: String) {
        guard following.load(ordering: .relaxed) else { return }
        state.withLock { $0.choice.heard(from: endpoint, now: .now) }
    }

    /// `endpoint` refused a message with `not_leader`, naming `leader` or none: moves as the choice says.
    /// Returns when the refused message may go again (to the coordinator talked to then).
    func refused(by endpoint: String, leader: GroupLeader?, words: String, pending: PendingReplies)
        -> ContinuousClock.Instant
    {
        following.store(true, ordering: .relaxed)
        let (move, at) = state.withLock { state in
            state.lastRefusal = words
            let move = state.choice.refused(by: endpoint, leader: leader?.bus, now: .now)
            return (move, state.choice.notBefore ?? .now)
        }
        if let move { perform(move, pending: pending) }
        return at
    }

    /// At each turn of the open socket's loop: sends `probe()` to a silent coordinator of a group, or moves away
    /// from one. Returns when to look again (nil: not before an event).
    func tick(pending: PendingReplies, probe: () -> Multipart) -> ContinuousClock.Instant? {
        guard following.load(ordering: .relaxed) else { return nil }
        let (tick, next) = state.withLock { state -> (CoordinatorChoice.Tick, ContinuousClock.Instant?) in
            // While a move opens the next connection its thread already turns: nothing is decided until the
            // connection is installed (which wakes it), or a probe would go to the one being left.
            guard state.choice.isGroup, !state.stopped, state.link?.endpoint == state.choice.endpoint else {
                return (.nothing, nil)
            }
            let waiting = pending.anyWaiting
            return (state.choice.tick(waiting: waiting, now: .now), state.choice.nextTick(waiting: waiting))
        }
        switch tick {
        case .nothing: break
        case .probe: send(probe())
        case .move(let move): perform(move, pending: pending)
        }
        return next
    }

    /// Opens the connection to `move.to` (outside the lock: its thread's first turn takes it) and closes the one
    /// left; what may go again is scheduled for `move.at`.
    private func perform(_ move: CoordinatorChoice.Move, pending: PendingReplies) {
        onMove.withLock { $0 }?(move)
        if move.to != move.from {
            let link: Link
            do {
                link = try open(move.to, self)
            } catch {
                // The endpoint was checked before; a socket that cannot open now leaves the old one in place, and
                // the next tick moves on.
                return
            }
            let old = state.withLock { state -> Link? in
                guard !state.stopped, state.choice.endpoint == move.to else { return link }
                defer { state.link = link }
                return state.link
            }
            old?.stop()
        }
        pending.moved(at: move.at)
        state.withLock { $0.link }?.socket.wake()
    }
}

extension ClientMessage {
    /// Whether the message may go again to another coordinator after a move that was not its own refusal
    /// (PROTOCOL §3.3): a ROUND (the round id makes it one execution, §3.5.8, §3.5.9) and the reads. A REQUEST,
    /// ASK or QUERY may have run on the coordinator left, so it does not; CANCEL and APPROVE concern that one.
    var mayGoAgain: Bool {
        switch self {
        case .round, .listSkills, .snapshot, .listAgents: return true
        case .invoke, .query, .ask, .cancel, .cancelRound, .approve: return false
        }
    }
}
