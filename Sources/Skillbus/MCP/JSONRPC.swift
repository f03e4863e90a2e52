/// JSON-RPC 2.0 messages, as MCP carries them in both directions (`skillbus mcp` serving, a worker's mounts
/// calling): one JSON object per message; MCP has no batches since its 2025-06-18 revision, and we send
/// none. Parsed and written with the project's `JSONValue`, so any byte transport (a pipe's lines, an HTTP
/// body, an SSE event's data) can carry them.
public enum JSONRPCMessage: Sendable, Equatable {
    case request(id: JSONRPCID, method: String, params: JSONValue?)
    case notification(method: String, params: JSONValue?)
    case result(id: JSONRPCID, result: JSONValue)
    /// `id` is nil (written `null`) when the peer's message had no id that could be read.
    case error(id: JSONRPCID?, JSONRPCError)

    /// The id a request or an answer carries; nil for a notification.
    public var id: JSONRPCID? {
        switch self {
        case .request(let id, _, _), .result(let id, _): id
        case .error(let id, _): id
        case .notification: nil
        }
    }

    public var json: JSONValue {
        var object: [String: JSONValue] = ["jsonrpc": "2.0"]
        switch self {
        case .request(let id, let method, let params):
            object["id"] = id.json
            object["method"] = .string(method)
            if let params { object["params"] = params }
        case .notification(let method, let params):
            object["method"] = .string(method)
            if let params { object["params"] = params }
        case .result(let id, let result):
            object["id"] = id.json
            object["result"] = result
        case .error(let id, let error):
            object["id"] = id?.json ?? .null
            object["error"] = error.json
        }
        return .object(object)
    }

    /// Compact JSON without a line break, so a newline-delimited stream carries it as is.
    public func encoded() -> [UInt8] { json.serialized() }

    /// A message that cannot be read, and the error answer it gets: with its id when one was readable.
    public struct Unreadable: Error, Sendable, Equatable {
        public var id: JSONRPCID?
        public var error: JSONRPCError
    }

    /// Reads one message; the failure says what was wrong, with the id to answer when there is one.
    public static func parse(_ bytes: [UInt8]) -> Result<JSONRPCMessage, Unreadable> {
        let document: JSONValue
        do {
            document = try JSONValue(parsing: bytes)
        } catch {
            return .failure(Unreadable(id: nil, error: .parseError("not JSON: \(error.description)")))
        }
        return parse(document)
    }

    public static func parse(_ document: JSONValue) -> Result<JSONRPCMessage, Unreadable> {
        guard let object = document.objectValue else {
            let what = document.arrayValue != nil ? "a batch (an array); send one message at a time" : document.typeName
            return .failure(Unreadable(id: nil, error: .invalidRequest("a message must be a JSON object, got \(what)")))
        }
        let rawID = object["id"]
        let id = rawID.flatMap(JSONRPCID.init(json:))
        func refuse(_ message: String) -> Result<JSONRPCMessage, Unreadable> {
            .failure(Unreadable(id: id, error: .invalidRequest(message)))
        }
        guard object["jsonrpc"] == "2.0" else { return refuse("'jsonrpc' must be \"2.0\"") }
        // Only an error answer to a message whose id was unreadable has a null id.
        if let rawID, id == nil, !(rawID == .null && object["method"] == nil && object["error"] != nil) {
            return refuse("'id' must be a string or an integer")
        }
        let params = object["params"]
        if let params, params.objectValue == nil, params.arrayValue == nil {
            return refuse("'params' must be an object")
        }
        if let method = object["method"] {
            guard let name = method.stringValue, !name.isEmpty else {
                return refuse("'method' must be a non-empty string")
            }
            guard let id else { return .success(.notification(method: name, params: params)) }
            return .success(.request(id: id, method: name, params: params))
        }
        // An answer to a request of ours.
        if let result = object["result"] {
            guard let id else { return refuse("a result needs the request's 'id'") }
            guard object["error"] == nil else { return refuse("an answer holds 'result' or 'error', not both") }
            return .success(.result(id: id, result: result))
        }
        if let error = object["error"] {
            guard let code = error["code"]?.intValue, let message = error["message"]?.stringValue else {
                return refuse("'error' needs an integer 'code' and a string 'message'")
            }
            return .success(.error(id: id, JSONRPCError(code: code, message: message, data: error["data"])))
        }
        return refuse("a message needs 'method', 'result' or 'error'")
    }

    /// `parse`, for a reader that only needs to know what was wrong.
    public init(parsing bytes: [UInt8]) throws(JSONRPCError) {
        self = try Self.parse(bytes).mapError(\.error).get()
    }
}

/// A request's id: JSON-RPC allows a string or a number; an integer is what MCP peers send (a fraction is
/// refused as unreadable).
public enum JSONRPCID: Sendable, Hashable, CustomStringConvertible, ExpressibleByIntegerLiteral,
    ExpressibleByStringLiteral
{
    case number(Int)
    case string(String)

    public var json: JSONValue {
        switch self {
        case .number(let number): .number(Double(number))
        case .string(let text): .string(text)
        }
    }

    public init?(json: JSONValue) {
        if let number = json.intValue {
            self = .number(number)
        } else if let text = json.stringValue {
            self = .string(text)
        } else {
            return nil
        }
    }

    public init(integerLiteral value: Int) { self = .number(value) }
    public init(stringLiteral value: String) { self = .string(value) }

    /// As JSON writes it: a string quoted, so that an error message shows which kind it was.
    public var description: String { json.jsonString }
}

/// The `error` member of a response: a code, a message for people, optional data.
public struct JSONRPCError: Error, Sendable, Equatable, CustomStringConvertible {
    public var code: Int
    public var message: String
    public var data: JSONValue?

    public init(code: Int, message: String, data: JSONValue? = nil) {
        self.code = code
        self.message = message
        self.data = data
    }

    /// The codes JSON-RPC 2.0 reserves, which MCP uses for protocol errors.
    public static let parseErrorCode = -32700
    public static let invalidRequestCode = -32600
    public static let methodNotFoundCode = -32601
    public static let invalidParamsCode = -32602
    public static let internalErrorCode = -32603

    public static func parseError(_ message: String) -> JSONRPCError { .init(code: parseErrorCode, message: message) }
    public static func invalidRequest(_ message: String) -> JSONRPCError {
        .init(code: invalidRequestCode, message: message)
    }
    public static func methodNotFound(_ method: String) -> JSONRPCError {
        .init(code: methodNotFoundCode, message: "method not found: '\(method.prefix(128))'")
    }
    public static func invalidParams(_ message: String) -> JSONRPCError {
        .init(code: invalidParamsCode, message: message)
    }
    public static func internalError(_ message: String) -> JSONRPCError {
        .init(code: internalErrorCode, message: message)
    }

    public var json: JSONValue {
        var object: [String: JSONValue] = ["code": .number(Double(code)), "message": .string(message)]
        if let data { object["data"] = data }
        return .object(object)
    }

    public var description: String { "JSON-RPC error \(code): \(message)" }
}
