import Synchronization

/// One POSTed request and where its messages go. While the server handles the request the messages are
/// collected; a request answered then (initialize, ping, tools/list, a refused call) is answered with JSON.
/// Otherwise (a tool call running on the bus) the POST becomes an event stream of the session, and the
/// messages that follow — progress, an elicitation, the answer — go there as they come.
final class MCPHTTPExchange: Sendable {
    let id: JSONRPCID
    private let mode = Mutex(Mode.collecting([]))

    private enum Mode {
        case collecting([JSONRPCMessage])
        case streaming(MCPHTTPSession, Int)
    }

    init(id: JSONRPCID) { self.id = id }

    var output: MCPServer.Output { { message in self.receive(message) } }

    var collected: [JSONRPCMessage] {
        mode.withLock { mode in
            if case .collecting(let messages) = mode { return messages }
            return []
        }
    }

    private func receive(_ message: JSONRPCMessage) {
        let target = mode.withLock { mode -> (MCPHTTPSession, Int)? in
            switch mode {
            case .collecting(let messages):
                mode = .collecting(messages + [message])
                return nil
            case .streaming(let session, let stream):
                return (session, stream)
            }
        }
        guard let (session, stream) = target else { return }
        session.append(message, to: stream, ends: isAnswer(message))
    }

    private func isAnswer(_ message: JSONRPCMessage) -> Bool {
        switch message {
        case .result, .error: message.id == id
        default: false
        }
    }

    /// The HTTP response now that the server has taken the request: JSON when it is answered already,
    /// else the opening of its event stream (or, for a client that takes no stream, 406).
    func answer(
        session: MCPHTTPSession, connection: HTTPConnectionID, streams: Bool, endpoint: MCPHTTPEndpoint
    ) -> HTTPResponse {
        let (response, streamNumber): (HTTPResponse, Int?) = mode.withLock { mode in
            guard case .collecting(let messages) = mode else { preconditionFailure("an exchange is answered once") }
            if messages.count == 1, let only = messages.first, isAnswer(only) {
                return (HTTPResponse(status: 200, contentType: "application/json", body: only.encoded()), nil)
            }
            guard streams else {
                return (
                    MCPHTTPEndpoint.failure(406, .invalidRequest("this request needs text/event-stream"), id: id), nil
                )
            }
            let number = session.openStream(connection: connection)
            let finished = messages.contains(where: isAnswer)
            var response = HTTPResponse.eventStream
            response.body = session.opening(number, with: messages, finished: finished)
            if !finished { mode = .streaming(session, number) }
            return (response, finished ? nil : number)
        }
        if response.streams, streamNumber == nil { endpoint.deliver(connection, .end) }
        if let streamNumber, let limit = endpoint.settings.streamLimit {
            // The operator wants no response open longer: the client resumes the stream with GET.
            Task {
                try? await Task.sleep(for: limit)
                session.detach(connection)
                endpoint.deliver(connection, .end)
                endpoint.logger?.debug("closed stream \(streamNumber) after \(limit); the client may resume it")
            }
        }
        return response
    }
}
