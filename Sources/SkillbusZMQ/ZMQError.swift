import CZeroMQ

/// A failed libzmq call: which operation, the errno it left, and libzmq's own words for it.
public struct ZMQError: Error, Sendable, Equatable, CustomStringConvertible {
    public let operation: String
    public let errno: Int32
    public let message: String

    public init(operation: String, errno: Int32) {
        self.operation = operation
        self.errno = errno
        self.message = String(cString: zmq_strerror(errno))
    }

    /// Reads `zmq_errno()` at once, before anything else can overwrite it.
    static func last(_ operation: String) -> ZMQError {
        ZMQError(operation: operation, errno: zmq_errno())
    }

    public var description: String { "\(operation): \(message) (errno \(errno))" }

    /// The call would have blocked (non-blocking send or receive found nothing to do).
    public var wouldBlock: Bool { errno == EAGAIN }
    /// The context was shut down; the owning thread should close its socket and leave.
    public var contextTerminated: Bool { errno == ETERM }
    /// A ROUTER with ZMQ_ROUTER_MANDATORY had no peer with that routing id.
    public var hostUnreachable: Bool { errno == EHOSTUNREACH }
}
