import Foundation
import Skillbus
import SkillbusZMQ

/// A coordinator and its echo workers, started as children on ephemeral loopback ports: what `skillbus
/// bench` measures, and the team's perf tool with options of its own.
public struct BenchCluster: Sendable {
    public let bus: String
    public let feed: String
    public let coordinator: Child
    /// The operator HTTP endpoint (`HOST:PORT`), for a coordinator started with `--http`.
    public let http: String?
    public let workers: [Child]

    /// A coordinator with `coordinatorArguments` (and `coordinatorEnvironment`) and `workers` workers named
    /// bench-0, bench-1… with `workerArguments(index)` (which name their skills, echo among them), each keeping
    /// its context in this run's folder. Nil unless every worker offers echo within 30 s.
    public static func start(
        _ supervisor: Supervisor, name: String, workers: Int, coordinatorArguments: [String] = [],
        coordinatorEnvironment: [String: String] = [:], workerArguments: (Int) -> [String],
        context: ZMQContext, credentials: CurveCredentials? = nil
    ) async -> BenchCluster? {
        let local = "tcp://127.0.0.1:*"
        let coordinator = supervisor.start(
            name: "\(name)-coordinator",
            arguments: ["coordinator", "--bus", local, "--feed", local, "--log-level", "warning"] + coordinatorArguments,
            environment: coordinatorEnvironment, quiet: true)
        guard let ready = await coordinator.readyLine(timeout: .seconds(20)), let bus = ready["bus"],
            let feed = ready["feed"]
        else { return nil }
        let children = (0..<workers).map { index in
            supervisor.start(
                name: "\(name)-worker-\(index)",
                arguments: [
                    "worker", "--name", "bench-\(index)", "--coordinator", bus, "--log-level", "warning",
                    "--data-dir", supervisor.directory + "/\(name)-agent-\(index)",
                ] + workerArguments(index), quiet: true)
        }
        let registered = await waitForProviders(
            bus: bus, skill: "echo", count: workers, context: context, credentials: credentials)
        return registered
            ? BenchCluster(bus: bus, feed: feed, coordinator: coordinator, http: ready["http"], workers: children) : nil
    }

    /// Workers first, then the coordinator, so nobody loses its coordinator mid-request.
    public func stop() async {
        for worker in workers.reversed() { await worker.stop(grace: .seconds(5)) }
        await coordinator.stop(grace: .seconds(5))
    }

    /// Asks the bus until `count` agents offer `skill` (and `agent` among them, when named), for at most 30 s.
    public static func waitForProviders(
        bus: String, skill: String, count: Int, agent: String? = nil, context: ZMQContext,
        credentials: CurveCredentials? = nil
    ) async -> Bool {
        guard let client = try? await SkillbusClient.connect(endpoint: bus, context: context, credentials: credentials)
        else { return false }
        defer { client.close() }
        let deadline = ContinuousClock.now + .seconds(30)
        while ContinuousClock.now < deadline {
            if let catalog = try? await client.skills(timeout: .seconds(2)),
                let entry = catalog.skills.first(where: { $0.descriptor.identifier == skill }),
                entry.providers.count >= count, agent.map({ name in entry.providers.contains { $0.agent == name } }) ?? true
            {
                return true
            }
            try? await Task.sleep(for: .milliseconds(50))
        }
        return false
    }
}

/// The raw baseline: the same client and worker sockets through a plain ROUTER→DEALER `zmq_proxy`, with no
/// Skillbus logic (`bench-baseline-proxy` and `bench-baseline-worker`, child processes like the cluster's).
public struct BenchBaseline: Sendable {
    /// The proxy's client endpoint.
    public let frontend: String
    /// The proxy process, whose CPU time can be read.
    public let proxy: Child

    /// The proxy and `workers` raw echo workers; nil unless the proxy printed its endpoints within 20 s.
    public static func start(_ supervisor: Supervisor, workers: Int) async -> BenchBaseline? {
        let local = "tcp://127.0.0.1:*"
        let proxy = supervisor.start(
            name: "proxy", arguments: [BaselineProxyCommand.spec.name, "--frontend", local, "--backend", local],
            quiet: true)
        guard let ready = await proxy.readyLine(timeout: .seconds(20)), let frontend = ready["frontend"],
            let backend = ready["backend"]
        else { return nil }
        for index in 0..<workers {
            _ = supervisor.start(
                name: "raw-\(index)", arguments: [BaselineWorkerCommand.spec.name, "--connect", backend], quiet: true)
        }
        return BenchBaseline(frontend: frontend, proxy: proxy)
    }
}
