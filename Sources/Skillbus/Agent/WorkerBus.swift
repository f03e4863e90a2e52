import SkillbusZMQ
import Synchronization

/// A worker's DEALER to the coordinator it is registered with, among the coordinators of its group (PROTOCOL
/// §4.4): one open at a time, replaced by one to another coordinator when the worker moves. With one endpoint it is
/// just that DEALER, as before groups.
final class WorkerBus: Sendable {
    /// Opens the DEALER to an endpoint, on a thread of its own; its messages carry the number of the DEALER they
    /// came on (`generation`), so that what a DEALER left behind still delivers is told apart without a lock.
    struct Opener: Sendable {
        let now: @Sendable (_ endpoint: String, _ generation: Int) throws -> SocketLoop
        let async: @Sendable (_ endpoint: String, _ generation: Int) async throws -> SocketLoop
    }

    private struct State {
        var choice: CoordinatorChoice
        var socket: SocketLoop
        var stopped = false
    }

    private let state: Mutex<State>
    private let opener: Opener
    /// With keys, each message goes folded into one frame (PROTOCOL §2.1): under CURVE every frame is a box.
    private let folds: Bool
    /// The first DEALER: until a move (generation 0) every send goes to it without taking the lock, so a worker
    /// that never moves pays nothing per message for groups.
    private let first: SocketLoop
    /// The number of the open DEALER: 0 for the first, one more at each move.
    private let generation = Atomic<Int>(0)
    /// Whether anything but the plain one-coordinator path can happen (a group, or a refusal seen): until then a
    /// message heard costs no lock.
    private let following: Atomic<Bool>

    /// Opens the DEALER to the first endpoint of `endpoints` (a comma list), blocking until its thread has it.
    init(endpoints: String, folds: Bool, opener: Opener) throws {
        self.folds = folds
        let choice = CoordinatorChoice(endpoints: Endpoint.list(endpoints))
        first = try opener.now(choice.endpoint, 0)
        state = Mutex(State(choice: choice, socket: first))
        following = Atomic(choice.isGroup)
        self.opener = opener
    }

    init(endpoints: String, folds: Bool, opener: Opener) async throws {
        self.folds = folds
        let choice = CoordinatorChoice(endpoints: Endpoint.list(endpoints))
        first = try await opener.async(choice.endpoint, 0)
        state = Mutex(State(choice: choice, socket: first))
        following = Atomic(choice.isGroup)
        self.opener = opener
    }

    private var socket: SocketLoop {
        generation.load(ordering: .acquiring) == 0 ? first : state.withLock { $0.socket }
    }

    /// The coordinator it talks to now.
    var endpoint: String { state.withLock { $0.choice.endpoint } }
    var isGroup: Bool { state.withLock { $0.choice.isGroup } }
    /// Runs tasks that prefer it on the open DEALER's thread (one left behind by a move runs them elsewhere).
    var executor: any TaskExecutor { socket.executor }

    func send(_ message: Multipart) { socket.send(folds ? Wire.folded(message) : message) }
    func wake() { socket.wake() }

    func stopAndWait() async {
        let socket = state.withLock { state in
            state.stopped = true
            return state.socket
        }
        await socket.stopAndWait()
    }

    /// Whether a message that came on DEALER number `generation` comes from the coordinator talked to now.
    func isCurrent(_ generation: Int) -> Bool { self.generation.load(ordering: .acquiring) == generation }

    /// Something that is not a refusal came from the coordinator talked to now: resets the back-off.
    func heard() {
        guard following.load(ordering: .relaxed) else { return }
        state.withLock { $0.choice.heard(from: $0.choice.endpoint, now: .now) }
    }

    /// The coordinator talked to now refused a message with `not_leader`: the move to make (on the calling thread,
    /// the DEALER's), if any.
    func refused(leader: GroupLeader?) -> CoordinatorChoice.Move? {
        following.store(true, ordering: .relaxed)
        return state.withLock { $0.choice.refused(by: $0.choice.endpoint, leader: leader?.bus, now: .now) }
    }

    /// The coordinator went silent: the move to the next endpoint of a group; nil with one endpoint.
    func silent(reason: String) -> CoordinatorChoice.Move? {
        state.withLock { state in
            guard state.choice.isGroup else { return nil }
            return state.choice.leave(reason: reason, now: .now)
        }
    }

    /// Opens the DEALER to `move.to` and closes the one left: synchronously, on a DEALER's thread.
    func perform(_ move: CoordinatorChoice.Move) throws {
        guard move.to != move.from else { return }
        let next = generation.load(ordering: .acquiring) + 1
        install(try opener.now(move.to, next), next, for: move)
    }

    /// The same from async code.
    func performAsync(_ move: CoordinatorChoice.Move) async throws {
        guard move.to != move.from else { return }
        let next = generation.load(ordering: .acquiring) + 1
        install(try await opener.async(move.to, next), next, for: move)
    }

    private func install(_ socket: SocketLoop, _ number: Int, for move: CoordinatorChoice.Move) {
        let old = state.withLock { state -> SocketLoop in
            guard !state.stopped, state.choice.endpoint == move.to else { return socket }
            defer {
                state.socket = socket
                generation.store(number, ordering: .releasing)
            }
            return state.socket
        }
        old.stop()
    }
}
