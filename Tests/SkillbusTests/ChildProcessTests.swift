import Foundation
import SkillbusCommands
import Synchronization
import Testing

@testable import Skillbus

/// Programs started with posix_spawn (`ChildProcess`), and read line by line (`LineReader.run`).
@Suite("Child processes", .timeLimit(.minutes(1)))
struct ChildProcessTests {
    /// Runs `script` under /bin/sh through `LineReader.run`; returns its lines and how it ended.
    func run(
        _ script: String, environment: [String: String] = ["PATH": "/usr/bin:/bin"], directory: String? = nil
    ) async throws -> (lines: [String], termination: ChildProcess.Termination) {
        let lines = Mutex<[String]>([])
        let ended = AsyncStream.makeStream(of: Void.self)
        let child = try LineReader.run(
            "/bin/sh", ["-c", script], environment: environment, directory: directory, name: "child-test"
        ) { line in
            lines.withLock { $0.append(line) }
        } onEnd: {
            ended.continuation.finish()
        }
        let termination = await child.exited()
        for await _ in ended.stream {}  // every line read
        return (lines.withLock { $0 }, termination)
    }

    @Test("output and errors arrive line by line, the last line unterminated too; the exit code is kept")
    func linesAndExit() async throws {
        let (lines, termination) = try await run("echo one; echo two >&2; printf three; exit 3")
        #expect(Set(lines) == ["one", "two", "three"])
        #expect(termination == .exited(3))
        #expect(termination.status == 3)
    }

    @Test("a child killed by a signal says which; signalling it once it ended reaches nobody")
    func signalled() async throws {
        let child = try ChildProcess.spawn("/bin/sleep", ["30"], environment: [:])
        #expect(child.isRunning)
        child.signal(SIGKILL)
        #expect(await child.exited() == .signalled(SIGKILL))
        #expect(!child.isRunning)
        child.signal(SIGKILL)  // its pid may belong to another process by now: nothing is sent
        #expect(child.waitUntilExit() == .signalled(SIGKILL))
    }

    @Test("exactly the environment given, in the directory given, with standard input empty")
    func environmentAndDirectory() async throws {
        let (lines, termination) = try await run(
            "echo \"$GREETING\"; echo \"${HOME:-no home}\"; pwd; cat; echo end", environment: ["GREETING": "hello"],
            directory: "/tmp")
        #expect(termination == .exited(0))
        #expect(lines == ["hello", "no home", "/tmp", "end"])
    }

    @Test("the child holds no descriptor of ours beyond its three")
    func descriptorsClosed() async throws {
        // Without close-on-exec: only the child's own closing keeps these out.
        var held: [Int32] = [-1, -1]
        try #require(pipe(&held) == 0)
        defer { for end in held { close(end) } }
        let probes = held.map { "[ -e /proc/$$/fd/\($0) ] && echo open \($0); [ -e /proc/$$/fd/2 ] && echo stderr" }
        let (lines, _) = try await run(probes.joined(separator: "; "))
        #expect(lines == ["stderr", "stderr"], "\(held) seen open in the child")
    }

    @Test("a program that cannot be started is an error that names it")
    func missingProgram() {
        #expect {
            _ = try ChildProcess.spawn("/nonexistent/program", [], environment: [:])
        } throws: { error in
            "\(error)".contains("/nonexistent/program")
        }
        #expect(ChildProcess.run("/nonexistent/program", []) == nil)
    }

    /// Foundation's Process.run crashed now and then here (it read /proc/self/fd past glibc's buffer): many
    /// descriptors open, many children started from several threads at once.
    @Test("a hundred children started while hundreds of descriptors are open all end well")
    func manyDescriptors() async throws {
        let open = Array(try ChildProcess.pipes(300).joined())
        defer { for descriptor in open { close(descriptor) } }
        try await withThrowingTaskGroup(of: ChildProcess.Termination?.self) { group in
            for _ in 0..<100 {
                group.addTask { try await ChildProcess.spawn("/bin/true", [], environment: [:]).exited() }
            }
            for try await termination in group { #expect(termination == .exited(0)) }
        }
    }
}
