import Testing

@testable import Skillbus

/// The JSON-RPC 2.0 model both MCP directions use (`skillbus mcp` serving, a worker's mounts calling).
@Suite("JSON-RPC messages")
struct JSONRPCTests {
    func parse(_ text: String) -> Result<JSONRPCMessage, JSONRPCMessage.Unreadable> {
        JSONRPCMessage.parse(Array(text.utf8))
    }

    @Test(
        "each kind of message reads and writes back the same",
        arguments: [
            #"{"id":1,"jsonrpc":"2.0","method":"tools/list","params":{"cursor":"c2"}}"#,
            #"{"id":"abc","jsonrpc":"2.0","method":"ping"}"#,
            #"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
            #"{"id":7,"jsonrpc":"2.0","result":{"tools":[]}}"#,
            #"{"error":{"code":-32601,"message":"no such method"},"id":7,"jsonrpc":"2.0"}"#,
            #"{"error":{"code":-32700,"data":"x","message":"parse error"},"id":null,"jsonrpc":"2.0"}"#,
        ])
    func roundTrip(text: String) throws {
        let message = try JSONRPCMessage(parsing: Array(text.utf8))
        #expect(String(decoding: message.encoded(), as: UTF8.self) == text)
    }

    @Test("requests, notifications and answers are read with their ids as sent")
    func reads() throws {
        let request = try parse(#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"x"}}"#).get()
        #expect(request == .request(id: 3, method: "tools/call", params: ["name": "x"]))
        #expect(request.id == .number(3))
        #expect(
            try parse(#"{"jsonrpc":"2.0","id":"a","method":"ping"}"#).get()
                == .request(id: "a", method: "ping", params: nil))
        let note = try parse(#"{"jsonrpc":"2.0","method":"notifications/progress"}"#).get()
        #expect(note == .notification(method: "notifications/progress", params: nil) && note.id == nil)
        #expect(
            try parse(#"{"jsonrpc":"2.0","id":"s-1","result":{"action":"accept"}}"#).get()
                == .result(id: "s-1", result: ["action": "accept"]))
        #expect(
            try parse(#"{"jsonrpc":"2.0","id":"q","error":{"code":-32602,"message":"bad"}}"#).get()
                == .error(id: "q", .invalidParams("bad")))
    }

    @Test(
        "bad messages get the JSON-RPC error that names what was wrong, with the id when it was readable",
        arguments: [
            ("{nope", nil, -32700, "not JSON"),
            ("[1,2]", nil, -32600, "a batch"),
            (#""text""#, nil, -32600, "must be a JSON object"),
            (#"{"id":1,"method":"ping"}"#, 1, -32600, "'jsonrpc' must be"),
            (#"{"jsonrpc":"2.0","id":{"a":1},"method":"ping"}"#, nil, -32600, "'id' must be a string or an integer"),
            (#"{"jsonrpc":"2.0","id":1.5,"method":"x"}"#, nil, -32600, "'id' must be a string or an integer"),
            (#"{"jsonrpc":"2.0","id":null,"method":"x"}"#, nil, -32600, "'id' must be a string or an integer"),
            (#"{"jsonrpc":"2.0","id":2,"method":5}"#, 2, -32600, "'method' must be"),
            (#"{"jsonrpc":"2.0","id":2,"method":"x","params":3}"#, 2, -32600, "'params' must be"),
            (#"{"jsonrpc":"2.0","result":{}}"#, nil, -32600, "needs the request's 'id'"),
            (#"{"jsonrpc":"2.0","id":1,"result":{},"error":{}}"#, 1, -32600, "not both"),
            (#"{"jsonrpc":"2.0","id":1,"error":{"code":"x"}}"#, 1, -32600, "integer 'code'"),
            (#"{"jsonrpc":"2.0","id":2}"#, 2, -32600, "needs 'method', 'result' or 'error'"),
        ] as [(String, JSONRPCID?, Int, String)])
    func refuses(_ text: String, _ id: JSONRPCID?, _ code: Int, _ says: String) throws {
        guard case .failure(let unreadable) = parse(text) else {
            Issue.record("\(text) was read")
            return
        }
        #expect(unreadable.id == id)
        #expect(unreadable.error.code == code)
        #expect(unreadable.error.message.contains(says), "\(unreadable.error.message)")
    }

    @Test("a message is written as one line that reads back the same")
    func oneLine() throws {
        let messages: [JSONRPCMessage] = [
            .request(id: "skillbus-1", method: "elicitation/create", params: ["message": "run?\nreally"]),
            .notification(method: "notifications/progress", params: ["progressToken": 1, "progress": 2]),
            .result(id: 9, result: ["tools": []]), .error(id: nil, .parseError("not JSON")),
        ]
        for message in messages {
            let line = message.encoded()
            #expect(!line.contains(UInt8(ascii: "\n")))
            #expect(try JSONRPCMessage.parse(line).get() == message)
        }
    }
}
