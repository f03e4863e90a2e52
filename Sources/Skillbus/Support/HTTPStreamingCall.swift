/// One HTTP request whose response body is handed over piece by piece as it arrives, over libcurl's easy
/// interface (loaded at run time, `LibCurl`) on a thread of its own: `start` returns once the response's head
/// has arrived, `next` returns each piece of the body that libcurl received. http and https, redirects
/// followed, every content encoding libcurl decodes.
///
/// `timeout` is how long the server may stay silent: before the response's head, and between two pieces of
/// its body (checked about once a second).
final class HTTPStreamingCall: Sendable {
    /// Why a call ended without its whole body.
    enum Failure: Error, Sendable, Equatable {
        /// The transport failed (refused, no such host, reset, TLS); libcurl's code and its words.
        case transport(code: Int, String)
        /// The server was silent for longer than the timeout.
        case timedOut
        /// The body grew past the limit the caller set; the call was cancelled.
        case tooLarge(Int)
        case cancelled
        /// libcurl could not be loaded, so no request can be sent.
        case noLibCurl(LibCurl.LoadError)
    }

    /// What to send: POST when there is a body, else GET, unless `method` says otherwise.
    struct Request: Sendable {
        var url: String
        var method: String?
        /// In the order given; a name may repeat.
        var headerFields: [(name: String, value: String)] = []
        var body: [UInt8]?

        init(url: String, method: String? = nil, body: [UInt8]? = nil) {
            self.url = url
            self.method = method
            self.body = body
        }

        mutating func setValue(_ value: String, forHTTPHeaderField name: String) {
            headerFields.removeAll { $0.name.lowercased() == name.lowercased() }
            headerFields.append((name, value))
        }
    }

    /// The head of the final response (after any redirects libcurl followed).
    struct Response: Sendable {
        let statusCode: Int
        /// As the server sent them, in order.
        let headerFields: [(name: String, value: String)]

        /// The field's value, names compared without case; a field sent several times has its values joined
        /// with ", ".
        func value(forHTTPHeaderField name: String) -> String? {
            let name = name.lowercased()
            let values = headerFields.filter { $0.name.lowercased() == name }.map(\.value)
            return values.isEmpty ? nil : values.joined(separator: ", ")
        }
    }

    private let transfer: Transfer
    let response: Response

    /// Sends `request` and returns once the response's head has arrived.
    static func start(_ request: Request, timeout: Duration, maxBodyBytes: Int) async throws(Failure)
        -> HTTPStreamingCall
    {
        if case .failure(let error) = LibCurl.standard { throw .noLibCurl(error) }
        let transfer = Transfer(request, timeout: timeout, maxBodyBytes: maxBodyBytes)
        transfer.run()
        let response: Response
        do {
            response = try await withTaskCancellationHandler {
                try await withCheckedThrowingContinuation { continuation in transfer.awaitHead(continuation) }
            } onCancel: {
                transfer.cancel()
            }
        } catch {
            transfer.cancel()
            throw Transfer.failure(error)
        }
        return HTTPStreamingCall(transfer: transfer, response: response)
    }

    private init(transfer: Transfer, response: Response) {
        self.transfer = transfer
        self.response = response
    }

    deinit { transfer.cancel() }

    /// The next piece of the body; nil once it has all arrived.
    func next() async throws(Failure) -> [UInt8]? {
        do {
            return try await withTaskCancellationHandler {
                try await withCheckedThrowingContinuation { continuation in transfer.awaitBody(continuation) }
            } onCancel: {
                transfer.cancel()
            }
        } catch {
            throw Transfer.failure(error)
        }
    }

    /// The rest of the body, whole, up to `limit` bytes (an error answer's text, say).
    func body(limit: Int) async throws(Failure) -> [UInt8] {
        var bytes: [UInt8] = []
        while bytes.count < limit, let piece = try await next() { bytes += piece }
        if bytes.count >= limit { cancel() }
        return Array(bytes.prefix(limit))
    }

    /// Ends the call: whoever waits for it hears `.cancelled` at once, and the transfer's thread stops libcurl
    /// at its next callback (within about a second).
    func cancel() { transfer.cancel() }
}
