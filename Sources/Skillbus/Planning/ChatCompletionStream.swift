/// What a chat completion says, read chunk by chunk (`choices[0].delta` of each streamed chunk, or
/// `choices[0].message` of a whole answer): text for the user, or tool calls whose arguments arrive in
/// fragments. A plain value with no I/O; the planner feeds it and acts on what it returns.
///
/// The first thing that is not blank decides what the answer is: text makes it a reply, streamed on from
/// there; a tool call makes it calls. Text after a tool call, and tool calls after text has started, are
/// ignored (the reply is already on its way to the user).
struct ChatCompletionStream {
    enum Kind: Equatable { case undecided, reply, toolCalls }

    /// One tool call as it arrived: the function's name and its arguments' text, whole.
    struct ToolCall: Equatable, Sendable {
        var name: String
        var arguments: String
    }

    private(set) var kind = Kind.undecided
    /// Blank text before anything decided: it belongs to the reply if one follows.
    private var blank = ""
    /// By the `index` each fragment names, in the order they first appeared.
    private var calls: [(index: Int, call: ToolCall)] = []
    private(set) var finishReason: String?

    init() {}

    /// Takes one chunk; returns the text it adds to the reply (empty while the answer is undecided, or
    /// when it is tool calls).
    mutating func receive(_ chunk: JSONValue) throws(ChatEndpointError) -> String {
        guard chunk.objectValue != nil else {
            throw ChatEndpointError(.malformedResponse, "a chunk of the answer is \(chunk.typeName), not an object")
        }
        if let error = chunk["error"] {
            let message = error["message"]?.stringValue ?? error.stringValue ?? error.jsonString
            throw ChatEndpointError(.endpointError, "the endpoint reported an error in its answer: \(message)")
        }
        // A chunk without choices (usage figures at the end, say) adds nothing.
        guard let choice = chunk["choices"]?.arrayValue?.first else { return "" }
        if let reason = choice["finish_reason"]?.stringValue { finishReason = reason }
        guard let delta = choice["delta"] ?? choice["message"], delta != .null else { return "" }
        guard delta.objectValue != nil else {
            throw ChatEndpointError(.malformedResponse, "'choices[0].delta' is \(delta.typeName), not an object")
        }
        if let fragments = delta["tool_calls"], fragments != .null {
            guard let list = fragments.arrayValue else {
                throw ChatEndpointError(.malformedResponse, "'tool_calls' is \(fragments.typeName), not an array")
            }
            try take(list)
        }
        switch delta["content"] {
        case nil, .null?: return ""
        case .string(let text)?: return self.text(text)
        case let other?:
            throw ChatEndpointError(.malformedResponse, "'content' is \(other.typeName), not a string")
        }
    }

    /// The tool calls, in order, once the answer has ended.
    var toolCalls: [ToolCall] { kind == .toolCalls ? calls.map(\.call) : [] }

    private mutating func text(_ text: String) -> String {
        switch kind {
        case .reply: return text
        case .toolCalls: return ""
        case .undecided:
            guard text.contains(where: { !$0.isWhitespace }) else {
                blank += text
                return ""
            }
            kind = .reply
            defer { blank = "" }
            return blank + text
        }
    }

    private mutating func take(_ fragments: [JSONValue]) throws(ChatEndpointError) {
        guard !fragments.isEmpty, kind != .reply else { return }
        kind = .toolCalls
        for (position, fragment) in fragments.enumerated() {
            guard fragment.objectValue != nil else {
                throw ChatEndpointError(.malformedResponse, "a tool call is \(fragment.typeName), not an object")
            }
            // Streamed fragments name their call by index; a whole answer's calls may not.
            let index = fragment["index"]?.intValue ?? position
            let function = fragment["function"] ?? [:]
            let name = function["name"]?.stringValue ?? ""
            // A server may send the arguments as an object rather than as text.
            let arguments: String =
                switch function["arguments"] {
                case .string(let text)?: text
                case nil, .null?: ""
                case let other?: other.jsonString
                }
            if let slot = calls.firstIndex(where: { $0.index == index }) {
                if calls[slot].call.name.isEmpty { calls[slot].call.name = name }
                calls[slot].call.arguments += arguments
            } else {
                calls.append((index, ToolCall(name: name, arguments: arguments)))
            }
        }
    }
}
