import Foundation
import Testing

@testable import Skillbus
@testable import SkillbusCommands

/// Command skills without running anything: placeholders become whole arguments, a declaration is checked
/// when the config is read (every error naming its key), and the program and directory are found on disk.
@Suite("Command skills: templates and configuration")
struct CommandSkillConfigTests {
    @Test("a placeholder's value is one argument, whatever it holds; braces double to stay literal")
    func rendering() throws {
        let template = try CommandTemplate(["grep", "-c", "{pattern}", "--label={name}.txt", "{{x}}", "{n}", "{flag}", "{list}"])
        let tricky = "a b; rm -rf / $(whoami) \"q\" 'x' `y` | > *"
        let argv = template.render([
            "pattern": .string(tricky), "name": "my file", "n": 3, "flag": true, "list": [1, "two"],
        ])
        #expect(argv == ["grep", "-c", tricky, "--label=my file.txt", "{x}", "3", "true", #"[1,"two"]"#])
        #expect(template.parameterNames == ["pattern", "name", "n", "flag", "list"])
        // An absent optional parameter takes its whole argument with it.
        #expect(try CommandTemplate(["wc", "--limit={limit}", "-l"]).render([:]) == ["wc", "-l"])
        #expect(try CommandTemplate(["echo", "{x}"]).render(["x": 0.5]) == ["echo", "0.5"])
        #expect(try CommandTemplate(["echo", ""]).render([:]) == ["echo", ""])
    }

    @Test(
        "a template that cannot be read says where",
        arguments: [
            (["echo", "{open"], 1, "never closed"),
            (["echo", "x}"], 1, "'}' with no '{'"),
            (["echo", "a", "{}"], 2, "empty '{}'"),
            (["echo", "{a{b}"], 1, "'{' inside"),
        ])
    func badTemplates(arguments: [String], index: Int, reason: String) {
        #expect {
            try CommandTemplate(arguments)
        } throws: { error in
            guard let problem = error as? CommandTemplate.Problem else { return false }
            return problem.index == index && problem.reason.contains(reason)
        }
    }

    func load(_ commands: JSONValue, skills: JSONValue? = ["echo"]) throws -> WorkerConfiguration {
        let path = NSTemporaryDirectory() + "skillbus-commands-\(UUID().uuidString.prefix(8)).json"
        var object: [String: JSONValue] = ["version": 1, "name": "w", "commands": commands]
        object["skills"] = skills
        try Data(JSONValue.object(object).serialized())
            .write(to: URL(fileURLWithPath: path))
        defer { try? FileManager.default.removeItem(atPath: path) }
        return try WorkerConfiguration.load(path: path)
    }

    static let good: JSONValue = [
        "identifier": "sys.count", "description": "counts",
        "parameters": [["name": "path", "type": "string"], ["name": "top", "type": "integer", "required": false]],
        "command": ["wc", "-l", "{path}"],
    ]

    func with(_ changes: [String: JSONValue], removing: [String] = []) -> JSONValue {
        var object = Self.good.objectValue ?? [:]
        for (key, value) in changes { object[key] = value }
        for key in removing { object[key] = nil }
        return .object(object)
    }

    @Test("a good declaration reads with its defaults, and writes back the same")
    func reads() throws {
        let configuration = try load([Self.good])
        let spec = try #require(configuration.commands.first)
        #expect(spec.identifier == "sys.count" && spec.command == ["wc", "-l", "{path}"])
        #expect(spec.stdin == .none && spec.result == .text && spec.stream && spec.workingDirectory == ".")
        #expect(spec.environment == [] && spec.timeoutMs == 30_000 && !spec.needsConfirmation)
        #expect(spec.location.hasSuffix(": commands[0]"))
        let again = try load([spec.json])
        #expect(again.commands.first?.json == spec.json)
    }

    /// A change to the good declaration, and the message its refusal must contain.
    struct Refusal: Sendable, CustomTestStringConvertible {
        var changes: [String: JSONValue] = [:]
        var removing: [String] = []
        let message: String
        var testDescription: String { message }
    }

    static let refusals: [Refusal] = [
        Refusal(changes: ["command": []], message: "commands[0].command: missing"),
        Refusal(removing: ["command"], message: "commands[0].command: missing"),
        Refusal(removing: ["identifier"], message: "commands[0].identifier: missing"),
        Refusal(changes: ["identifier": "has space"], message: "commands[0].identifier: 'has space' is invalid"),
        Refusal(
            changes: ["command": ["{path}", "x"]], message: "commands[0].command[0]: the program cannot come from a parameter"),
        Refusal(
            changes: ["command": ["wc", "{paht}"]],
            message: "commands[0].command[1]: '{paht}' names no parameter (parameters: path, top)"),
        Refusal(
            changes: ["command": ["wc", "{path"]], message: "commands[0].command[1]: '{path' has a '{' that is never closed"),
        Refusal(changes: ["command": ["", "x"]], message: "commands[0].command[0]: the program is empty"),
        Refusal(changes: ["command": ["wc", 3]], message: "commands[0].command[1]: expected a string"),
        Refusal(changes: ["stdin": "yaml"], message: "commands[0].stdin: expected none or json, got 'yaml'"),
        Refusal(changes: ["result": "xml"], message: "commands[0].result: expected text or json, got 'xml'"),
        Refusal(
            changes: ["environment": ["HOME", "1BAD"]], message: "commands[0].environment[1]: '1BAD' is no variable name"),
        Refusal(
            changes: ["workingDirectory": "/etc"],
            message: "commands[0].workingDirectory: must be a path relative to the sandbox"),
        Refusal(changes: ["timeoutMs": 0], message: "commands[0].timeoutMs: must be from 1"),
        Refusal(
            changes: ["parameters": [["name": "a", "type": "colour"]]],
            message: "commands[0].parameters: parameter 'a' has an unknown type"),
        Refusal(
            changes: ["parameters": [["name": "a", "type": "string"], ["name": "a", "type": "string"]]],
            message: "declared twice"),
        Refusal(changes: ["shell": true], message: "commands[0].shell: unknown key"),
    ]

    @Test("a bad declaration is refused with its key", arguments: refusals)
    func refused(_ refusal: Refusal) {
        #expect {
            try load([with(refusal.changes, removing: refusal.removing)])
        } throws: { error in
            guard let error = error as? SkillbusError else { return false }
            return error.code == .invalidConfiguration && error.message.contains(refusal.message)
        }
    }

    @Test("identifiers are unique among a worker's command skills and its built-ins")
    func unique() throws {
        #expect(throws: SkillbusError.self) { try load([Self.good, Self.good]) }
        #expect {
            try load([with(["identifier": "echo"])])
        } throws: { error in
            (error as? SkillbusError)?.message.contains("commands[0].identifier: 'echo' is also a built-in") == true
        }
        // With no "skills" a worker offers every built-in: none of their names is free.
        #expect(throws: SkillbusError.self) { try load([with(["identifier": "sleep"])], skills: nil) }
        // With "skills": [] it offers none, and every name is.
        #expect(try load([with(["identifier": "sleep"])], skills: []).commands.count == 1)
    }

    func spec(_ changes: [String: JSONValue] = [:]) throws -> CommandSkillSpec {
        try #require(try load([with(changes)]).commands.first)
    }

    @Test("the program is found in PATH or by path; the working directory must stay inside the sandbox")
    func resolution() async throws {
        try await withTemporaryDirectory { root in
            let sandbox = root + "/sandbox"
            try FileManager.default.createDirectory(atPath: sandbox + "/sub", withIntermediateDirectories: true)
            try FileManager.default.createSymbolicLink(atPath: sandbox + "/out", withDestinationPath: root)
            let environment = ["PATH": "/usr/bin:/bin", "HOME": "/home/x", "SECRET": "s", "LANG": "C.UTF-8"]
            let skill = try CommandSkill(
                spec: try spec(["environment": ["LANG", "MISSING", "PATH"], "workingDirectory": "sub"]),
                sandbox: sandbox, environment: environment)
            #expect(skill.program.hasSuffix("/wc") && skill.program.hasPrefix("/"))
            #expect(skill.directory.hasSuffix("/sandbox/sub"))
            #expect(skill.environment == ["PATH=/usr/bin:/bin", "LANG=C.UTF-8"])
            #expect(skill.descriptor.defaultTimeoutMs == 30_000)

            func refusal(_ changes: [String: JSONValue], _ message: String) throws {
                let spec = try spec(changes)
                #expect {
                    try CommandSkill(spec: spec, sandbox: sandbox, environment: environment)
                } throws: { error in
                    guard let error = error as? SkillbusError else { return false }
                    return error.code == .invalidConfiguration && error.message.contains(message)
                }
            }
            try refusal(["command": ["no-such-program-here"]], "command[0]: program 'no-such-program-here' is not found in PATH")
            try refusal(["command": [.string(root + "/nothing.sh")]], "is not an executable file")
            try refusal(["workingDirectory": ".."], "workingDirectory: '..' is outside the sandbox")
            try refusal(["workingDirectory": "out"], "workingDirectory: 'out' is outside the sandbox")
            try refusal(["workingDirectory": "missing"], "'missing' does not exist in the sandbox")
        }
    }
}

@Suite("Partial output on the command line")
struct OutputLineTests {
    @Test("skillbus feed shows an invocation.output event as its parts")
    func feedLine() throws {
        let event = FeedEvent.invocationOutput(
            round: "r1", skill: "sys.countdown", agent: "gamma", dispatch: "i7",
            OutputBatch(first: 2, parts: [.text("1"), .json(["n": 0])]))
        let body = try JSONValue(parsing: event.encoded()[1])
        let line = FeedCommand.render(topic: event.topic, event: body)
        #expect(line.contains("invocation.output") && line.contains("gamma"))
        #expect(line.hasSuffix(#"sys.countdown i7 #2: 1 | {"n":0}  round r1"#))
    }

    @Test("a column is cut or filled with spaces to its width, as Foundation's padding was, by characters")
    func columns() throws {
        #expect("agent".padded(to: 8) == "agent   ")
        #expect("invocation.dispatched".padded(to: 18) == "invocation.dispatc")
        #expect("exact".padded(to: 5) == "exact")
        #expect("é✓".padded(to: 3) == "é✓ ")
        let event = FeedEvent.agentLeft(agent: "a", reason: "gone")
        let line = FeedCommand.render(topic: event.topic, event: try JSONValue(parsing: event.encoded()[1]))
        #expect(line.hasSuffix("  agent.left         a          gone"), "\(line)")
    }

    @Test("a text result that only repeats the streamed lines is recognised, with or without a final line end")
    func repeatedResult() {
        let printer = OutputPrinter(mode: .silent)
        #expect(!printer.alreadyShown(.text("a\nb\n"), of: "x"))
        let lines = OutputPrinter(mode: .lines(labelled: false))
        lines.receive("x", OutputBatch(first: 0, parts: [.text("a"), .text("b")]))
        #expect(lines.alreadyShown(.text("a\nb\n"), of: "x") && lines.alreadyShown(.text("a\nb"), of: "x"))
        #expect(!lines.alreadyShown(.text("a\nb\nc\n"), of: "x") && !lines.alreadyShown(.json([]), of: "x"))
    }
}
