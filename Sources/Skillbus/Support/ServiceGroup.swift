import Synchronization

/// Runs services side by side until the first stop: a signal on the stream it is given, a service that
/// returns or throws by itself, or cancellation of the task running the group. Then it shuts them down in
/// reverse start order (cancels the last started, awaits it, then the one before) all within one grace
/// period. A service still running when the grace period is over is left behind, logged and reported,
/// so that a process can always exit; the services after it in the shutdown order are still cancelled,
/// but they have no time left either.
public struct ServiceGroup: Sendable {
    /// Why the group stopped.
    public enum StopReason: Sendable, Equatable {
        /// A stop signal arrived.
        case signal(Int32)
        /// The service at this index returned or threw by itself.
        case serviceFinished(index: Int)
        /// The task running the group was cancelled.
        case cancelled
    }

    public struct Outcome: Sendable, Equatable {
        public var reason: StopReason
        /// Indices of the services still running when the grace period was over.
        public var abandoned: [Int]
    }

    public let services: [any Service]
    public let gracePeriod: Duration
    public let logger: Logger?

    public init(services: [any Service], gracePeriod: Duration = .seconds(10), logger: Logger? = nil) {
        self.services = services
        self.gracePeriod = gracePeriod
        self.logger = logger
    }

    /// Runs every service until the first stop, then shuts them all down (see the type's description).
    /// Throws the first error, in start order, that a service threw other than `CancellationError`.
    @discardableResult
    public func run(until stopSignals: some AsyncSequence<Int32, Never> & Sendable) async throws -> Outcome {
        let first = OneShot<StopReason>()
        // Unstructured on purpose: the group must be able to return while a service ignores cancellation.
        // The group owns them all the same: it cancels each one and awaits it within the grace period.
        let tasks = services.enumerated().map { index, service in
            Task { () -> (any Error)? in
                defer { first.offer(.serviceFinished(index: index)) }
                do {
                    try await service.run()
                    return nil
                } catch {
                    return error
                }
            }
        }
        let watcher = Task {
            for await signal in stopSignals {
                first.offer(.signal(signal))
                return
            }
        }
        let reason = await withTaskCancellationHandler {
            await first.value()
        } onCancel: {
            first.offer(.cancelled)
        }
        watcher.cancel()

        let deadline = ContinuousClock.now + gracePeriod
        var abandoned: [Int] = []
        for index in tasks.indices.reversed() {
            tasks[index].cancel()
            let task = tasks[index]
            if await withDeadline(deadline, { _ = await task.value }) == nil {
                abandoned.insert(index, at: 0)
                logger?.warning("\(type(of: services[index])) did not stop within \(gracePeriod); leaving it behind")
            }
        }
        for (index, task) in tasks.enumerated() where !abandoned.contains(index) {
            if let error = await task.value, !(error is CancellationError) { throw error }
        }
        return Outcome(reason: reason, abandoned: abandoned)
    }
}
