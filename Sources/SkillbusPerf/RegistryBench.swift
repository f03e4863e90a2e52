import CZeroMQ
import Foundation
import Skillbus
import SkillbusCommands
import SkillbusZMQ
import Synchronization

/// Agents that only register, to give the registry a size: one DEALER per agent, all driven from one
/// thread, which sends READY, waits for every WELCOME, and on `close()` sends DISCONNECT. They announce
/// the longest heartbeat interval, so the bus keeps them while the benchmark runs.
final class RegisteredOnlyAgents: Sendable {
    private let closed = Atomic<Bool>(false)
    private let stop = DispatchSemaphore(value: 0)
    private let stopped = DispatchSemaphore(value: 0)

    /// Returns once every agent is welcomed; throws if that takes more than 30 s. The wait happens on a
    /// thread of its own, never on the cooperative pool.
    static func start(
        bus: String, context: ZMQContext, agents: Int, skillsPerAgent: Int, prefix: String
    ) async throws -> RegisteredOnlyAgents {
        try await OwnThread.run {
            try RegisteredOnlyAgents(
                bus: bus, context: context, agents: agents, skillsPerAgent: skillsPerAgent, prefix: prefix)
        }
    }

    /// Blocks the calling thread until every agent is welcomed: only for `start`'s own thread.
    private init(bus: String, context: ZMQContext, agents: Int, skillsPerAgent: Int, prefix: String) throws {
        let welcomed = DispatchSemaphore(value: 0)
        let stop = self.stop
        let stopped = self.stopped
        let thread = Thread {
            defer { stopped.signal() }
            var sockets: [ZMQSocket] = []
            defer { for socket in sockets { socket.close() } }
            for agent in 0..<agents {
                guard let socket = try? ZMQSocket(context: context, type: .dealer) else { return }
                sockets.append(socket)
                let skills: [JSONValue] = (0..<skillsPerAgent).map { index in
                    [
                        "identifier": .string("\(prefix).a\(agent).s\(index)"),
                        "description": "a skill that only exists to give the registry its size",
                        "parameters": [
                            ["name": "text", "type": "string", "description": "Some text"],
                            ["name": "count", "type": "integer", "required": false, "default": 1],
                        ],
                    ]
                }
                let ready = WorkerMessage.ready([
                    "name": .string("\(prefix)-\(agent)"), "capacity": 1,
                    "heartbeatMs": .number(Double(CoordinatorState.maxHeartbeatMs)), "skills": .array(skills),
                ])
                try? socket.setLinger(ms: 500)
                try? socket.connect(bus)
                try? socket.send(ready.encoded())
            }
            var waiting = agents
            let deadline = DispatchTime.now().uptimeNanoseconds + 30_000_000_000
            while waiting > 0, DispatchTime.now().uptimeNanoseconds < deadline {
                guard let ready = try? poll(sockets.map { PollItem(.socket($0)) }, timeoutMs: 100) else { return }
                for (index, socket) in sockets.enumerated() where ready.readable[index] {
                    while let message = try? socket.receive(dontWait: true) {
                        if let fields = Wire.busMessageFields(message), fields.count > 1, fields[1] == Array("WELCOME".utf8) {
                            waiting -= 1
                        }
                    }
                }
            }
            guard waiting == 0 else { return }
            welcomed.signal()
            stop.wait()
            for socket in sockets { try? socket.send(WorkerMessage.disconnect.encoded()) }
        }
        thread.name = "bench-registered-agents"
        thread.start()
        guard welcomed.wait(timeout: .now() + 31) == .success else {
            stop.signal()
            throw SkillbusError(.timeout, "the \(agents) registry-only agents were not all welcomed within 30 s")
        }
    }

    /// Says goodbye for every agent and waits until the sockets are closed (on a thread of its own).
    func close() async {
        guard !closed.exchange(true, ordering: .relaxed) else { return }
        stop.signal()
        let stopped = self.stopped
        _ = try? await OwnThread.run { stopped.wait() }
    }
}

/// The registry figures of `skillbus-perf`.
enum RegistryBench {
    /// Milliseconds until a new replica holds a registry of at least `agents` agents, `runs` times; and, as
    /// the baseline, the milliseconds a raw DEALER takes to receive the same snapshot's frames unparsed.
    static func snapshotTimes(
        bus: String, feed: String, context: ZMQContext, agents: Int, runs: Int
    ) async throws -> (replica: [Double], raw: [Double]) {
        var replicaTimes: [Double] = []
        var rawTimes: [Double] = []
        for _ in 0..<runs {
            let start = ContinuousClock.now
            let client = try await SkillbusClient.connect(endpoint: bus, context: context, maxMessageBytes: 16 << 20)
            let replica = try await RegistryReplica.connect(client: client, feedEndpoint: feed, context: context)
            let synced = await replica.waitUntil(timeout: .seconds(30)) { $0.agents.count >= agents }
            let elapsed = milliseconds(ContinuousClock.now - start)
            replica.close()
            client.close()
            guard synced else { throw SkillbusError(.timeout, "a replica did not sync within 30 s") }
            replicaTimes.append(elapsed)
            rawTimes.append(try await OwnThread.run { try rawSnapshot(bus: bus, context: context) })
        }
        return (replicaTimes, rawTimes)
    }

    /// A DEALER that connects, asks for SNAPSHOT and reads frames until the summary, parsing no JSON: the
    /// summary is the message whose envelope starts with the header and the command SNAPSHOT.
    static func rawSnapshot(bus: String, context: ZMQContext) throws -> Double {
        let start = ContinuousClock.now
        let socket = try ZMQSocket(context: context, type: .dealer)
        defer { socket.close() }
        try socket.setOption(ZMQ_RCVTIMEO, int32: 30_000)
        try socket.connect(bus)
        let request = ClientMessage.snapshot(requestID: "raw").encoded()
        // The request's envelope without its request id: `SKB2C`, then SNAPSHOT with its length.
        let summaryStart = request[0].dropLast(1 + "raw".utf8.count)
        try socket.send(request)
        while let message = try socket.receive() {
            if message.first?.starts(with: summaryStart) == true {
                return milliseconds(ContinuousClock.now - start)
            }
        }
        throw SkillbusError(.timeout, "no raw snapshot within 30 s")
    }

    /// Milliseconds from `kill -9` of a worker (default 1 s heartbeats) until a replica no longer lists it.
    static func killTimes(
        supervisor: Supervisor, bus: String, feed: String, context: ZMQContext, runs: Int
    ) async throws -> [Double] {
        let client = try await SkillbusClient.connect(endpoint: bus, context: context)
        let replica = try await RegistryReplica.connect(client: client, feedEndpoint: feed, context: context)
        defer {
            replica.close()
            client.close()
        }
        var times: [Double] = []
        for run in 0..<runs {
            let name = "victim-\(run)"
            let victim = supervisor.start(
                name: name,
                arguments: [
                    "worker", "--name", name, "--coordinator", bus, "--skills", "echo", "--log-level", "error",
                    "--data-dir", supervisor.directory + "/" + name,
                ],
                quiet: true)
            guard await replica.waitUntil(timeout: .seconds(30), { $0.agents[name] != nil }) else {
                throw SkillbusError(.timeout, "worker \(name) did not join within 30 s")
            }
            let killed = ContinuousClock.now
            victim.killWithoutRestart()
            guard await replica.waitUntil(timeout: .seconds(30), { $0.agents[name] == nil }) else {
                throw SkillbusError(.timeout, "the replica still lists \(name) 30 s after kill -9")
            }
            times.append(milliseconds(ContinuousClock.now - killed))
        }
        return times
    }

    static func milliseconds(_ duration: Duration) -> Double {
        (duration / .milliseconds(1)).rounded(toPlaces: 3)
    }
}

extension Double {
    func rounded(toPlaces places: Int) -> Double {
        let scale = pow(10, Double(places))
        return (self * scale).rounded() / scale
    }
}

extension Array where Element == Double {
    var median: Double { isEmpty ? 0 : sorted()[count / 2] }
}
