import Testing

@testable import Skillbus

@Suite("JSON-RPC messages")
struct JSONRPCTests {
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
        #expect(String(decoding: message.serialized(), as: UTF8.self) == text)
    }

    @Test("the parts land where they belong")
    func parts() throws {
        let request = try JSONRPCMessage(json: [
            "jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": ["name": "x"],
        ])
        #expect(request == .request(id: .number(3), method: "tools/call", params: ["name": "x"]))
        #expect(request.id == .number(3))
        let error = try JSONRPCMessage(json: [
            "jsonrpc": "2.0", "id": "q", "error": ["code": -32602, "message": "bad"],
        ])
        #expect(error == .error(id: .string("q"), JSONRPCError(.invalidParams, "bad")))
        let note = try JSONRPCMessage(json: ["jsonrpc": "2.0", "method": "notifications/progress"])
        #expect(note == .notification(method: "notifications/progress", params: nil) && note.id == nil)
    }

    @Test(
        "what is not a JSON-RPC 2.0 message is refused with the reason",
        arguments: [
            ("{", -32700, "not JSON"),
            ("[]", -32600, "batches are not supported"),
            ("3", -32600, "must be a JSON object"),
            (#"{"id":1,"method":"x"}"#, -32600, "'jsonrpc' must be"),
            (#"{"jsonrpc":"2.0","id":1.5,"method":"x"}"#, -32600, "'id' must be a string or an integer"),
            (#"{"jsonrpc":"2.0","id":null,"method":"x"}"#, -32600, "must not be null"),
            (#"{"jsonrpc":"2.0","id":1,"method":4}"#, -32600, "'method' must be a string"),
            (#"{"jsonrpc":"2.0","id":1,"method":"x","params":3}"#, -32600, "'params' must be"),
            (#"{"jsonrpc":"2.0","result":{}}"#, -32600, "needs the request's 'id'"),
            (#"{"jsonrpc":"2.0","id":1,"result":{},"error":{}}"#, -32600, "not both"),
            (#"{"jsonrpc":"2.0","id":1,"error":{"code":"x"}}"#, -32600, "integer 'code'"),
            (#"{"jsonrpc":"2.0","id":1}"#, -32600, "needs 'method', 'result' or 'error'"),
        ])
    func refused(text: String, code: Int, words: String) {
        #expect {
            try JSONRPCMessage(parsing: Array(text.utf8))
        } throws: { error in
            guard let error = error as? JSONRPCError else { return false }
            return error.code == code && error.message.contains(words)
        }
    }
}
