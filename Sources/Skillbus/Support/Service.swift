/// A long-running part of a program, in one shape (the shape of swift-service-lifecycle's `Service`):
/// `run()` returns when the service has stopped, and cancelling the task that runs it means "shut down
/// gracefully": finish or abandon what is in flight, say goodbye, close sockets, then return.
///
/// `ServiceGroup` runs several side by side until a stop signal and shuts them down in reverse start
/// order within a grace period. `Coordinator` and `AgentWorker` are services:
///
/// ```swift
/// let worker = try await AgentWorker.connect(options: options, skills: skills, context: context, logger: logger)
/// try await ServiceGroup(services: [worker]).run(until: signals)
/// ```
public protocol Service: Sendable {
    /// Runs until the service stops by itself or the calling task is cancelled.
    func run() async throws
}

/// Stops (closes its sockets, its thread leaves) when the running task is cancelled.
extension Coordinator: Service {}

/// Cancels its invocations, says goodbye and closes its sockets when the running task is cancelled.
extension AgentWorker: Service {}
