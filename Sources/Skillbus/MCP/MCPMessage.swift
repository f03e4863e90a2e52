/// A JSON-RPC 2.0 error object as MCP sends it: a code, a message for people, optional data.
public struct MCPError: Error, Sendable, Equatable, CustomStringConvertible {
    public var code: Int
    public var message: String
    public var data: JSONValue?

    public init(_ code: Int, _ message: String, data: JSONValue? = nil) {
        self.code = code
        self.message = message
        self.data = data
    }

    public var description: String { "JSON-RPC error \(code): \(message)" }

    /// The codes JSON-RPC 2.0 reserves, which MCP uses for protocol errors.
    public static let parseErrorCode = -32700
    public static let invalidRequestCode = -32600
    public static let methodNotFoundCode = -32601
    public static let invalidParamsCode = -32602
    public static let internalErrorCode = -32603

    public static func parseError(_ message: String) -> MCPError { MCPError(parseErrorCode, message) }
    public static func invalidRequest(_ message: String) -> MCPError { MCPError(invalidRequestCode, message) }
    public static func methodNotFound(_ method: String) -> MCPError {
        MCPError(methodNotFoundCode, "method not found: '\(method.prefix(128))'")
    }
    public static func invalidParams(_ message: String) -> MCPError { MCPError(invalidParamsCode, message) }
    public static func internalError(_ message: String) -> MCPError { MCPError(internalErrorCode, message) }

    public var json: JSONValue {
        var object: [String: JSONValue] = ["code": .number(Double(code)), "message": .string(message)]
        if let data { object["data"] = data }
        return .object(object)
    }
}

/// One JSON-RPC 2.0 message of an MCP connection. An id is a string or a number (kept as the JSON value
/// it came as, so the answer echoes it exactly); an error answer to a message whose id could not be read
/// carries `null`.
public enum MCPMessage: Sendable, Equatable {
    case request(id: JSONValue, method: String, params: JSONValue?)
    case notification(method: String, params: JSONValue?)
    case result(id: JSONValue, JSONValue)
    case error(id: JSONValue, MCPError)

    /// A message that cannot be read, and the error answer it gets: the id when one was readable, else null.
    public struct Unreadable: Error, Sendable, Equatable {
        public var id: JSONValue
        public var error: MCPError
    }

    /// Reads one message. The error says what was wrong, with the id to answer when there is one.
    public static func parse(_ bytes: [UInt8]) -> Result<MCPMessage, Unreadable> {
        let document: JSONValue
        do {
            document = try JSONValue(parsing: bytes)
        } catch {
            return .failure(Unreadable(id: .null, error: .parseError("not JSON: \(error.description)")))
        }
        return parse(document)
    }

    public static func parse(_ document: JSONValue) -> Result<MCPMessage, Unreadable> {
        guard let object = document.objectValue else {
            let what = document.arrayValue != nil ? "a batch (an array); send one message at a time" : document.typeName
            return .failure(
                Unreadable(id: .null, error: .invalidRequest("a message must be a JSON object, got \(what)")))
        }
        let id = object["id"]
        let answerID: JSONValue = id.map { isValidID($0) ? $0 : .null } ?? .null
        func refuse(_ message: String) -> Result<MCPMessage, Unreadable> {
            .failure(Unreadable(id: answerID, error: .invalidRequest(message)))
        }
        guard object["jsonrpc"] == "2.0" else { return refuse("'jsonrpc' must be \"2.0\"") }
        // Only an error answer to a message whose id was unreadable has a null id.
        if let id, !isValidID(id), !(id == .null && object["method"] == nil && object["error"] != nil) {
            return refuse("'id' must be a string or a number")
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
        guard let id else { return refuse("a message needs 'method', or 'id' with 'result' or 'error'") }
        if let result = object["result"] { return .success(.result(id: id, result)) }
        if let error = object["error"], let code = error["code"]?.intValue {
            let message = error["message"]?.stringValue ?? ""
            return .success(.error(id: id, MCPError(code, message, data: error["data"])))
        }
        return refuse("an answer needs 'result' or an 'error' with a numeric 'code'")
    }

    static func isValidID(_ id: JSONValue) -> Bool {
        switch id {
        case .string: true
        case .number(let value): value.isWholeNumber
        default: false
        }
    }

    public var json: JSONValue {
        var object: [String: JSONValue] = ["jsonrpc": "2.0"]
        switch self {
        case .request(let id, let method, let params):
            object["id"] = id
            object["method"] = .string(method)
            if let params { object["params"] = params }
        case .notification(let method, let params):
            object["method"] = .string(method)
            if let params { object["params"] = params }
        case .result(let id, let result):
            object["id"] = id
            object["result"] = result
        case .error(let id, let error):
            object["id"] = id
            object["error"] = error.json
        }
        return .object(object)
    }

    /// One line of the stdio transport (newline-delimited; JSON written compactly has no raw newline).
    public func encoded() -> [UInt8] { json.serialized() }
}
