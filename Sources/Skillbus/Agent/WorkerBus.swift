import SkillbusZMQ
import Synchronization

/// A worker's DEALER to the coordinator it is registered with, among the coordinators of its group (PROTOCOL
/// §4.4): one open at a time, replaced by one to another coordinator when the worker moves. With one endpoint it is
/// just that DEALER, as before groups.
final class WorkerBus: Sendable {
    /// Opens the DEALER to an endpoint, on a thread of its own; its messages name the endpoint they came from.
    struct Opener: Sendable {
        let now: @Sendable (String) throws -> SocketLoop
        let async: @Sendable (String) async throws -> SocketLoop
    }

    private struct State {
        var choice: CoordinatorChoice
        var socket: SocketLoop
        var stopped = false
    }

    private let state: Mutex<State>
    private let opener: Opener

    /// Opens the DEALER to the first endpoint of `endpoints` (a comma list), blocking until its thread has it.
    init(endpoints: String, opener: Opener) throws {
        let choice = CoordinatorChoice(endpoints: Endpoint.list(endpoints))
        state = Mutex(State(choice: choice, socket: try opener.now(choice.endpoint)))
        self.opener = opener
    }

    init(endpoints: String, opener: Opener) async throws {
        let choice = CoordinatorChoice(endpoints: Endpoint.list(endpoints))
        let socket = try await opener.async(choice.endpoint)
        state = Mutex(State(choice: choice, socket: socket))
        self.opener = opener
    }

    private var socket: SocketLoop { state.withLock { $0.socket } }

    /// The coordinator it talks to now.
    var endpoint: String { state.withLock { $0.choice.endpoint } }
    var isGroup: Bool { state.withLock { $0.choice.isGroup } }
    /// Runs tasks that prefer it on the open DEALER's thread (one left behind by a move runs them elsewhere).
    var executor: any TaskExecutor { socket.executor }

    func send(_ message: Multipart) { socket.send(message) }
    func wake() { socket.wake() }

    func stopAndWait() async {
        let socket = state.withLock { state in
            state.stopped = true
            return state.socket
        }
        await socket.stopAndWait()
    }

    /// Something came from `endpoint` (a refusal too, when `refusal`): resets the back-off when it is an answer.
    func heard(from endpoint: String, refusal: Bool = false) {
        state.withLock { $0.choice.heard(from: endpoint, refusal: refusal, now: .now) }
    }

    /// `endpoint` refused a message with `not_leader`: the move to make (on the calling thread, the DEALER's), if any.
    func refused(by endpoint: String, leader: GroupLeader?) -> CoordinatorChoice.Move? {
        state.withLock { $0.choice.refused(by: endpoint, leader: leader?.bus, now: .now) }
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
        install(try opener.now(move.to), for: move)
    }

    /// The same from async code.
    func performAsync(_ move: CoordinatorChoice.Move) async throws {
        guard move.to != move.from else { return }
        install(try await opener.async(move.to), for: move)
    }

    private func install(_ socket: SocketLoop, for move: CoordinatorChoice.Move) {
        let old = state.withLock { state -> SocketLoop in
            guard !state.stopped, state.choice.endpoint == move.to else { return socket }
            defer { state.socket = socket }
            return state.socket
        }
        old.stop()
    }
}
