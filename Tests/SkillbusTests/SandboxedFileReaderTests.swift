import Foundation
import Testing

@testable import Skillbus

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// A throwaway directory tree: `base/root` is the sandbox, `base/outside` holds files it must not reach.
/// Tests create one each and remove it in a `defer`, so parallel tests never share state.
private struct Fixture {
    let base: String
    let root: String
    let outside: String

    init() throws {
        base = (NSTemporaryDirectory() as NSString)
            .appendingPathComponent("skillbus-sandbox-\(UUID().uuidString)")
        root = base + "/root"
        outside = base + "/outside"
        try FileManager.default.createDirectory(atPath: root + "/sub/dir", withIntermediateDirectories: true)
        try FileManager.default.createDirectory(atPath: outside, withIntermediateDirectories: true)
        try write("hello sandbox\n", to: root + "/notes.txt")
        try write("nested ✓", to: root + "/sub/dir/deep.txt")
        try write("top secret", to: outside + "/secret.txt")
    }

    func write(_ text: String, to path: String) throws {
        try write(Data(text.utf8), to: path)
    }

    func write(_ data: Data, to path: String) throws {
        try data.write(to: URL(fileURLWithPath: path))
    }

    func symlink(_ path: String, to destination: String) throws {
        try FileManager.default.createSymbolicLink(atPath: path, withDestinationPath: destination)
    }

    func remove() {
        try? FileManager.default.removeItem(atPath: base)
    }
}

/// Closures infer an untyped `throws`, so the error is cast back; any other error is a test failure.
private func sandboxError(_ body: () throws -> String) -> SandboxError? {
    do {
        let text = try body()
        Issue.record("expected an error, read \(text.utf8.count) bytes")
        return nil
    } catch let error as SandboxError {
        return error
    } catch {
        Issue.record("unexpected error type: \(error)")
        return nil
    }
}

@Suite("SandboxedFileReader")
struct SandboxedFileReaderTests {
    @Test(
        "reads files inside the sandbox",
        arguments: [
            ("notes.txt", "hello sandbox\n"),
            ("./notes.txt", "hello sandbox\n"),
            ("sub/dir/deep.txt", "nested ✓"),
            ("sub//dir/./deep.txt", "nested ✓"),
            ("sub/dir/../../notes.txt", "hello sandbox\n"),
        ]
    )
    func readsInside(path: String, expected: String) throws {
        let fixture = try Fixture()
        defer { fixture.remove() }
        let reader = SandboxedFileReader(root: fixture.root)
        #expect(try reader.read(path) == expected)
    }

    @Test("accepts an absolute path only when it lies inside the root")
    func absolutePaths() throws {
        let fixture = try Fixture()
        defer { fixture.remove() }
        let reader = SandboxedFileReader(root: fixture.root)
        #expect(try reader.read(fixture.root + "/notes.txt") == "hello sandbox\n")
        let error = sandboxError { try reader.read(fixture.outside + "/secret.txt") }
        #expect(error?.kind == .escapesSandbox)
        #expect(sandboxError { try reader.read("/etc/hostname") }?.kind == .escapesSandbox)
    }

    @Test(
        "refuses '..' escapes whether or not the target exists",
        arguments: [
            "../outside/secret.txt",
            "../outside/missing.txt",
            "sub/../../outside/secret.txt",
            "../../../../../../../../etc/passwd",
            "..",
        ]
    )
    func dotDotEscapes(path: String) throws {
        let fixture = try Fixture()
        defer { fixture.remove() }
        let error = sandboxError { try SandboxedFileReader(root: fixture.root).read(path) }
        #expect(error?.kind == .escapesSandbox)
        #expect(error?.path == path)
        #expect(error?.message.contains("'\(path)'") == true)
    }

    @Test("refuses symlinks that resolve outside the sandbox")
    func symlinkEscapes() throws {
        let fixture = try Fixture()
        defer { fixture.remove() }
        try fixture.symlink(fixture.root + "/leak.txt", to: fixture.outside + "/secret.txt")
        try fixture.symlink(fixture.root + "/relative-leak.txt", to: "../outside/secret.txt")
        try fixture.symlink(fixture.root + "/sub/outdir", to: fixture.outside)
        let reader = SandboxedFileReader(root: fixture.root)
        for path in ["leak.txt", "relative-leak.txt", "sub/outdir/secret.txt", "sub/outdir", "sub/outdir/missing"] {
            let error = sandboxError { try reader.read(path) }
            #expect(error?.kind == .escapesSandbox, "path \(path)")
            #expect(error?.message.contains("'\(path)'") == true, "path \(path)")
        }
    }

    @Test("allows symlinks that stay inside the sandbox")
    func symlinkInside() throws {
        let fixture = try Fixture()
        defer { fixture.remove() }
        try fixture.symlink(fixture.root + "/alias.txt", to: "sub/dir/deep.txt")
        try fixture.symlink(fixture.root + "/sub/up", to: fixture.root)
        let reader = SandboxedFileReader(root: fixture.root)
        #expect(try reader.read("alias.txt") == "nested ✓")
        #expect(try reader.read("sub/up/notes.txt") == "hello sandbox\n")
    }

    @Test("works when the root itself is reached through a symlink")
    func symlinkedRoot() throws {
        let fixture = try Fixture()
        defer { fixture.remove() }
        let linkedRoot = fixture.base + "/root-link"
        try fixture.symlink(linkedRoot, to: fixture.root)
        let reader = SandboxedFileReader(root: linkedRoot)
        #expect(try reader.read("notes.txt") == "hello sandbox\n")
        #expect(try reader.read(linkedRoot + "/notes.txt") == "hello sandbox\n")
        #expect(try reader.read(fixture.root + "/notes.txt") == "hello sandbox\n")
        #expect(sandboxError { try reader.read("../outside/secret.txt") }?.kind == .escapesSandbox)
    }

    @Test("reports missing files", arguments: ["missing.txt", "sub/missing/file.txt", "notes.txt/child"])
    func notFound(path: String) throws {
        let fixture = try Fixture()
        defer { fixture.remove() }
        let error = sandboxError { try SandboxedFileReader(root: fixture.root).read(path) }
        #expect(error?.kind == .notFound)
        #expect(error?.message == "'\(path)' does not exist")
    }

    @Test("reports dangling symlinks inside the sandbox as missing")
    func danglingSymlink() throws {
        let fixture = try Fixture()
        defer { fixture.remove() }
        try fixture.symlink(fixture.root + "/dangling", to: "nowhere.txt")
        let error = sandboxError { try SandboxedFileReader(root: fixture.root).read("dangling") }
        #expect(error?.kind == .notFound)
    }

    @Test("refuses directories", arguments: ["sub", "sub/dir/", "", ".", "sub/.."])
    func directories(path: String) throws {
        let fixture = try Fixture()
        defer { fixture.remove() }
        let error = sandboxError { try SandboxedFileReader(root: fixture.root).read(path) }
        #expect(error?.kind == .notAFile)
        #expect(error?.message == "'\(path)' is a directory, not a file")
    }

    @Test("refuses FIFOs without blocking")
    func fifo() throws {
        let fixture = try Fixture()
        defer { fixture.remove() }
        #expect(mkfifo(fixture.root + "/pipe", 0o600) == 0)
        let error = sandboxError { try SandboxedFileReader(root: fixture.root).read("pipe") }
        #expect(error?.kind == .notAFile)
        #expect(error?.message == "'pipe' is not a regular file")
    }

    @Test("enforces the size limit")
    func tooLarge() throws {
        let fixture = try Fixture()
        defer { fixture.remove() }
        try fixture.write(String(repeating: "x", count: 10), to: fixture.root + "/ten.txt")
        try fixture.write(String(repeating: "x", count: 11), to: fixture.root + "/eleven.txt")
        let reader = SandboxedFileReader(root: fixture.root, maxBytes: 10)
        #expect(try reader.read("ten.txt").count == 10)
        let error = sandboxError { try reader.read("eleven.txt") }
        #expect(error?.kind == .tooLarge)
        #expect(error?.message == "'eleven.txt' is 11 bytes, which exceeds the limit of 10 bytes")
    }

    @Test("reads files larger than one read chunk")
    func largeFile() throws {
        let fixture = try Fixture()
        defer { fixture.remove() }
        let text = String(repeating: "0123456789abcdef", count: 20_000)
        try fixture.write(text, to: fixture.root + "/big.txt")
        #expect(try SandboxedFileReader(root: fixture.root).read("big.txt") == text)
    }

    @Test("reads empty files")
    func emptyFile() throws {
        let fixture = try Fixture()
        defer { fixture.remove() }
        try fixture.write("", to: fixture.root + "/empty.txt")
        #expect(try SandboxedFileReader(root: fixture.root, maxBytes: 0).read("empty.txt") == "")
    }

    @Test(
        "refuses content that is not UTF-8",
        arguments: [
            [0xFF, 0xFE, 0x41],
            [0x68, 0x69, 0xC3],
            [0xC0, 0xAF],
            [0xED, 0xA0, 0x80],
        ] as [[UInt8]]
    )
    func notUTF8(bytes: [UInt8]) throws {
        let fixture = try Fixture()
        defer { fixture.remove() }
        try fixture.write(Data(bytes), to: fixture.root + "/binary.bin")
        let error = sandboxError { try SandboxedFileReader(root: fixture.root).read("binary.bin") }
        #expect(error?.kind == .notUTF8)
        #expect(error?.message == "'binary.bin' is not valid UTF-8 text")
    }

    @Test("refuses paths containing NUL")
    func nulInPath() throws {
        let fixture = try Fixture()
        defer { fixture.remove() }
        let error = sandboxError { try SandboxedFileReader(root: fixture.root).read("notes.txt\0/../x") }
        #expect(error?.kind == .notFound)
    }

    @Test("reports a missing sandbox root")
    func missingRoot() throws {
        let fixture = try Fixture()
        defer { fixture.remove() }
        let error = sandboxError { try SandboxedFileReader(root: fixture.base + "/nope").read("notes.txt") }
        #expect(error?.kind == .notFound)
        #expect(error?.message.contains("sandbox root") == true)
    }

    @Test("reports unreadable files", .enabled(if: getuid() != 0, "root can read any file"))
    func unreadable() throws {
        let fixture = try Fixture()
        defer { fixture.remove() }
        let path = fixture.root + "/locked.txt"
        try fixture.write("locked", to: path)
        #expect(chmod(path, 0) == 0)
        let error = sandboxError { try SandboxedFileReader(root: fixture.root).read("locked.txt") }
        #expect(error?.kind == .unreadable)
    }
}
