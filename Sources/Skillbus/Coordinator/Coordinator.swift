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
    private let control: Control

    final class Control: Sendable {
        let stopping = Atomic<Bool>(false)
        let wakePipe: WakePipe
        let exited = DispatchSemaphore(value: 0)
        init(wakePipe: WakePipe) { self.wakePipe = wakePipe }
    }

    /// Binds both sockets on the coordinator's thread and starts serving. Throws if a bind fails.
    public init(configuration: CoordinatorConfiguration, context: ZMQContext, logger: Logger) throws {
        self.configuration = configuration
        let control = Control(wakePipe: try WakePipe())
        self.control = control
        let started = DispatchSemaphore(value: 0)
        let startup = Mutex<Result<(String, String), any Error>>(.success(("", "")))
        let thread = Thread {
            let loop: CoordinatorLoop
            do {
                loop = try CoordinatorLoop(configuration: configuration, context: context, logger: logger)
                startup.withLock { $0 = .success((loop.router.lastEndpoint, loop.feed.lastEndpoint)) }
            } catch {
                startup.withLock { $0 = .failure(error) }
                started.signal()
                control.exited.signal()
                return
            }
            started.signal()
            loop.run(control: control)
            loop.close()
            control.exited.signal()
        }
        thread.name = "skillbus-coordinator"
        thread.start()
        started.wait()
        switch startup.withLock({ $0 }) {
        case .success(let (bus, feed)):
            busEndpoint = bus
            feedEndpoint = feed
        case .failure(let error):
            control.wakePipe.close()
            throw error
        }
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

    /// Asks the coordinator's thread to close its sockets and leave.
    public func stop() {
        guard !control.stopping.exchange(true, ordering: .acquiringAndReleasing) else { return }
        control.wakePipe.wake()
    }
}
