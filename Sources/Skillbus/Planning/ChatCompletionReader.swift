/// Reads one chat-completions answer off the wire: server-sent events (`data: {chunk}` … `data: [DONE]`),
/// or one whole JSON completion from a server that does not stream. The planner reads until the answer
/// shows what it is; a reply's stream then reads the rest, piece by piece, as the agent forwards it.
/// One reader at a time: the planner, then the stream.
actor ChatCompletionReader {
    enum Answer: Equatable {
        /// Text for the user; this is its beginning.
        case reply(String)
        /// The whole answer was tool calls.
        case toolCalls([ChatCompletionStream.ToolCall])
    }

    private let call: HTTPStreamingCall
    private let endpoint: String
    private let timeoutSeconds: Double
    private let eventStream: Bool
    private var events = ServerSentEvents()
    private var answer = ChatCompletionStream()
    private var ended = false

    init(_ call: HTTPStreamingCall, endpoint: String, timeoutSeconds: Double) {
        self.call = call
        self.endpoint = endpoint
        self.timeoutSeconds = timeoutSeconds
        // What the answer is, by its type: JSON means a whole completion; anything else is read as events.
        let type = call.response.value(forHTTPHeaderField: "Content-Type")?.lowercased() ?? ""
        eventStream = !type.contains("json")
    }

    /// A reply that is dropped before its end stops the transfer.
    deinit { call.cancel() }

    /// Reads until the answer is a reply (with its first text) or has ended as tool calls.
    func decide() async throws(ChatEndpointError) -> Answer {
        var text = ""
        while let piece = try await read() {
            text += piece
            if answer.kind == .reply { return .reply(text) }
        }
        if answer.kind == .toolCalls { return .toolCalls(answer.toolCalls) }
        let reason = answer.finishReason.map { " (finish_reason \($0))" } ?? ""
        throw ChatEndpointError(
            .malformedResponse, "the endpoint's answer ended with neither text nor a tool call\(reason)")
    }

    /// The reply's next text; nil at its end.
    func nextPiece() async throws(ChatEndpointError) -> String? {
        while let piece = try await read() {
            if !piece.isEmpty { return piece }
        }
        return nil
    }

    /// The text that the next piece of the body adds ("" for a piece that completes no event, or only tool
    /// calls); nil once the answer has ended.
    private func read() async throws(ChatEndpointError) -> String? {
        guard !ended else { return nil }
        guard eventStream else {
            ended = true
            let body: [UInt8]
            do { body = try await call.body(limit: OpenAIPlanner.maxAnswerBytes) } catch {
                throw Self.endpointError(error, endpoint, timeoutSeconds, reading: true)
            }
            return try answer.receive(Self.parse(body))
        }
        let bytes: [UInt8]?
        do { bytes = try await call.next() } catch {
            throw Self.endpointError(error, endpoint, timeoutSeconds, reading: true)
        }
        let found: [ServerSentEvents.Event]
        if let bytes {
            found = events.receive(bytes)
        } else {
            ended = true
            found = events.finish().map { [$0] } ?? []
        }
        var text = ""
        for event in found where event.type == "message" {
            if event.data.trimmingCharacters(in: .whitespaces) == "[DONE]" {
                ended = true
                call.cancel()  // whatever follows the end marker is of no interest
                break
            }
            text += try answer.receive(Self.parse(Array(event.data.utf8)))
        }
        return text
    }

    private static func parse(_ bytes: [UInt8]) throws(ChatEndpointError) -> JSONValue {
        do {
            return try JSONValue(parsing: bytes)
        } catch {
            let text = String(decoding: bytes.prefix(200), as: UTF8.self)
            throw ChatEndpointError(.malformedResponse, "the endpoint's answer is not JSON (\(error)): \(text)")
        }
    }

    /// A transport failure as the turn's failure, naming the endpoint: before the answer began (`reading`
    /// false), or while it was being read.
    static func endpointError(
        _ failure: HTTPStreamingCall.Failure, _ endpoint: String, _ timeoutSeconds: Double, reading: Bool = false
    ) -> ChatEndpointError {
        let seconds = timeoutSeconds.isWholeNumber ? String(Int(timeoutSeconds)) : String(timeoutSeconds)
        switch failure {
        case .transport(let code, let words) where reading:
            return ChatEndpointError(
                .unreachable, "the connection to the planner's endpoint at \(endpoint) broke: \(words) (\(code))")
        case .transport(let code, let words):
            return ChatEndpointError(
                .unreachable, "the planner's endpoint at \(endpoint) is unreachable: \(words) (\(code))")
        case .timedOut:
            return ChatEndpointError(.timeout, "the planner's endpoint at \(endpoint) sent nothing for \(seconds) s")
        case .tooLarge(let limit):
            return ChatEndpointError(.tooLarge, "the endpoint's answer is larger than \(limit) bytes")
        case .cancelled:
            return ChatEndpointError(.cancelled, "the request to the endpoint was cancelled")
        case .noLibCurl(let error):
            return ChatEndpointError(
                .unreachable, "no request to the planner's endpoint at \(endpoint) can be sent: \(error)")
        }
    }
}
