import CCurlRuntime
import Foundation
import Synchronization

extension HTTPStreamingCall {
    /// One libcurl transfer on a thread of its own, and what it has delivered to whom. libcurl's callbacks
    /// (on that thread) and the awaiting caller meet in `state`.
    final class Transfer: Sendable {
        private struct State {
            var parser = HTTPResponseHeadParser()
            var head: Response?
            var headWaiter: CheckedContinuation<Response, any Error>?
            var pieces: [[UInt8]] = []
            var bodyWaiter: CheckedContinuation<[UInt8]?, any Error>?
            var received = 0
            /// When the server was last heard from (or the transfer began): the idle timeout counts from here.
            var lastHeard: ContinuousClock.Instant
            /// nil while the transfer runs; then `.success` at the end of the body, or why it broke off. Once
            /// set, libcurl is told to stop at its next callback.
            var end: Result<Void, Failure>?
        }

        /// Continuations to resume once the lock is let go.
        private struct Wake {
            var head: CheckedContinuation<Response, any Error>?
            var body: CheckedContinuation<[UInt8]?, any Error>?
            var headResult: Result<Response, any Error>?
            var bodyResult: Result<[UInt8]?, any Error>?

            func resume() {
                if let head, let headResult { head.resume(with: headResult) }
                if let body, let bodyResult { body.resume(with: bodyResult) }
            }
        }

        private let state: Mutex<State>
        private let request: Request
        private let timeout: Duration
        private let maxBodyBytes: Int

        init(_ request: Request, timeout: Duration, maxBodyBytes: Int) {
            self.request = request
            self.timeout = timeout
            self.maxBodyBytes = maxBodyBytes
            state = Mutex(State(lastHeard: .now))
        }

        /// Starts the thread that runs the transfer; it holds the transfer until libcurl returns.
        func run() {
            let thread = Thread { [self] in perform() }
            thread.name = "skillbus-http-client"
            thread.start()
        }

        func awaitHead(_ continuation: CheckedContinuation<Response, any Error>) {
            let ready: Result<Response, any Error>? = state.withLock { state in
                if let head = state.head { return .success(head) }
                switch state.end {
                case .failure(let failure): return .failure(failure)
                case .success: return .failure(Failure.transport(code: 0, "the response had no head"))
                case nil:
                    state.headWaiter = continuation
                    return nil
                }
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

        /// Ends the transfer as cancelled, unless it has ended already; waiters hear of it now.
        func cancel() { end(.failure(.cancelled)) }

        /// What a thrown error means for the caller.
        static func failure(_ error: any Error) -> Failure {
            if let failure = error as? Failure { return failure }
            return error is CancellationError ? .cancelled : .transport(code: 0, "\(error)")
        }

        /// Sets the end if none is set yet (a limit already broken says why the transfer ended better than the
        /// abort that follows) and wakes whoever waits.
        private func end(_ end: Result<Void, Failure>) {
            state.withLock { state in Self.settle(&state, end) }.resume()
        }

        private static func settle(_ state: inout State, _ end: Result<Void, Failure>) -> Wake {
            if state.end == nil { state.end = end }
            var wake = Wake(head: state.headWaiter, body: state.bodyWaiter)
            state.headWaiter = nil
            state.bodyWaiter = nil
            switch state.end ?? end {
            case .success:
                wake.headResult = .failure(Failure.transport(code: 0, "the response had no head"))
                wake.bodyResult = .success(nil)
            case .failure(let failure):
                wake.headResult = .failure(failure)
                wake.bodyResult = .failure(failure)
            }
            return wake
        }

        // MARK: libcurl's side, on the transfer's thread

        private func perform() {
            var headers = request.headerFields.map { strdup("\($0.name): \($0.value)") }
            // libcurl would ask for 100 Continue before a large body and wait up to a second for it.
            headers.append(strdup("Expect:"))
            defer { for line in headers { free(line) } }
            let milliseconds =
                timeout.components.seconds * 1000 + timeout.components.attoseconds / 1_000_000_000_000_000
            var message = [CChar](repeating: 0, count: 512)
            let context = Unmanaged.passUnretained(self).toOpaque()
            let code = request.url.withCString { url in
                withOptionalCString(request.method) { method in
                    headers.map { UnsafePointer($0) }.withUnsafeBufferPointer { lines in
                        withOptionalBytes(request.body) { body in
                            // An empty body still needs a pointer (NULL means no body): any valid one will do.
                            var call = ccurl_request(
                                url: url, method: method, headers: lines.baseAddress, header_count: lines.count,
                                body: body?.baseAddress ?? (body != nil ? UnsafeRawPointer(url) : nil),
                                body_length: body?.count ?? 0, connect_timeout_ms: Int(max(milliseconds, 1)),
                                context: context, on_header: Self.onHeader, on_body: Self.onBody,
                                should_stop: Self.shouldStop)
                            return ccurl_perform(&call, &message, message.count)
                        }
                    }
                }
            }
            let words = String(decoding: message.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
            end(Self.outcome(code: code, words))
        }

        /// libcurl's code as the transfer's end. An abort or write error follows an end already set (a
        /// cancellation, the idle timeout, the body limit), which `end` keeps.
        static func outcome(code: Int32, _ words: String) -> Result<Void, Failure> {
            switch code {
            case CCURL_E_OK: .success(())
            case CCURL_E_OPERATION_TIMEDOUT: .failure(.timedOut)
            case CCURL_E_ABORTED_BY_CALLBACK, CCURL_E_WRITE_ERROR: .failure(.cancelled)
            default: .failure(.transport(code: Int(code), words))
            }
        }

        private static let onHeader: ccurl_bytes_callback = { context, bytes, length in
            guard let context, let bytes else { return true }
            let transfer = Unmanaged<Transfer>.fromOpaque(context).takeUnretainedValue()
            return transfer.header(UnsafeRawBufferPointer(start: bytes, count: length))
        }

        private static let onBody: ccurl_bytes_callback = { context, bytes, length in
            guard let context, let bytes else { return true }
            let transfer = Unmanaged<Transfer>.fromOpaque(context).takeUnretainedValue()
            return transfer.piece(UnsafeRawBufferPointer(start: bytes, count: length))
        }

        private static let shouldStop: ccurl_stop_callback = { context in
            guard let context else { return true }
            return Unmanaged<Transfer>.fromOpaque(context).takeUnretainedValue().shouldStop()
        }

        private func header(_ line: UnsafeRawBufferPointer) -> Bool {
            let (waiter, head, going) = state.withLock {
                state -> (CheckedContinuation<Response, any Error>?, Response?, Bool) in
                guard state.end == nil else { return (nil, nil, false) }
                state.lastHeard = .now
                guard let head = state.parser.receive(line), state.head == nil else { return (nil, nil, true) }
                state.head = head
                defer { state.headWaiter = nil }
                return (state.headWaiter, head, true)
            }
            if let waiter, let head { waiter.resume(returning: head) }
            return going
        }

        private func piece(_ bytes: UnsafeRawBufferPointer) -> Bool {
            let (wake, going) = state.withLock { state -> (Wake, Bool) in
                guard state.end == nil else { return (Wake(), false) }
                state.lastHeard = .now
                state.received += bytes.count
                if state.received > maxBodyBytes {
                    return (Self.settle(&state, .failure(.tooLarge(maxBodyBytes))), false)
                }
                guard let waiter = state.bodyWaiter else {
                    state.pieces.append(Array(bytes))
                    return (Wake(), true)
                }
                state.bodyWaiter = nil
                return (Wake(body: waiter, bodyResult: .success(Array(bytes))), true)
            }
            wake.resume()
            return going
        }

        /// Asked by libcurl about once a second: stop once the call has ended, or when the server has been
        /// silent for longer than the timeout.
        private func shouldStop() -> Bool {
            let wake = state.withLock { state -> Wake? in
                if state.end != nil { return Wake() }
                guard ContinuousClock.now - state.lastHeard > timeout else { return nil }
                return Self.settle(&state, .failure(.timedOut))
            }
            wake?.resume()
            return wake != nil
        }
    }
}

private func withOptionalCString<Result>(_ text: String?, _ body: (UnsafePointer<CChar>?) -> Result) -> Result {
    guard let text else { return body(nil) }
    return text.withCString { body($0) }
}

private func withOptionalBytes<Result>(_ bytes: [UInt8]?, _ body: (UnsafeRawBufferPointer?) -> Result) -> Result {
    guard let bytes else { return body(nil) }
    return bytes.withUnsafeBytes { body($0) }
}
