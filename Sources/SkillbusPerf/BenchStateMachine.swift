import Foundation
import Skillbus

/// The coordinator's decisions alone, without sockets: an echo REQUEST and a one-invocation ROUND driven
/// through `CoordinatorState` from arrival to answer, in alternating pairs. What the bench's coordinator
/// CPU figures hold beyond this is the loop's reading, decoding and sending.
struct StateMachineBench {
    struct Figures {
        var requestNanos: Double
        var roundNanos: Double
        var ratio: Double { requestNanos > 0 ? roundNanos / requestNanos : 0 }

        func printText() {
            print("  the coordinator's state alone (no sockets), CPU per answer (least of the pairs):")
            print(String(format: "    REQUEST                %8.0f ns", requestNanos))
            print(String(format: "    one-invocation ROUND   %8.0f ns   %.2fx", roundNanos, ratio))
        }

        var json: JSONValue {
            ["requestNanos": .number(requestNanos), "roundNanos": .number(roundNanos), "ratio": .number(ratio)]
        }
    }

    let operations: Int
    let parameters = JSONValue.object(["text": .string(String(repeating: "x", count: 100))]).serialized()
    let answer = JSONValue.object(["type": "text", "text": .string(String(repeating: "x", count: 100))])
        .serialized()
    let workers: [PeerID] = [[0xA1], [0xA2]]
    let client: PeerID = [0xC1]

    func measure(pairs: Int = 5) -> Figures {
        var requests: [Double] = []
        var rounds: [Double] = []
        for pair in 0..<pairs {
            // Alternating order, so a machine getting busier weighs on both.
            if pair % 2 == 0 {
                requests.append(run(rounds: false))
                rounds.append(run(rounds: true))
            } else {
                rounds.append(run(rounds: true))
                requests.append(run(rounds: false))
            }
        }
        // The least of the pairs: on a busy machine every disturbance only adds.
        return Figures(requestNanos: requests.min() ?? 0, roundNanos: rounds.min() ?? 0)
    }

    /// This thread's CPU time: time it was not running does not count.
    private func threadCPUNanos() -> Double {
        var time = timespec()
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &time)
        return Double(time.tv_sec) * 1e9 + Double(time.tv_nsec)
    }

    /// CPU nanoseconds per answer, over `operations` answers.
    private func run(rounds: Bool) -> Double {
        var state = CoordinatorState(settings: .init(), epoch: "bench")
        for (index, peer) in workers.enumerated() {
            _ = state.handleWorker(
                .ready([
                    "name": .string("w\(index)"), "capacity": 64,
                    "skills": [["identifier": "echo", "parameters": [["name": "text", "type": "string"]]]],
                ]), from: peer, now: 0)
        }
        let body = JSONValue.object([
            "invoke": ["skill": "echo", "params": .object(["text": .string(String(repeating: "x", count: 100))])]
        ]).serialized()
        let start = threadCPUNanos()
        var now: UInt64 = 1_000
        var answered = 0
        for index in 0..<operations {
            now &+= 1_000
            // As the loop does a few times a second: finished rounds are evicted beyond the bus's limit.
            if index % 1_000 == 0 { _ = state.tick(now: now) }
            let id = "q\(index)"
            let actions =
                rounds
                ? state.handleRound(RoundRequest(requestID: id, roundID: "r\(index)", body: body), from: client, now: now)
                : state.handleInvoke(
                    InvokeRequest(requestID: id, roundID: "", skill: "echo", parameters: parameters), from: client,
                    now: now)
            for case .toWorker(let peer, .invoke(let invocation)) in actions {
                let replies = state.handleWorker(
                    .result(invocationID: invocation.invocationID, status: .ok, payload: answer), from: peer, now: now)
                answered += replies.count
            }
        }
        let nanos = threadCPUNanos() - start
        precondition(answered >= operations, "the state machine answered \(answered) of \(operations)")
        return nanos / Double(operations)
    }
}
