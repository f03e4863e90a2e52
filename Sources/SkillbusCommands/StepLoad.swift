import Dispatch
import Skillbus
import SkillbusZMQ

/// Samples of steps taken one after the other, each step a few requests sent together and awaited all: how a
/// client that asks two agents in turn, or three at once, spends its time. One sample at a time, each timed
/// from its first request to its last reply; a sample fails when one of its replies says so.
public struct StepLoad: Sendable {
    /// Each step's requests: one generator each.
    public var steps: [[LoadGenerator]]

    public init(steps: [[LoadGenerator]]) { self.steps = steps }

    /// One step of one request: what `LoadGenerator.run` measures at 1 in flight, with the same timing as
    /// the composite samples it is compared with.
    public init(_ single: LoadGenerator) { steps = [[single]] }

    /// Takes `samples` samples; stops early after `timeLimit` (an unfinished sample counts as failed).
    public func run(endpoint: String, context: ZMQContext, samples: Int, timeLimit: Duration) throws -> LoadReport {
        let socket = try ZMQSocket(context: context, type: .dealer)
        defer { socket.close() }
        try socket.connect(endpoint)
        func now() -> UInt64 { DispatchTime.now().uptimeNanoseconds }
        let start = now()
        let limit = start + UInt64(timeLimit.components.seconds) * 1_000_000_000
        var latencies: [UInt64] = []
        latencies.reserveCapacity(samples)
        var failed = 0
        // Request numbers are unique over the run, so a late reply to an unfinished sample is never taken
        // for one of a later sample.
        var number: UInt64 = 0
        samples: for _ in 0..<samples {
            let began = now()
            var ok = true
            for step in steps {
                var waiting: Set<UInt64> = []
                for generator in step {
                    try socket.send(generator.makeRequest(number))
                    waiting.insert(number)
                    number += 1
                }
                while !waiting.isEmpty {
                    guard now() < limit else {
                        failed += 1
                        break samples
                    }
                    guard try poll([PollItem(.socket(socket))], timeoutMs: 1000).readable[0] else { continue }
                    while let reply = try socket.receive(dontWait: true) {
                        // Each generator reads only its own kind of reply.
                        guard let (id, answered) = step.lazy.compactMap({ $0.replyID(reply) }).first,
                            waiting.remove(id) != nil
                        else { continue }
                        ok = ok && answered
                    }
                }
            }
            latencies.append(now() - began)
            if !ok { failed += 1 }
        }
        latencies.sort()
        return LoadReport(
            completed: latencies.count, failed: failed, seconds: Double(now() - start) / 1e9, latencies: latencies)
    }

    /// `run` on a thread of its own, off the cooperative pool.
    public func measure(
        endpoint: String, context: ZMQContext, samples: Int, timeLimit: Duration = .seconds(60)
    ) async throws -> LoadReport {
        try await OwnThread.run {
            try run(endpoint: endpoint, context: context, samples: samples, timeLimit: timeLimit)
        }
    }
}
