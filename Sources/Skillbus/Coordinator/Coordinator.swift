import Dispatch
import Foundation
import SkillbusZMQ
import Synchronization

/// The coordinator process: binds the ROUTER "bus" and the XPUB "feed", and runs `CoordinatorState`
/// on one thread that owns both sockets. Nothing on the hot path leaves that thread.
public final class Coordinator: Sendable {
    public let configuration: CoordinatorConfiguration
    /// The bound endpoints, with real ports when the configuration asked for `:*`.
    public let busEndpoint: String
    public let feedEndpoint: String
    /// The operator HTTP endpoint as bound (real port for port 0), when the configuration has one.
    public let httpAddress: HTTPAddress?
    private let control: Control

    final class Control: Sendable {
        let stopping = Atomic<Bool>(false)
        let wakePipe: WakePipe
        let exited = DispatchSemaphore(value: 0)
        /// Why the coordinator stopped on its own (a group's coordinator that lost the lead), if it did.
        let failure = Mutex<String?>(nil)
        init(wakePipe: WakePipe) { self.wakePipe = wakePipe }
    }

    /// The bound endpoints, as the coordinator's thread reports them.
    typealias Endpoints = (bus: String, feed: String, http: HTTPAddress?)

    private init(configuration: CoordinatorConfiguration, control: Control, endpoints: Endpoints) {
        self.configuration = configuration
        self.control = control
        busEndpoint = endpoints.bus
        feedEndpoint = endpoints.feed
        httpAddress = endpoints.http
    }

    /// Binds both sockets on the coordinator's thread and starts serving; returns once both are bound,
    /// without blocking the caller's thread (the coordinator's thread resumes it). Throws if a bind fails.
    public static func start(
        configuration: CoordinatorConfiguration, context: ZMQContext, logger: Logger
    ) async throws -> Coordinator {
        let control = Control(wakePipe: try WakePipe())
        let endpoints = try await withCheckedThrowingContinuation { started in
            launch(configuration, context, logger, control) { started.resume(with: $0) }
        }
        return Coordinator(configuration: configuration, control: control, endpoints: endpoints)
    }

    /// The synchronous form of `start`, for callers that are not async: it waits for the binds, so never
    /// call it from Swift's cooperative thread pool.
    public convenience init(configuration: CoordinatorConfiguration, context: ZMQContext, logger: Logger) throws {
        let control = Control(wakePipe: try WakePipe())
        let started = DispatchSemaphore(value: 0)
        let startup = Mutex<Result<Endpoints, any Error>>(.success(("", "", nil)))
        Self.launch(configuration, context, logger, control) { result in
            startup.withLock { $0 = result }
            started.signal()
        }
        started.wait()
        self.init(configuration: configuration, control: control, endpoints: try startup.withLock { $0 }.get())
    }

    /// Starts the coordinator's thread; `started` hears from it once, when both sockets are bound or failed.
    private static func launch(
        _ configuration: CoordinatorConfiguration, _ context: ZMQContext, _ logger: Logger, _ control: Control,
        started: @escaping @Sendable (Result<Endpoints, any Error>) -> Void
    ) {
        let thread = Thread {
            let loop: CoordinatorLoop
            do {
                loop = try CoordinatorLoop(
                    configuration: configuration, context: context, logger: logger, wakePipe: control.wakePipe)
            } catch {
                control.wakePipe.close()
                control.exited.signal()
                started(.failure(error))
                return
            }
            started(.success((loop.router.lastEndpoint, loop.feed.lastEndpoint, loop.operatorEndpoint?.address)))
            loop.run(control: control)
            loop.close()
            control.exited.signal()
        }
        thread.name = "skillbus-coordinator"
        thread.start()
    }

    /// Returns when the coordinator has stopped. Cancelling the calling task stops it.
    public func run() async {
        await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                // Wait on a GCD thread, never on the cooperative pool.
                DispatchQueue.global().async {
                    self.control.exited.wait()
                    self.control.exited.signal()
                    continuation.resume()
                }
            }
        } onCancel: {
            self.stop()
        }
    }

    /// Why the coordinator stopped by itself, nil when it was asked to (its command then exits 1: PROTOCOL §3.11).
    public var failure: String? { control.failure.withLock { $0 } }

    /// Asks the coordinator's thread to close its sockets and leave.
    public func stop() {
        guard !control.stopping.exchange(true, ordering: .acquiringAndReleasing) else { return }
        control.wakePipe.wake()
    }
}
