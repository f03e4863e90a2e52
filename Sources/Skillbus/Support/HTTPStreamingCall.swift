import Foundation
import Synchronization

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

/// One HTTP request whose response body is handed over piece by piece as it arrives. The toolchain's
/// FoundationNetworking on Linux has no `URLSession.bytes(for:)`, but a data delegate is told of every
/// piece libcurl receives, which is what a streamed answer needs.
///
/// `timeout` is how long the server may stay silent: before the response's head, and between two pieces
/// of its body (on Linux, `URLRequest.timeoutInterval` is exactly that idle timeout).
final class HTTPStreamingCall: Sendable {
    /// Why a call ended without its whole body.
    enum Failure: Error, Sendable {
        /// The transport failed (refused, no such host, reset); the `URLError` code and libcurl's words.
        case transport(code: Int, String)
        /// The server was silent for longer than the timeout.
        case timedOut
        /// The body grew past the limit the caller set; the call was cancelled.
        case tooLarge(Int)
        case cancelled
    }

    private let receiver: Receiver
    private let task: DataTask
    let response: HTTPURLResponse

    /// Sends `request` and returns once the response's head has arrived.
    static func start(_ request: URLRequest, timeout: Duration, maxBodyBytes: Int) async throws(Failure)
        -> HTTPStreamingCall
    {
        var request = request
        request.timeoutInterval = Double(timeout.components.seconds) + Double(timeout.components.attoseconds) / 1e18
        let receiver = Receiver(maxBodyBytes: maxBodyBytes)
        let configuration = URLSessionConfiguration.ephemeral
        configuration.timeoutIntervalForRequest = request.timeoutInterval
        // One session per call: the delegate belongs to this call alone, and invalidating the session once the
        // task is done lets go of it.
        let session = URLSession(configuration: configuration, delegate: receiver, delegateQueue: nil)
        let task = DataTask(session.dataTask(with: request))
        task.value.resume()
        session.finishTasksAndInvalidate()
        let response: HTTPURLResponse
        do {
            response = try await withTaskCancellationHandler {
                try await withCheckedThrowingContinuation { continuation in receiver.awaitHead(continuation) }
            } onCancel: {
                task.value.cancel()
            }
        } catch {
            task.value.cancel()
            throw receiver.failure(error)
        }
        return HTTPStreamingCall(receiver: receiver, task: task, response: response)
    }

    private init(receiver: Receiver, task: DataTask, response: HTTPURLResponse) {
        self.receiver = receiver
        self.task = task
        self.response = response
    }

    deinit { task.value.cancel() }

    /// The next piece of the body; nil once it has all arrived.
    func next() async throws(Failure) -> [UInt8]? {
        do {
            return try await withTaskCancellationHandler {
                try await withCheckedThrowingContinuation { continuation in receiver.awaitBody(continuation) }
            } onCancel: {
                task.value.cancel()
            }
        } catch {
            throw receiver.failure(error)
        }
    }

    /// The rest of the body, whole, up to `limit` bytes (an error answer's text, say).
    func body(limit: Int) async throws(Failure) -> [UInt8] {
        var bytes: [UInt8] = []
        while bytes.count < limit, let piece = try await next() { bytes += piece }
        if bytes.count >= limit { cancel() }
        return Array(bytes.prefix(limit))
    }

    func cancel() { task.value.cancel() }

    /// FoundationNetworking's task, used only through `resume` and `cancel`, both thread-safe.
    private struct DataTask: @unchecked Sendable {
        let value: URLSessionDataTask
        init(_ value: URLSessionDataTask) { self.value = value }
    }

    /// The session's delegate: what has arrived and who waits for it.
    private final class Receiver: NSObject, URLSessionDataDelegate, Sendable {
        private struct State {
            var head: HTTPURLResponse?
            var headWaiter: CheckedContinuation<HTTPURLResponse, any Error>?
            var pieces: [[UInt8]] = []
            var bodyWaiter: CheckedContinuation<[UInt8]?, any Error>?
            var received = 0
            /// nil while the transfer runs; then `.success` at the end of the body, or why it broke off.
            var end: Result<Void, Failure>?
        }

        private let state = Mutex(State())
        private let maxBodyBytes: Int

        init(maxBodyBytes: Int) { self.maxBodyBytes = maxBodyBytes }

        func awaitHead(_ continuation: CheckedContinuation<HTTPURLResponse, any Error>) {
            let ready: Result<HTTPURLResponse, any Error>? = state.withLock { state in
                if let head = state.head { return .success(head) }
                if case .failure(let failure) = state.end { return .failure(failure) }
                if state.end != nil { return .failure(Failure.transport(code: 0, "the response had no head")) }
                state.headWaiter = continuation
                return nil
            }
            if let ready { continuation.resume(with: ready) }
        }

        func awaitBody(_ continuation: CheckedContinuation<[UInt8]?, any Error>) {
            let ready: Result<[UInt8]?, any Error>? = state.withLock { state in
                if !state.pieces.isEmpty { return .success(state.pieces.removeFirst()) }
                switch state.end {
                case .success: return .success(nil)
                case .failure(let failure): return .failure(failure)
                case nil:
                    state.bodyWaiter = continuation
                    return nil
                }
            }
            if let ready { continuation.resume(with: ready) }
        }

        /// What a thrown error means for the caller.
        func failure(_ error: any Error) -> Failure {
            if let failure = error as? Failure { return failure }
            return error is CancellationError ? .cancelled : .transport(code: 0, "\(error)")
        }

        func urlSession(
            _ session: URLSession, dataTask: URLSessionDataTask, didReceive response: URLResponse,
            completionHandler: @escaping (URLSession.ResponseDisposition) -> Void
        ) {
            completionHandler(.allow)
            guard let response = response as? HTTPURLResponse else { return }
            let waiter = state.withLock { state in
                state.head = response
                defer { state.headWaiter = nil }
                return state.headWaiter
            }
            waiter?.resume(returning: response)
        }

        func urlSession(_ session: URLSession, dataTask: URLSessionDataTask, didReceive data: Data) {
            let (waiter, overLimit) = state.withLock { state -> (CheckedContinuation<[UInt8]?, any Error>?, Bool) in
                guard state.end == nil else { return (nil, false) }
                state.received += data.count
                if state.received > maxBodyBytes {
                    state.end = .failure(.tooLarge(maxBodyBytes))
                    defer { state.bodyWaiter = nil }
                    return (state.bodyWaiter, true)
                }
                if let waiter = state.bodyWaiter {
                    state.bodyWaiter = nil
                    return (waiter, false)
                }
                state.pieces.append(Array(data))
                return (nil, false)
            }
            if overLimit {
                dataTask.cancel()
                waiter?.resume(throwing: Failure.tooLarge(maxBodyBytes))
            } else {
                waiter?.resume(returning: Array(data))
            }
        }

        func urlSession(_ session: URLSession, task: URLSessionTask, didCompleteWithError error: (any Error)?) {
            let end: Result<Void, Failure> = error.map { .failure(Self.failure(of: $0)) } ?? .success(())
            let (headWaiter, bodyWaiter, settled) = state.withLock { state in
                // A limit already broken says why the transfer ended better than the cancellation that followed.
                if state.end == nil { state.end = end }
                defer {
                    state.headWaiter = nil
                    state.bodyWaiter = nil
                }
                return (state.headWaiter, state.bodyWaiter, state.end ?? end)
            }
            switch settled {
            case .success:
                headWaiter?.resume(throwing: Failure.transport(code: 0, "the response had no head"))
                bodyWaiter?.resume(returning: nil)
            case .failure(let failure):
                headWaiter?.resume(throwing: failure)
                bodyWaiter?.resume(throwing: failure)
            }
        }

        private static func failure(of error: any Error) -> Failure {
            let error = error as NSError
            switch error.code {
            case NSURLErrorTimedOut: return .timedOut
            case NSURLErrorCancelled: return .cancelled
            default:
                // libcurl's own words ("Failed to connect to 127.0.0.1 port 9 …") sit in the underlying error.
                let underlying = error.userInfo[NSUnderlyingErrorKey] as? NSError
                let words =
                    [underlying?.userInfo[NSLocalizedDescriptionKey], error.userInfo[NSLocalizedDescriptionKey]]
                    .compactMap { $0 as? String }.first ?? "URL error \(error.code)"
                return .transport(code: error.code, words)
            }
        }
    }
}
