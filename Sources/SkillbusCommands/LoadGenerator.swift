import Dispatch
import Foundation
import Synchronization
import Skillbus
import SkillbusZMQ

/// Latency and throughput of one load run.
public struct LoadReport: Sendable {
    public var completed: Int
    public var failed: Int
    public var seconds: Double
    /// Sorted latencies in nanoseconds.
    public var latencies: [UInt64]
    /// CPU time of the generator's own thread per completed request, in microseconds: building requests and
    /// reading replies (libzmq's I/O thread in this process is not counted).
    public var clientMicrosPerRequest = 0.0
    /// CPU time of the process behind the endpoint (the coordinator) per completed request, in microseconds,
    /// when the measurement read it (`measure(..., serverPID:)`); else 0.
    public var serverMicrosPerRequest = 0.0

    public var tasksPerSecond: Double { seconds > 0 ? Double(completed) / seconds : 0 }
    public func percentileMs(_ fraction: Double) -> Double {
        guard !latencies.isEmpty else { return 0 }
        let index = min(latencies.count - 1, Int((Double(latencies.count) * fraction).rounded(.up)) - 1)
        return Double(latencies[max(0, index)]) / 1_000_000
    }
    public var maxMs: Double { Double(latencies.last ?? 0) / 1_000_000 }

    /// Several runs as one: their requests, time and latencies together, and the client's CPU per request
    /// over all of them.
    public static func merged(_ runs: [LoadReport]) -> LoadReport {
        let completed = runs.reduce(0) { $0 + $1.completed }
        var report = LoadReport(
            completed: completed, failed: runs.reduce(0) { $0 + $1.failed }, seconds: runs.reduce(0) { $0 + $1.seconds },
            latencies: runs.flatMap(\.latencies).sorted())
        func perRequest(_ figure: (LoadReport) -> Double) -> Double {
            completed > 0 ? runs.reduce(0) { $0 + figure($1) * Double($1.completed) } / Double(completed) : 0
        }
        report.clientMicrosPerRequest = perRequest(\.clientMicrosPerRequest)
        report.serverMicrosPerRequest = perRequest(\.serverMicrosPerRequest)
        return report
    }

    public var json: JSONValue {
        [
            "tasksPerSecond": .number((tasksPerSecond * 10).rounded() / 10),
            "p50Ms": .number(round3(percentileMs(0.5))),
            "p99Ms": .number(round3(percentileMs(0.99))), "maxMs": .number(round3(maxMs)),
            "completed": .number(Double(completed)), "failed": .number(Double(failed)),
            "clientMicrosPerRequest": .number((clientMicrosPerRequest * 10).rounded() / 10),
            "serverMicrosPerRequest": .number((serverMicrosPerRequest * 10).rounded() / 10),
        ]
    }

    private func round3(_ value: Double) -> Double { (value * 1000).rounded() / 1000 }
}

/// Drives a DEALER with a fixed number of requests in flight, on its own thread, and times each one.
/// The same generator measures Skillbus and the raw ZeroMQ baseline, so the two differ only in what
/// sits between the sockets. `skillbus bench` needs it, so it ships; the shapes only the tests and the
/// team's perf tool send are in SkillbusTestSupport.
public struct LoadGenerator: Sendable {
    /// Builds request number `id`; the reply must let `replyID` recover that number.
    public var makeRequest: @Sendable (UInt64) -> Multipart
    /// The request number a reply answers, and whether it succeeded.
    public var replyID: @Sendable (Multipart) -> (id: UInt64, ok: Bool)?

    public init(
        makeRequest: @escaping @Sendable (UInt64) -> Multipart,
        replyID: @escaping @Sendable (Multipart) -> (id: UInt64, ok: Bool)?
    ) {
        self.makeRequest = makeRequest
        self.replyID = replyID
    }

    /// Skillbus requests for the `echo` skill with a text of `payloadBytes` bytes, each in a round of its own
    /// (a random round id: a reused one would be answered from the round's earlier outcome).
    public static func skillbusEcho(payloadBytes: Int, session: String = "") -> LoadGenerator {
        let parameters = JSONValue.object(["text": .string(String(repeating: "x", count: payloadBytes))]).serialized()
        return skillbus(session: session) { _ in ("echo", parameters) }
    }

    /// What `freshRoundID` hands out. A reused round id would be answered from the round's earlier outcome.
    private static let roundPrefix = "bench-" + String(UInt64.random(in: 0...UInt64.max), radix: 36) + "-"
    private static let roundsMade = Atomic<UInt64>(0)

    /// REQUESTs of whatever skill and parameters `request` gives for each number, each in a round of its own.
    /// Replies are read as a client of the library reads them (`BusToClientMessage.decode`: a REPLY in place).
    public static func skillbus(
        session: String, _ request: @escaping @Sendable (UInt64) -> (String, [UInt8])
    ) -> LoadGenerator {
        LoadGenerator(
            makeRequest: { id in
                let (skill, parameters) = request(id)
                return ClientMessage.invoke(
                    InvokeRequest(
                        requestID: String(id), roundID: freshRoundID(), sessionID: session, skill: skill,
                        timeoutMs: 15_000, parameters: parameters)
                ).encoded()
            },
            replyID: { frames in
                guard case .reply(let reply)? = try? BusToClientMessage.decode(frames), let id = UInt64(reply.requestID)
                else { return nil }
                return (id, reply.status == .ok)
            })
    }

    /// Whole rounds (ROUND) of `spec`, each under a round id no request of this process used before; a reply
    /// counts as ok when the document's status is ok.
    public static func rounds(_ spec: RoundSpec) -> LoadGenerator { rounds(body: spec.json.serialized()) }

    /// Whole rounds of a body as it is sent, which this build may not know how to read (a newer bus may
    /// accept shapes it does not: `skillbus bench` tries an asks round so).
    public static func rounds(body: [UInt8]) -> LoadGenerator {
        LoadGenerator(
            makeRequest: { id in
                ClientMessage.round(
                    RoundRequest(requestID: String(id), roundID: freshRoundID(), timeoutMs: 15_000, body: body)
                ).encoded()
            },
            replyID: { frames in
                guard let message = Wire.busMessageFields(frames), message.count == 5, let id = UInt64(String(decoding: message[2], as: UTF8.self)) else {
                    return nil
                }
                // Only the status, from the document's tail (§5.14), as a client that needs no more would.
                return (id, RoundDocument.saysOK(message[4]))
            })
    }

    /// Turns (ASK) with `message`, each in a round of its own (unless `roundID` says which); a reply counts as ok
    /// when the turn ended ok.
    public static func turns(
        _ message: String, agent: String, roundID: @escaping @Sendable () -> String = Self.freshRoundID
    ) -> LoadGenerator {
        LoadGenerator(
            makeRequest: { id in
                ClientMessage.ask(
                    AskRequest(
                        requestID: String(id), roundID: roundID(), agent: agent, timeoutMs: 15_000, message: message)
                ).encoded()
            },
            replyID: { frames in
                guard let message = Wire.busMessageFields(frames), message.count == 6, message[1] == Array("TURN".utf8),
                    let id = UInt64(String(decoding: message[2], as: UTF8.self))
                else { return nil }
                return (id, message[4] == Array("ok".utf8))
            })
    }

    /// A round id no request of this process used before: a random prefix and a count (a random number for each
    /// cost the client a system call).
    @Sendable public static func freshRoundID() -> String {
        roundPrefix + String(roundsMade.add(1, ordering: .relaxed).newValue)
    }

    /// Raw frames for the baseline: an id frame and a payload frame, echoed back unchanged.
    public static func rawEcho(payloadBytes: Int) -> LoadGenerator {
        let payload = [UInt8](repeating: UInt8(ascii: "x"), count: payloadBytes)
        return LoadGenerator(
            makeRequest: { id in [Array(String(id).utf8), payload] },
            replyID: { frames in
                guard frames.count == 2, let id = UInt64(String(decoding: frames[0], as: UTF8.self)) else {
                    return nil
                }
                return (id, true)
            })
    }

    /// Sends `requests` requests with `inFlight` outstanding at a time; stops early after `timeLimit`.
    /// With `credentials`, over CURVE (for a coordinator with keys).
    public func run(
        endpoint: String, context: ZMQContext, requests: Int, inFlight: Int, timeLimit: Duration,
        credentials: CurveCredentials? = nil
    ) throws -> LoadReport {
        let socket = try ZMQSocket(context: context, type: .dealer)
        defer { socket.close() }
        try socket.setSendHighWaterMark(0)
        try socket.setReceiveHighWaterMark(0)
        if let credentials { try socket.useCurveClient(credentials) }
        try socket.connect(endpoint)
        // With keys, as Skillbus's client sends them: folded into one frame (PROTOCOL §2.1), and what leaves at
        // once batched (§2.2; the first send is a batch, so that the bus batches its answers too).
        let batching = credentials == nil ? nil : Wire.frameBatching
        var outgoing: Multipart = []
        var outgoingBytes = 0
        var announce = true
        func send(_ id: Int) throws {
            let message = makeRequest(UInt64(id))
            guard let batching else { return try socket.send(message) }
            let folded = batching.fold(message)
            outgoing.append(folded)
            outgoingBytes += folded.count + FrameBatching.lengthBytes
            // A full batch goes at once (PROTOCOL §2.2): the bus works on it while the burst's other answers are read.
            if batching.fills(count: outgoing.count, bytes: outgoingBytes) { try flush() }
        }
        func flush() throws {
            guard let batching, !outgoing.isEmpty else { return }
            for frame in batching.frames(carrying: outgoing, announce: announce) { try socket.send([frame]) }
            outgoing.removeAll(keepingCapacity: true)
            outgoingBytes = 0
            announce = false
        }
        var sentAt = [UInt64](repeating: 0, count: requests)
        var latencies: [UInt64] = []
        latencies.reserveCapacity(requests)
        var sent = 0
        var failed = 0
        let start = DispatchTime.now().uptimeNanoseconds
        let limit = start + UInt64(timeLimit.components.seconds) * 1_000_000_000
        while sent < min(inFlight, requests) {
            sentAt[sent] = DispatchTime.now().uptimeNanoseconds
            try send(sent)
            sent += 1
        }
        try flush()
        let cpuAtStart = Self.threadCPUNanos()
        var done = 0
        func take(_ reply: Multipart) throws {
            guard let (id, ok) = replyID(reply), Int(id) < requests, sentAt[Int(id)] != 0 else { return }
            let received = DispatchTime.now().uptimeNanoseconds
            latencies.append(received - sentAt[Int(id)])
            sentAt[Int(id)] = 0
            done += 1
            if !ok { failed += 1 }
            if sent < requests {
                sentAt[sent] = DispatchTime.now().uptimeNanoseconds
                try send(sent)
                sent += 1
            }
        }
        while done < sent {
            let ready = try poll([PollItem(.socket(socket))], timeoutMs: 1000)
            let now = DispatchTime.now().uptimeNanoseconds
            if now > limit { break }
            guard ready.readable[0] else { continue }
            while let message = try socket.receive(dontWait: true) {
                // Without keys nothing comes batched: each message is one reply, taken as it is.
                guard let batching else {
                    try take(message)
                    continue
                }
                for reply in Wire.messages(in: message, batching) { try take(reply) }
            }
            try flush()
        }
        let seconds = Double(DispatchTime.now().uptimeNanoseconds - start) / 1e9
        var report = LoadReport(completed: done, failed: failed, seconds: seconds, latencies: [])
        report.clientMicrosPerRequest = Double(Self.threadCPUNanos() - cpuAtStart) / 1000 / Double(max(done, 1))
        latencies.sort()
        report.latencies = latencies
        return report
    }

    /// `run` on a thread of its own, off the cooperative pool.
    /// With `serverPID`, the report also has that process's CPU time per request (`serverMicrosPerRequest`).
    public func measure(
        endpoint: String, context: ZMQContext, requests: Int, inFlight: Int, timeLimit: Duration = .seconds(60),
        credentials: CurveCredentials? = nil, serverPID: Int32? = nil
    ) async throws -> LoadReport {
        let before = ProcessCPU.seconds(serverPID)
        var report = try await OwnThread.run {
            try run(
                endpoint: endpoint, context: context, requests: requests, inFlight: inFlight, timeLimit: timeLimit,
                credentials: credentials)
        }
        if serverPID != nil {
            report.serverMicrosPerRequest = (ProcessCPU.seconds(serverPID) - before) / Double(max(report.completed, 1)) * 1e6
        }
        return report
    }

    private static func threadCPUNanos() -> UInt64 {
        var time = timespec()
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &time)
        return UInt64(time.tv_sec) * 1_000_000_000 + UInt64(time.tv_nsec)
    }
}

/// The CPU time a process has used so far.
public enum ProcessCPU {
    /// Seconds over all its threads, from the scheduler's own runtime of each (the first field of schedstat,
    /// in nanoseconds): exact, where /proc/PID/stat's ticks only sample which process ran at each tick. 0
    /// for nil or a process that is gone.
    public static func seconds(_ pid: Int32?) -> Double {
        guard let pid, let threads = try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(pid)/task")
        else { return 0 }
        let nanos = threads.reduce(0) { total, thread in
            let stat = try? String(contentsOfFile: "/proc/\(pid)/task/\(thread)/schedstat", encoding: .utf8)
            return total + (stat?.split(separator: " ").first.flatMap { Int($0) } ?? 0)
        }
        return Double(nanos) / 1e9
    }
}

/// Round ids handed out in groups: every `size` calls in a row get the same one, each group a fresh one (the
/// asks of one sample sent in one round, as a client that wants their calls run once would send them).
public final class RoundIDGroups: Sendable {
    private let size: Int
    private let handedOut = Mutex<(count: Int, current: String)>((0, ""))

    public init(size: Int) { self.size = size }

    @Sendable public func next() -> String {
        handedOut.withLock { state in
            if state.count % size == 0 { state.current = LoadGenerator.freshRoundID() }
            state.count += 1
            return state.current
        }
    }
}
