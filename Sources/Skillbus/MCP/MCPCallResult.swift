import Foundation

/// How a round's answer becomes a `tools/call` result (docs/MCP.md, "The bus as an MCP server").
/// `_meta` always names the round, so a client can name it again to get the stored answer.
enum MCPCallResult {
    /// A skill's round: its result as content (and a JSON result as `structuredContent` too), or its error
    /// as `isError` with the code and message, every parameter problem on a line of its own.
    static func skill(_ document: RoundDocument) -> JSONValue {
        var meta: [String: JSONValue] = [
            "skillbus/round": .string(document.round), "skillbus/stored": .bool(document.stored),
        ]
        if let agent = document.agent { meta["skillbus/agent"] = .string(agent) }
        guard document.status == .ok else {
            let error = document.error ?? SkillbusError(.internalError, "the round failed without an error")
            meta["skillbus/error"] = error.json
            return failure(error, meta: meta)
        }
        var object: [String: JSONValue] = ["isError": false, "_meta": .object(meta)]
        switch try? SkillResult(json: document.result) {
        case .text(let text):
            object["content"] = [textContent(text)]
        case .json(let value):
            object["content"] = [textContent(value.jsonString)]
            // structuredContent is an object: any other JSON value goes in one under "result".
            object["structuredContent"] = value.objectValue != nil ? value : ["result": value]
        case .attachment(let attachment):
            object["content"] = [content(attachment)]
        case nil:
            object["content"] = [textContent(document.result.jsonString)]
        }
        return .object(object)
    }

    /// An agent's turn: its reply as text.
    static func turn(agent: String, document: JSONValue, round: String) -> JSONValue {
        [
            "isError": false, "content": [textContent(document["reply"]?.stringValue ?? "")],
            "_meta": ["skillbus/round": .string(round), "skillbus/agent": .string(agent)],
        ]
    }

    /// A call that failed: `isError`, with the error's code and message (and any listed problems).
    static func failure(_ error: SkillbusError, meta: [String: JSONValue]) -> JSONValue {
        var meta = meta
        meta["skillbus/error"] = error.json
        return ["isError": true, "content": [textContent(describe(error))], "_meta": .object(meta)]
    }

    /// `code: message`, then each listed problem on a line of its own (the bus's message for invalid
    /// parameters already names them all: then the first line says only what failed).
    static func describe(_ error: SkillbusError) -> String {
        let problems = error.details?.arrayValue?.compactMap(\.stringValue) ?? []
        guard !problems.isEmpty else { return "\(error.code.rawValue): \(error.message)" }
        var head = error.message
        if let colon = head.range(of: ": "), problems.allSatisfy(head.contains) {
            head = String(head[..<colon.lowerBound])
        }
        return (["\(error.code.rawValue): \(head)"] + problems.map { "- " + $0 }).joined(separator: "\n")
    }

    static func textContent(_ text: String) -> JSONValue { ["type": "text", "text": .string(text)] }

    /// Images and audio as MCP's own content types; anything else as an embedded resource.
    static func content(_ attachment: SkillResult.Attachment) -> JSONValue {
        let data = JSONValue.string(Data(attachment.bytes).base64EncodedString())
        let mime = JSONValue.string(attachment.mediaType)
        if attachment.mediaType.hasPrefix("image/") { return ["type": "image", "data": data, "mimeType": mime] }
        if attachment.mediaType.hasPrefix("audio/") { return ["type": "audio", "data": data, "mimeType": mime] }
        let uri =
            "skillbus://attachment/"
            + (attachment.name.addingPercentEncoding(withAllowedCharacters: .urlPathAllowed) ?? "")
        return ["type": "resource", "resource": ["uri": .string(uri), "mimeType": mime, "blob": data]]
    }
}
