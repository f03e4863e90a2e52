import Foundation
import Skillbus
import SkillbusCommands
import SkillbusTestSupport
import SkillbusZMQ

/// The agent context figures of `skillbus-perf`: memory through the bus against echo, and a large
/// store's open time, history read and worker memory.
struct ContextFigures {
    /// At each level in flight: echo and memory.set/get alternating, both in one session (so both are
    /// routed to the session's agent and written into its history), and echo without a session.
    var echo: [Int: LoadReport] = [:]
    var echoInSession: [Int: LoadReport] = [:]
    var memory: [Int: LoadReport] = [:]
    var storeMessages = 0
    var storeSessions = 0
    var openMs: [Double] = []
    var historyMs: [Double] = []
    var workerResidentMB = 0.0
    var emptyWorkerResidentMB = 0.0

    static let levels = [1, 16]

    func memoryVsEchoP50(_ level: Int) -> Double {
        PerfCommand.ratio(memory[level]?.percentileMs(0.5) ?? 0, echoInSession[level]?.percentileMs(0.5) ?? 0)
    }

    var failures: Int { [echo, echoInSession, memory].reduce(0) { $0 + $1.values.reduce(0) { $0 + $1.failed } } }

    var json: JSONValue {
        func levels(_ reports: [Int: LoadReport]) -> JSONValue {
            .object(Dictionary(uniqueKeysWithValues: reports.map { ("inFlight\($0.key)", $0.value.json) }))
        }
        return [
            "echo": levels(echo), "echoInSession": levels(echoInSession), "memorySetGet": levels(memory),
            "memoryVsEchoP50Ratio": .object(
                Dictionary(uniqueKeysWithValues: Self.levels.map { ("inFlight\($0)", .number(memoryVsEchoP50($0))) })),
            "store": [
                "messages": .number(Double(storeMessages)), "sessions": .number(Double(storeSessions)),
                "openMs": ["median": .number(openMs.median), "runs": .array(openMs.map { .number($0) })],
                "history1000Ms": ["median": .number(historyMs.median), "runs": .array(historyMs.map { .number($0) })],
                "workerResidentMB": .number(workerResidentMB), "emptyWorkerResidentMB": .number(emptyWorkerResidentMB),
            ],
        ]
    }

    func printText() {
        print("agent context (memory.set/get alternating, in one session, against echo in the same session)")
        for level in Self.levels {
            guard let memory = memory[level], let echo = echoInSession[level], let plain = self.echo[level] else {
                continue
            }
            print(
                String(
                    format: "  %2d in flight: p50 memory %.3f ms, echo %.3f ms (%.2fx; target <= 1.3), echo without a session %.3f ms",
                    level, memory.percentileMs(0.5), echo.percentileMs(0.5), memoryVsEchoP50(level),
                    plain.percentileMs(0.5)))
        }
        print(
            String(
                format: "  a store of %d messages over %d sessions opens in %.1f ms (target < 200); a 1,000-message history in %.1f ms (target < 50)",
                storeMessages, storeSessions, openMs.median, historyMs.median))
        print(
            String(
                format: "  a worker holding it: %.0f MB resident (target < 60), %.0f MB with an empty store",
                workerResidentMB, emptyWorkerResidentMB))
    }
}

extension Bench {
    /// Memory through the bus on `cluster`'s agents, then a large store on its own.
    func context(_ cluster: Cluster, sessions: Int, messagesPerSession: Int) async throws -> ContextFigures {
        var figures = ContextFigures()
        let count = min(setup.requests, 5000)
        note("context: memory.set/get against echo at 1 and 16 in flight…")
        for level in ContextFigures.levels {
            let session = "bench-session-\(level)"
            figures.echo[level] = try await measure(echoLoad, cluster.bus, requests: count, inFlight: level)
            figures.echoInSession[level] = try await measure(
                .skillbusEcho(payloadBytes: setup.payloadBytes, session: session), cluster.bus, requests: count,
                inFlight: level)
            figures.memory[level] = try await measure(
                .skillbusMemory(payloadBytes: setup.payloadBytes, session: session), cluster.bus, requests: count,
                inFlight: level)
        }
        note("context: a store of \(sessions * messagesPerSession) messages over \(sessions) sessions…")
        let directory = supervisor.directory + "/large-store"
        let large = try await AgentStore.open(directory: directory, agent: "large")
        let content: JSONValue = ["skill": "echo", "params": ["text": .string(String(repeating: "x", count: 100))]]
        // One session of 1,000 messages; the rest share what is left.
        for session in 0..<sessions {
            let messages = session == 0 ? 1000 : messagesPerSession
            for index in 0..<messages {
                try large.append(
                    index % 2 == 0 ? .skillCall : .skillResult, content, session: "s\(session)", round: "r\(index / 2)")
            }
            figures.storeMessages += messages
        }
        try await large.flush()
        await large.close()
        figures.storeSessions = sessions
        for _ in 0..<3 {
            let started = ContinuousClock.now
            let store = try await AgentStore.open(directory: directory, agent: "large")
            figures.openMs.append(RegistryBench.milliseconds(ContinuousClock.now - started))
            let read = ContinuousClock.now
            let history = try await store.history("s0")
            figures.historyMs.append(RegistryBench.milliseconds(ContinuousClock.now - read))
            await store.close()
            guard history?.count == 1000 else {
                throw SkillbusError(.internalError, "the large store's s0 holds \(history?.count ?? 0) messages, not 1000")
            }
        }
        figures.workerResidentMB = try await residentMB(ofWorkerWith: directory, name: "large", bus: cluster.bus)
        figures.emptyWorkerResidentMB = try await residentMB(
            ofWorkerWith: supervisor.directory + "/empty-store", name: "empty", bus: cluster.bus)
        return figures
    }

    /// Starts a worker on `directory`, waits until it has registered, and reads its resident memory.
    private func residentMB(ofWorkerWith directory: String, name: String, bus: String) async throws -> Double {
        let worker = supervisor.start(
            name: name,
            arguments: [
                "worker", "--name", name, "--coordinator", bus, "--skills", "memory.get", "--data-dir", directory,
                "--log-level", "warning",
            ], quiet: true)
        guard await BenchCluster.waitForProviders(bus: bus, skill: "memory.get", count: 1, agent: name, context: context)
        else {
            throw SkillbusError(.timeout, "worker \(name) did not register within 30 s")
        }
        let resident = PerfCommand.residentMB(worker.pid)
        await worker.stop(grace: .seconds(5))
        return resident
    }
}
