import Foundation
import Skillbus

/// One option a command declares. Options without `valueName` are flags.
public struct OptionSpec: Sendable {
    public var name: String
    public var valueName: String?
    public var help: String
    public var repeatable = false

    public init(_ name: String, value valueName: String? = nil, help: String, repeatable: Bool = false) {
        self.name = name
        self.valueName = valueName
        self.help = help
        self.repeatable = repeatable
    }
}

/// A command's declaration: help text is generated from it, never written per command.
public struct CommandSpec: Sendable {
    public var name: String
    public var abstract: String
    public var discussion: String
    /// Positional arguments for the usage line, e.g. `SKILL [key=value …]`.
    public var positionals: String
    public var options: [OptionSpec]
    public var hidden = false
    /// The program the usage line starts with: `skillbus`, or a tool of its own (whose `name` is then empty).
    public var program = "skillbus"

    public init(
        name: String, abstract: String, discussion: String, positionals: String = "", options: [OptionSpec],
        hidden: Bool = false, program: String = "skillbus"
    ) {
        self.program = program
        self.name = name
        self.abstract = abstract
        self.discussion = discussion
        self.positionals = positionals
        self.options = options + [OptionSpec("--help", help: "Show this help (also -h).")]
        self.hidden = hidden
    }

    public var usage: String {
        let options = self.options.filter { $0.name != "--help" }.map { option in
            "[\(option.name)\(option.valueName.map { " \($0)" } ?? "")]"
        }
        return ([program] + (name.isEmpty ? [] : [name]) + (positionals.isEmpty ? [] : [positionals]) + options)
            .joined(separator: " ")
    }

    public var help: String {
        var lines = ["OVERVIEW: \(abstract)", "", "USAGE: \(usage)", ""]
        if !discussion.isEmpty { lines += [discussion, ""] }
        lines.append("OPTIONS:")
        for option in options {
            let left = option.name + (option.valueName.map { " \($0)" } ?? "")
            let padding = String(repeating: " ", count: max(2, 28 - left.count))
            lines.append("  \(left)\(padding)\(option.help)\(option.repeatable ? " (repeatable)" : "")")
        }
        return lines.joined(separator: "\n")
    }

    /// Splits `arguments` into known options and positionals; anything else is a usage error.
    public func parse(_ arguments: [String]) throws(UsageError) -> ParsedArguments {
        var parsed = ParsedArguments()
        var index = 0
        var onlyPositionals = false
        while index < arguments.count {
            let argument = arguments[index]
            index += 1
            if onlyPositionals || !argument.hasPrefix("--") {
                // A command whose usage names no positionals takes none.
                guard !positionals.isEmpty else { throw UsageError(self, "unexpected argument '\(argument)'") }
                parsed.positionals.append(argument)
                continue
            }
            if argument == "--" {
                onlyPositionals = true
                continue
            }
            var name = argument
            var inlineValue: String?
            if let equals = argument.firstIndex(of: "=") {
                name = String(argument[..<equals])
                inlineValue = String(argument[argument.index(after: equals)...])
            }
            guard let option = options.first(where: { $0.name == name }) else {
                throw UsageError(self, "unknown option '\(name)'")
            }
            if option.valueName == nil {
                guard inlineValue == nil else { throw UsageError(self, "option '\(name)' takes no value") }
                parsed.flags.insert(name)
                continue
            }
            let value: String
            if let inlineValue {
                value = inlineValue
            } else {
                guard index < arguments.count else { throw UsageError(self, "option '\(name)' needs a value") }
                value = arguments[index]
                index += 1
            }
            if parsed.values[name] != nil && !option.repeatable {
                throw UsageError(self, "option '\(name)' is given twice")
            }
            parsed.values[name, default: []].append(value)
        }
        return parsed
    }
}

/// What the user typed, sorted by option.
public struct ParsedArguments: Sendable {
    public var values: [String: [String]] = [:]
    public var flags: Set<String> = []
    public var positionals: [String] = []

    public func value(_ name: String) -> String? { values[name]?.last }
    public func all(_ name: String) -> [String] { values[name] ?? [] }
    public func flag(_ name: String) -> Bool { flags.contains(name) }
}

/// A mistake on the command line: exit code 2 with the command's usage.
public struct UsageError: Error, Sendable, CustomStringConvertible {
    public let message: String
    public let usage: String
    public let program: String

    public init(_ spec: CommandSpec, _ message: String) {
        self.message = message
        self.usage = spec.usage
        self.program = spec.program
    }

    public var description: String { "error: \(message)\nusage: \(usage)\nSee '\(program) help' for more." }
}

extension ParsedArguments {
    /// An integer option, checked against a lower bound, with the option named in the error.
    public func int(_ name: String, minimum: Int, maximum: Int = 1 << 40, in spec: CommandSpec) throws(UsageError)
        -> Int?
    {
        guard let text = value(name) else { return nil }
        guard let number = Int(text), (minimum...maximum).contains(number) else {
            throw UsageError(spec, "option '\(name)' must be an integer from \(minimum) to \(maximum), got '\(text)'")
        }
        return number
    }

    func double(_ name: String, minimum: Double, maximum: Double, in spec: CommandSpec) throws(UsageError) -> Double? {
        guard let text = value(name) else { return nil }
        guard let number = Double(text), (minimum...maximum).contains(number) else {
            throw UsageError(spec, "option '\(name)' must be a number from \(minimum) to \(maximum), got '\(text)'")
        }
        return number
    }

    func endpoint(_ name: String, in spec: CommandSpec) throws(UsageError) -> String? {
        guard let text = value(name) else { return nil }
        if let problem = Endpoint.problem(text) { throw UsageError(spec, "option '\(name)': \(problem)") }
        return text
    }

    /// A comma list of endpoints (the coordinators of a group), each checked as `endpoint` checks one.
    func endpoints(_ name: String, in spec: CommandSpec) throws(UsageError) -> String? {
        guard let text = value(name) else { return nil }
        if let problem = Endpoint.listProblem(text) { throw UsageError(spec, "option '\(name)': \(problem)") }
        return text
    }
}
