import Dispatch
import Foundation
import Skillbus
import SkillbusZMQ
import Synchronization

/// What a call through `skillbus mcp` costs: an MCP client writes `tools/call` of echo to the stdio server
/// and reads its answer, against the same echo sent as a ROUND (what `skillbus send` sends), one at a time,
/// in pairs of alternating order. The server runs with `--reuse-window 0`, so every call runs a round.
struct MCPBench {
    let bus: String
    let feed: String
    let context: ZMQContext
    let samples: Int
    let pairs: Int
    let payloadBytes: Int

    func measure(note: (String) -> Void) async throws -> PairedFigures {
        let text = String(repeating: "x", count: payloadBytes)
        let server = try MCPStdioPeer(arguments: [
            "mcp", "--coordinator", bus, "--feed", feed, "--reuse-window", "0", "--log-level", "warning",
        ])
        defer { server.stop() }
        try await OwnThread.run { try server.initialize(waitingForTool: "echo") }
        let send = StepLoad(.rounds(.invoke(skill: "echo", parameters: ["text": .string(text)])))
        // Warm both paths: the server's replica and client, the bus's tables.
        _ = try await OwnThread.run { try server.calls(min(samples, 50), text: text) }
        _ = try await send.measure(endpoint: bus, context: context, samples: min(samples, 50))
        note("mcp: \(pairs) pairs of \(samples) tools/call through skillbus mcp and plain sends…")
        return try await PairedFigures.measure(pairs: pairs) {
            try await OwnThread.run { try server.calls(samples, text: text) }
        } baseline: {
            try await send.measure(endpoint: bus, context: context, samples: samples)
        }
    }
}

/// `skillbus mcp` as a child on pipes, spoken to line by line as an MCP client does. One caller at a time
/// (the bench's measurements run one after the other); its read buffer sits behind a lock all the same.
final class MCPStdioPeer: Sendable {
    private let process: ChildProcess
    /// Our ends of its standard input and output.
    private let inputFD: Int32
    private let outputFD: Int32
    private let pending = Mutex<[UInt8]>([])
    private let nextID = Atomic<Int>(0)

    init(arguments: [String]) throws {
        var environment = ProcessInfo.processInfo.environment
        environment["SKILLBUS_SERVER_KEY"] = nil
        environment["SKILLBUS_KEY"] = nil
        let pipes = try ChildProcess.pipes(2)
        let (stdin, stdout) = (pipes[0], pipes[1])
        // A server that died must fail the bench with an error, not kill it with SIGPIPE.
        signal(SIGPIPE, SIG_IGN)
        defer {
            close(stdin[0])
            close(stdout[1])
        }
        do {
            process = try ChildProcess.spawn(
                URL(fileURLWithPath: "/proc/self/exe").resolvingSymlinksInPath().path, arguments,
                environment: environment, input: stdin[0], output: stdout[1])
        } catch {
            close(stdin[1])
            close(stdout[0])
            throw error
        }
        (inputFD, outputFD) = (stdin[1], stdout[0])
    }

    /// Closes its standard input (it stops by itself), then makes sure it is gone.
    func stop() {
        close(inputFD)
        let deadline = ContinuousClock.now + .seconds(3)
        while process.isRunning && ContinuousClock.now < deadline { usleep(10_000) }
        process.signal(SIGKILL)
        process.waitUntilExit()
        close(outputFD)
    }

    /// The handshake, then tools/list until `tool` is listed (the server's replica may still be loading).
    func initialize(waitingForTool tool: String) throws {
        _ = try request(
            "initialize",
            [
                "protocolVersion": .string(MCPVersion.latest), "capabilities": [:],
                "clientInfo": ["name": "bench", "version": "1"],
            ])
        send(.notification(method: "notifications/initialized", params: nil))
        let deadline = ContinuousClock.now + .seconds(20)
        while ContinuousClock.now < deadline {
            let listing = try request("tools/list", [:])
            if listing["tools"]?.arrayValue?.contains(where: { $0["name"]?.stringValue == tool }) == true { return }
            usleep(50_000)
        }
        throw SkillbusError(.timeout, "skillbus mcp did not list '\(tool)' within 20 s")
    }

    /// `count` calls of echo, one at a time, each timed from writing the request to reading its answer.
    func calls(_ count: Int, text: String) throws -> LoadReport {
        func now() -> UInt64 { DispatchTime.now().uptimeNanoseconds }
        let start = now()
        var latencies: [UInt64] = []
        latencies.reserveCapacity(count)
        var failed = 0
        for _ in 0..<count {
            let began = now()
            let result = try request("tools/call", ["name": "echo", "arguments": ["text": .string(text)]])
            latencies.append(now() - began)
            if result["isError"] != false || result["content"]?.arrayValue?.first?["text"]?.stringValue != text {
                failed += 1
            }
        }
        latencies.sort()
        return LoadReport(
            completed: latencies.count, failed: failed, seconds: Double(now() - start) / 1e9, latencies: latencies)
    }

    /// Sends a request and returns its result; an error answer, or none within 20 s, throws.
    func request(_ method: String, _ params: JSONValue) throws -> JSONValue {
        let id = nextID.add(1, ordering: .relaxed).newValue
        send(.request(id: .number(id), method: method, params: params))
        let deadline = ContinuousClock.now + .seconds(20)
        while ContinuousClock.now < deadline {
            guard let line = readLine(until: deadline) else { break }
            switch JSONRPCMessage.parse(line) {
            case .success(.result(let answered, let result)) where answered == .number(id):
                return result
            case .success(.error(let answered, let error)) where answered == .number(id):
                throw SkillbusError(.internalError, "skillbus mcp answered \(method) with \(error)")
            default:
                continue  // a notification, or not ours
            }
        }
        throw SkillbusError(.timeout, "skillbus mcp did not answer \(method) within 20 s")
    }

    /// Writes one line; a server that is gone is noticed when its answer does not come.
    private func send(_ message: JSONRPCMessage) {
        let bytes = message.encoded() + [UInt8(ascii: "\n")]
        var offset = 0
        while offset < bytes.count {
            let written = bytes[offset...].withUnsafeBytes { write(inputFD, $0.baseAddress, $0.count) }
            if written < 0 && errno == EINTR { continue }
            guard written > 0 else { return }
            offset += written
        }
    }

    /// The next line of the server's output; nil at its end or at `deadline`.
    private func readLine(until deadline: ContinuousClock.Instant) -> [UInt8]? {
        pending.withLock { pending in
            var buffer = [UInt8](repeating: 0, count: 65_536)
            while true {
                if let newline = pending.firstIndex(of: UInt8(ascii: "\n")) {
                    defer { pending.removeSubrange(...newline) }
                    return Array(pending[..<newline])
                }
                guard ContinuousClock.now < deadline else { return nil }
                var descriptor = pollfd(fd: outputFD, events: Int16(POLLIN), revents: 0)
                guard poll(&descriptor, 1, 100) > 0 else { continue }
                let count = buffer.withUnsafeMutableBytes { read(outputFD, $0.baseAddress, $0.count) }
                if count < 0 && errno == EINTR { continue }
                guard count > 0 else { return nil }
                pending += buffer[..<count]
            }
        }
    }
}
