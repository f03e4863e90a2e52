/// JSON-RPC 2.0 messages, as MCP carries them (one JSON object per message; MCP has no batches since its
/// 2025-06-18 revision, and we send none). Parsed and written with the project's `JSONValue`, so any byte
/// transport (a pipe's lines, an HTTP body, an SSE event's data) can carry them.
public enum JSONRPCMessage: Sendable, Equatable {
    case request(id: JSONRPCID, method: String, params: JSONValue?)
    case notification(method: String, params: JSONValue?)
    case result(id: JSONRPCID, result: JSONValue)
    /// `id` is nil when the peer could not even read the request's id (a parse error).
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

    /// Compact JSON without a line break (so a newline-delimited stream can carry it as is).
    public func serialized() -> [UInt8] { json.serialized() }

    public init(parsing bytes: [UInt8]) throws(JSONRPCError) {
        let value: JSONValue
        do {
            value = try JSONValue(parsing: bytes)
        } catch {
            throw JSONRPCError(.parseError, "not JSON: \(error)")
        }
        try self.init(json: value)
    }

    /// Reads one message; a well-formed JSON value that is no JSON-RPC 2.0 message is `invalid_request`,
    /// with what is wrong in the message.
    public init(json: JSONValue) throws(JSONRPCError) {
        func invalid(_ reason: String) -> JSONRPCError { JSONRPCError(.invalidRequest, reason) }
        guard let object = json.objectValue else {
            throw invalid(json.arrayValue != nil ? "batches are not supported" : "a message must be a JSON object")
        }
        guard object["jsonrpc"] == "2.0" else { throw invalid("'jsonrpc' must be \"2.0\"") }
        let id: JSONRPCID?
        switch object["id"] {
        case nil: id = nil
        case .null?: id = nil
        case let value?:
            guard let parsed = JSONRPCID(json: value) else { throw invalid("'id' must be a string or an integer") }
            id = parsed
        }
        let params = object["params"]
        if let params, params.objectValue == nil, params.arrayValue == nil {
            throw invalid("'params' must be an object or an array")
        }
        if let method = object["method"] {
            guard let name = method.stringValue else { throw invalid("'method' must be a string") }
            if let id {
                self = .request(id: id, method: name, params: params)
            } else if object["id"] == .null {
                throw invalid("a request's 'id' must not be null")
            } else {
                self = .notification(method: name, params: params)
            }
        } else if let result = object["result"] {
            guard let id else { throw invalid("a result needs the request's 'id'") }
            guard object["error"] == nil else { throw invalid("a response holds 'result' or 'error', not both") }
            self = .result(id: id, result: result)
        } else if let error = object["error"] {
            guard let code = error["code"]?.intValue, let message = error["message"]?.stringValue else {
                throw invalid("'error' needs an integer 'code' and a string 'message'")
            }
            self = .error(id: id, JSONRPCError(code: code, message: message, data: error["data"]))
        } else {
            throw invalid("a message needs 'method', 'result' or 'error'")
        }
    }
}

/// A request's id: JSON-RPC allows a string or a number (we send integers).
public enum JSONRPCID: Sendable, Hashable, CustomStringConvertible {
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

    public var description: String {
        switch self {
        case .number(let number): String(number)
        case .string(let text): text
        }
    }
}

/// The `error` member of a response.
public struct JSONRPCError: Error, Sendable, Equatable, CustomStringConvertible {
    public var code: Int
    public var message: String
    public var data: JSONValue?

    public init(code: Int, message: String, data: JSONValue? = nil) {
        self.code = code
        self.message = message
        self.data = data
    }

    public init(_ code: StandardCode, _ message: String, data: JSONValue? = nil) {
        self.init(code: code.rawValue, message: message, data: data)
    }

    /// The codes JSON-RPC 2.0 reserves.
    public enum StandardCode: Int, Sendable {
        case parseError = -32700
        case invalidRequest = -32600
        case methodNotFound = -32601
        case invalidParams = -32602
        case internalError = -32603
    }

    public var json: JSONValue {
        var object: [String: JSONValue] = ["code": .number(Double(code)), "message": .string(message)]
        if let data { object["data"] = data }
        return .object(object)
    }

    public var description: String { "JSON-RPC error \(code): \(message)" }
}
