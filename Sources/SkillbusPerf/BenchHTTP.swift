import Foundation
import Skillbus
import SkillbusCommands
import SkillbusTestSupport
import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

/// What the operator HTTP endpoint costs the bus: echo at 64 in flight on a coordinator with `--http`, while
/// a watcher scrapes `/metrics` every 100 ms and reads an `/events` stream, against the main coordinator
/// without it, in alternation.
struct HTTPFigures {
    var ratios: [Double] = []
    var best: (http: LoadReport, plain: LoadReport)?
    var cpuHTTP: [Double] = []
    var cpuPlain: [Double] = []
    /// Scrapes answered over every measurement, and the event-stream bytes read.
    var scrapes = 0
    var streamedBytes = 0
    var failures = 0

    var json: JSONValue {
        [
            "http": best?.http.json ?? .null, "plain": best?.plain.json ?? .null,
            "throughputRatio": .number(ratios.median), "throughputRatios": .array(ratios.map { .number($0) }),
            "coordinatorCpuMicrosPerRequest": ["http": .number(cpuHTTP.median), "plain": .number(cpuPlain.median)],
            "scrapes": .number(Double(scrapes)), "streamedBytes": .number(Double(streamedBytes)),
        ]
    }

    func printText() {
        print(
            String(
                format: "operator HTTP endpoint watched at 64 in flight: throughput with / without %.2fx (median of %d)",
                ratios.median, ratios.count))
        print(
            String(
                format: "  best %.0f tasks/s with it, %.0f without; coordinator CPU %.1f us/request with, %.1f without; "
                    + "%d scrapes, %d event-stream bytes read",
                best?.http.tasksPerSecond ?? 0, best?.plain.tasksPerSecond ?? 0, cpuHTTP.median, cpuPlain.median,
                scrapes, streamedBytes))
    }
}

/// A dashboard and a Prometheus at once, on threads of their own: one connection reads `/events`, another
/// scrapes `/metrics` every 100 ms, until `stop` (each read gives up after 2 s, so stopping never hangs).
final class HTTPWatcher: Sendable {
    private let stopping = Atomic<Bool>(false)
    private let counts = Mutex((scrapes: 0, streamed: 0))
    private let finished = DispatchGroup()

    init(port: UInt16) {
        for task in [streamEvents, scrapeMetrics] {
            finished.enter()
            Thread { [self] in
                task(port)
                finished.leave()
            }.start()
        }
    }

    /// Stops both threads; returns the scrapes answered and the event-stream bytes read.
    func stop() async -> (scrapes: Int, streamed: Int) {
        stopping.store(true, ordering: .releasing)
        await withCheckedContinuation { continuation in finished.notify(queue: .global()) { continuation.resume() } }
        return counts.withLock { $0 }
    }

    private func streamEvents(_ port: UInt16) {
        guard let fd = LoopbackTCP.connect(port, receiveTimeoutSeconds: 2) else { return }
        defer { close(fd) }
        Self.send(fd, "GET /events HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        var buffer = [UInt8](repeating: 0, count: 65536)
        while !stopping.load(ordering: .acquiring) {
            let count = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
            if count == 0 { return }
            if count > 0 { counts.withLock { $0.streamed += count } }
        }
    }

    private func scrapeMetrics(_ port: UInt16) {
        while !stopping.load(ordering: .acquiring) {
            if let fd = LoopbackTCP.connect(port, receiveTimeoutSeconds: 2) {
                Self.send(fd, "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
                var buffer = [UInt8](repeating: 0, count: 65536)
                var answer = 0
                while true {
                    let count = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
                    guard count > 0 else { break }
                    answer += count
                }
                close(fd)
                if answer > 0 { counts.withLock { $0.scrapes += 1 } }
            }
            usleep(100_000)
        }
    }

    private static func send(_ fd: Int32, _ text: String) {
        _ = Array(text.utf8).withUnsafeBytes { Glibc.send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
    }
}

extension Bench {
    /// Pairs in alternation, each side going first in turn; the ratio is the median of five pairs.
    func httpCost(main: Cluster, http: Cluster) async throws -> HTTPFigures {
        var figures = HTTPFigures()
        guard let port = http.http?.split(separator: ":").last.flatMap({ UInt16($0) }) else {
            figures.failures = 1
            return figures
        }
        func timed(_ cluster: Cluster) async throws -> (LoadReport, Double) {
            let before = PerfCommand.cpuSeconds(cluster.coordinator.pid)
            let report = try await measure(echoLoad, cluster.bus, requests: setup.requests, inFlight: 64)
            let cpu = PerfCommand.cpuSeconds(cluster.coordinator.pid) - before
            return (report, cpu / Double(max(report.completed, 1)) * 1e6)
        }
        let watcher = HTTPWatcher(port: port)
        _ = try await measure(echoLoad, http.bus, requests: min(2000, setup.requests), inFlight: 64)  // warm it
        for pair in 1...5 {
            note("operator HTTP: measuring with and without (pair \(pair) of 5)…")
            let httpFirst = pair % 2 == 1
            let first = try await timed(httpFirst ? http : main)
            let second = try await timed(httpFirst ? main : http)
            let ((on, cpuOn), (off, cpuOff)) = httpFirst ? (first, second) : (second, first)
            figures.failures += on.failed + off.failed
            figures.cpuHTTP.append(cpuOn)
            figures.cpuPlain.append(cpuOff)
            figures.ratios.append(PerfCommand.ratio(on.tasksPerSecond, off.tasksPerSecond))
            let best = figures.best
            figures.best = (
                best.map { $0.http.tasksPerSecond >= on.tasksPerSecond ? $0.http : on } ?? on,
                best.map { $0.plain.tasksPerSecond >= off.tasksPerSecond ? $0.plain : off } ?? off
            )
        }
        let watched = await watcher.stop()
        figures.scrapes = watched.scrapes
        figures.streamedBytes = watched.streamed
        // A watcher that saw nothing measured nothing: count it as a failure of the run.
        if watched.scrapes == 0 || watched.streamed == 0 { figures.failures += 1 }
        return figures
    }
}
