import Foundation
import Skillbus
import SkillbusCommands

/// The coordinator's decisions alone, without sockets: an echo REQUEST, the same REQUEST in a round of its
/// own (the floor a one-invocation ROUND could reach: single-flight keeps its outcome for the round id), a
/// one-invocation ROUND, a fan-out to both workers and a plan of eight independent steps (these two per
/// invocation), each driven through `CoordinatorState` from arrival to answer, in alternating order.
/// What the bench's coordinator CPU figures hold beyond this is the loop's reading, decoding and sending.
struct StateMachineBench {
    struct Figures {
        var requestNanos: Double
        var requestInRoundNanos: Double
        var roundNanos: Double
        /// Per invocation.
        var fanoutNanos: Double
        /// Per step.
        var planNanos: Double
        var ratio: Double { requestNanos > 0 ? roundNanos / requestNanos : 0 }
        var inRoundRatio: Double { requestNanos > 0 ? requestInRoundNanos / requestNanos : 0 }
        func ratio(_ nanos: Double) -> Double { requestNanos > 0 ? nanos / requestNanos : 0 }

        /// The kinds measured, each with its ratio to the REQUEST when that was measured too.
        func printText() {
            print("  the coordinator's state alone (no sockets), CPU per answer (least of the runs):")
            let rows = [
                ("REQUEST", requestNanos), ("REQUEST in a round", requestInRoundNanos),
                ("one-invocation ROUND", roundNanos), ("fan-out, per invocation", fanoutNanos),
                ("plan, per step", planNanos),
            ]
            for (name, nanos) in rows where nanos > 0 {
                let shown = name == "REQUEST" || requestNanos == 0 ? "" : String(format: "   %.2fx", ratio(nanos))
                print("    " + name.padded(to: 23) + String(format: "%8.0f ns", nanos) + shown)
            }
        }

        var json: JSONValue {
            [
                "requestNanos": .number(requestNanos), "requestInRoundNanos": .number(requestInRoundNanos),
                "roundNanos": .number(roundNanos), "ratio": .number(ratio),
                "fanoutNanosPerInvocation": .number(fanoutNanos), "planNanosPerStep": .number(planNanos),
            ]
        }
    }

    let operations: Int
    /// What is measured (a kind left out reads 0).
    var kinds = Kind.allCases
    let parameters = JSONValue.object(["text": .string(String(repeating: "x", count: 100))]).serialized()
    let answer = JSONValue.object(["type": "text", "text": .string(String(repeating: "x", count: 100))])
        .serialized()
    let workers: [PeerID] = [[0xA1], [0xA2]]
    let client: PeerID = [0xC1]

    /// What one run sends.
    enum Kind: CaseIterable {
        case request, requestInRound, round, fanout, plan
    }

    static let planSteps = 8

    func measure(passes: Int = 5) -> Figures {
        var nanos: [Kind: [Double]] = [:]
        for pass in 0..<passes {
            // Each pass in another order, so a machine getting busier weighs on all.
            let order = pass % 2 == 0 ? kinds : kinds.reversed()
            for kind in order { nanos[kind, default: []].append(run(kind)) }
        }
        // The least of the runs: on a busy machine every disturbance only adds.
        func least(_ kind: Kind) -> Double { nanos[kind]?.min() ?? 0 }
        return Figures(
            requestNanos: least(.request), requestInRoundNanos: least(.requestInRound), roundNanos: least(.round),
            fanoutNanos: least(.fanout) / Double(workers.count), planNanos: least(.plan) / Double(Self.planSteps))
    }

    /// This thread's CPU time: time it was not running does not count.
    private func threadCPUNanos() -> Double {
        var time = timespec()
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &time)
        return Double(time.tv_sec) * 1e9 + Double(time.tv_nsec)
    }

    /// The ROUND body of each round kind, as Skillbus's clients write it (canonical).
    private func body(_ kind: Kind) -> [UInt8] {
        let params = JSONValue.object(["text": .string(String(repeating: "x", count: 100))])
        let spec: RoundSpec =
            switch kind {
            case .fanout: .fanout(skill: "echo", parameters: params, agents: nil, aggregate: .all)
            case .plan:
                .plan(
                    steps: (0..<Self.planSteps).map {
                        PlanStep(id: "s\($0)", skill: "echo", parameters: ["text": .string("t\($0)")])
                    }, continueOnFailure: false)
            default: .invoke(skill: "echo", parameters: params)
            }
        return spec.json.serialized()
    }

    /// CPU nanoseconds per answer (a round's, for the round kinds), over `operations` answers.
    private func run(_ kind: Kind) -> Double {
        var state = CoordinatorState(settings: .init(), epoch: "bench")
        for (index, peer) in workers.enumerated() {
            _ = state.handleWorker(
                .ready([
                    "name": .string("w\(index)"), "capacity": 64,
                    "skills": [["identifier": "echo", "parameters": [["name": "text", "type": "string"]]]],
                ]), from: peer, now: 0)
        }
        let body = body(kind)
        let start = threadCPUNanos()
        var now: UInt64 = 1_000
        var answered = 0
        for index in 0..<operations {
            now &+= 1_000
            // As the loop does a few times a second: finished rounds are evicted beyond the bus's limit.
            if index % 1_000 == 0 { _ = state.tick(now: now) }
            let id = "q\(index)"
            var actions =
                switch kind {
                case .round, .fanout, .plan:
                    state.handleRound(
                        RoundRequest(requestID: id, roundID: "r\(index)", body: body), from: client, now: now)
                case .request, .requestInRound:
                    state.handleInvoke(
                        InvokeRequest(
                            requestID: id, roundID: kind == .request ? "" : "r\(index)", skill: "echo",
                            parameters: parameters), from: client, now: now)
                }
            // Every INVOKE is answered; a plan's or fan-out's answers may start more.
            while !actions.isEmpty {
                var next: [CoordinatorAction] = []
                for action in actions {
                    switch action {
                    case .toWorker(let peer, .invoke(let invocation)):
                        next += state.handleWorker(
                            .result(invocationID: invocation.invocationID, status: .ok, payload: answer), from: peer,
                            now: now)
                    case .toClient: answered += 1
                    default: break
                    }
                }
                actions = next
            }
        }
        let nanos = threadCPUNanos() - start
        precondition(answered >= operations, "the state machine answered \(answered) of \(operations)")
        return nanos / Double(operations)
    }
}
