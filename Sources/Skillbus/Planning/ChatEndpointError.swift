/// Why the endpoint gave no usable answer. Its description is the message alone: the agent loop puts it
/// after "the planner failed:".
public struct ChatEndpointError: Error, Sendable, Equatable, CustomStringConvertible {
    public struct Code: Sendable, Hashable, CustomStringConvertible {
        public let rawValue: String
        private init(_ rawValue: String) { self.rawValue = rawValue }
        public var description: String { rawValue }

        /// No connection: refused, no such host, reset.
        public static let unreachable = Code("unreachable")
        /// Nothing arrived within the configured timeout.
        public static let timeout = Code("timeout")
        /// 401 or 403: the API key is missing, wrong, or not allowed.
        public static let unauthorized = Code("unauthorized")
        /// 429, and no retry helped or was short enough to wait for.
        public static let rateLimited = Code("rate_limited")
        /// Any other status outside 2xx.
        public static let httpStatus = Code("http_status")
        /// The endpoint said it failed, inside an answer that began well.
        public static let endpointError = Code("endpoint_error")
        /// The answer is not a chat completion: not JSON, the wrong shape, or neither text nor a tool call.
        public static let malformedResponse = Code("malformed_response")
        /// The answer was larger than the planner reads.
        public static let tooLarge = Code("too_large")
        /// The turn was cancelled while the request ran.
        public static let cancelled = Code("cancelled")
    }

    public let code: Code
    public let message: String

    public init(_ code: Code, _ message: String) {
        self.code = code
        self.message = message
    }

    public var description: String { message }
}
