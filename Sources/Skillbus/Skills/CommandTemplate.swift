/// A command skill's argument list with `{name}` placeholders for its parameters. Each argument becomes
/// exactly one argv element: a value with spaces, quotes or `;` stays one argument and no shell ever sees
/// it. `{{` and `}}` are literal braces. An argument naming a parameter the call does not have (optional,
/// no default) is left out whole, so `--limit={limit}` disappears with its parameter.
public struct CommandTemplate: Sendable, Equatable {
    enum Piece: Sendable, Equatable {
        case text(String)
        case parameter(String)
    }

    let arguments: [[Piece]]

    /// Why an argument cannot be read, with its index.
    public struct Problem: Error, Equatable, CustomStringConvertible {
        public let index: Int
        public let reason: String
        public var description: String { reason }
    }

    public init(_ arguments: [String]) throws(Problem) {
        var parsed: [[Piece]] = []
        for (index, argument) in arguments.enumerated() {
            parsed.append(try Self.parse(argument, index: index))
        }
        self.arguments = parsed
    }

    private static func parse(_ argument: String, index: Int) throws(Problem) -> [Piece] {
        func problem(_ reason: String) -> Problem { Problem(index: index, reason: "'\(argument)' \(reason)") }
        let characters = Array(argument)
        var pieces: [Piece] = []
        var text = ""
        var position = 0
        while position < characters.count {
            let character = characters[position]
            let following = position + 1 < characters.count ? characters[position + 1] : nil
            switch (character, following) {
            case ("{", "{"), ("}", "}"):
                text.append(character)
                position += 2
            case ("}", _):
                throw problem("has a '}' with no '{' (write '}}' for a brace)")
            case ("{", _):
                guard let close = characters[(position + 1)...].firstIndex(of: "}") else {
                    throw problem("has a '{' that is never closed (write '{{' for a brace)")
                }
                let name = String(characters[(position + 1)..<close])
                guard !name.isEmpty else { throw problem("has an empty '{}'") }
                guard !name.contains("{") else { throw problem("has a '{' inside a placeholder") }
                if !text.isEmpty { pieces.append(.text(text)) }
                text = ""
                pieces.append(.parameter(name))
                position = close + 1
            default:
                text.append(character)
                position += 1
            }
        }
        if !text.isEmpty || pieces.isEmpty { pieces.append(.text(text)) }
        return pieces
    }

    /// Every parameter the arguments name, in order of first use.
    public var parameterNames: [String] {
        var names: [String] = []
        for case .parameter(let name) in arguments.joined() where !names.contains(name) { names.append(name) }
        return names
    }

    /// Whether argument `index` names any parameter.
    func hasPlaceholder(_ index: Int) -> Bool {
        arguments[index].contains { if case .parameter = $0 { true } else { false } }
    }

    /// The argv for these (validated, defaulted) parameters.
    public func render(_ parameters: [String: JSONValue]) -> [String] {
        arguments.compactMap { pieces -> String? in
            var argument = ""
            for piece in pieces {
                switch piece {
                case .text(let text): argument += text
                case .parameter(let name):
                    guard let value = parameters[name], value != .null else { return nil }
                    argument += Self.text(of: value)
                }
            }
            return argument
        }
    }

    /// A value as one argument: a string as it is, anything else as JSON (`3`, `0.5`, `true`, `[1,2]`).
    static func text(of value: JSONValue) -> String {
        if case .string(let text) = value { return text }
        return value.jsonString
    }
}
