import Foundation
import Skillbus
import SkillbusCommands
import SkillbusZMQ

/// What streamed output costs: `text.lines` sending the echo payload as three parts of partial output
/// against a plain `echo` of the same payload, at 1 and 64 in flight, in alternation (best of two each:
/// the machine's noise hits both alike). A skill that emits nothing pays nothing for the feature; this
/// is the price of using it.
struct OutputFigures {
    var echo: [Int: LoadReport] = [:]
    var lines: [Int: LoadReport] = [:]

    static let levels = [1, 64]

    func ratio(_ level: Int) -> Double {
        PerfCommand.ratio(lines[level]?.tasksPerSecond ?? 0, echo[level]?.tasksPerSecond ?? 0)
    }

    var failures: Int { (echo.values.map(\.failed) + lines.values.map(\.failed)).reduce(0, +) }

    var json: JSONValue {
        var object: [String: JSONValue] = [:]
        for level in Self.levels {
            object["inFlight\(level)"] = [
                "echo": echo[level]?.json ?? .null, "textLines3Parts": lines[level]?.json ?? .null,
                "throughputRatio": .number(ratio(level)),
            ]
        }
        return .object(object)
    }

    func printText() {
        for level in Self.levels {
            guard let echo = echo[level], let lines = lines[level] else { continue }
            print(
                String(
                    format: "output at %d in flight: 3 parts of partial output %.0f tasks/s (p50 %.3f ms), echo %.0f "
                        + "(p50 %.3f ms): %.2fx",
                    level, lines.tasksPerSecond, lines.percentileMs(0.5), echo.tasksPerSecond, echo.percentileMs(0.5),
                    ratio(level)))
        }
    }
}

extension Bench {
    func output(bus: String) async throws -> OutputFigures {
        note("output: text.lines with three parts of partial output against echo…")
        let payload = String(repeating: "x", count: max(1, setup.payloadBytes / 3))
        let text = [payload, payload, payload].joined(separator: "\n")
        let parameters = JSONValue.object(["text": .string(text)]).serialized()
        let lines = LoadGenerator.skillbus(session: "") { _ in ("text.lines", parameters) }
        var figures = OutputFigures()
        for level in OutputFigures.levels {
            let count = level == 1 ? min(setup.requests, 5000) : setup.requests
            for _ in 0..<2 {
                let echo = try await measure(echoLoad, bus, requests: count, inFlight: level)
                let streamed = try await measure(lines, bus, requests: count, inFlight: level)
                if (figures.echo[level]?.tasksPerSecond ?? -1) < echo.tasksPerSecond { figures.echo[level] = echo }
                if (figures.lines[level]?.tasksPerSecond ?? -1) < streamed.tasksPerSecond {
                    figures.lines[level] = streamed
                }
            }
        }
        return figures
    }
}
