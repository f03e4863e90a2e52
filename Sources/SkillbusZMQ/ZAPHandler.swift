import Dispatch
import Foundation
import Synchronization

/// One authentication request from libzmq (ZeroMQ RFC 27, ZAP version 1.0).
public struct ZAPRequest: Sendable, Equatable {
    public var domain: String
    /// The peer's IP address as libzmq saw it.
    public var address: String
    public var mechanism: String
    /// For CURVE: one credential, the client's 32-byte public key.
    public var credentials: [[UInt8]]

    public init(domain: String, address: String, mechanism: String, credentials: [[UInt8]]) {
        self.domain = domain
        self.address = address
        self.mechanism = mechanism
        self.credentials = credentials
    }
}

/// The answer to a `ZAPRequest`: accepted with a user id (every message of the connection carries it
/// as "User-Id"), or refused with a reason that libzmq hands to nobody but this process.
public enum ZAPVerdict: Sendable, Equatable {
    case accept(userID: String)
    case refuse(reason: String)
}

/// The ZAP handler of one context: a REP socket at `inproc://zeromq.zap.01` on a thread of its own, by
/// THE CONCURRENCY RULE (SocketLoop.swift). libzmq asks it about every connection that a socket with a
/// ZAP domain accepts, and waits for the answer before the handshake goes on; so it must be bound before
/// those sockets bind, and must outlive them.
public final class ZAPHandler: Sendable {
    public static let endpoint = "inproc://zeromq.zap.01"
    private let wakePipe: WakePipe
    private let stopping = Atomic<Bool>(false)
    private let exited = DispatchSemaphore(value: 0)

    /// Binds the handler and starts answering with `decide`, which runs on the handler's thread. The
    /// synchronous form only: it blocks the calling thread until the socket is bound, so call it from a
    /// thread of your own (the coordinator's), never from Swift's cooperative pool.
    public init(context: ZMQContext, decide: @escaping @Sendable (ZAPRequest) -> ZAPVerdict) throws {
        let wakePipe = try WakePipe()
        self.wakePipe = wakePipe
        let started = DispatchSemaphore(value: 0)
        let startup = Mutex<(any Error)?>(nil)
        let exited = self.exited
        let thread = Thread { [wakePipe] in
            defer { exited.signal() }
            let socket: ZMQSocket
            do {
                socket = try ZMQSocket(context: context, type: .rep)
                try socket.bind(Self.endpoint)
            } catch {
                startup.withLock { $0 = error }
                started.signal()
                return
            }
            started.signal()
            Self.serve(socket, wakePipe: wakePipe, decide: decide)
            socket.close()
        }
        thread.name = "skillbus-zap"
        thread.start()
        started.wait()
        if let error = startup.withLock({ $0 }) {
            wakePipe.close()
            throw error
        }
    }

    /// Answers requests until `stop` wakes the thread or the context ends.
    private static func serve(_ socket: ZMQSocket, wakePipe: WakePipe, decide: (ZAPRequest) -> ZAPVerdict) {
        let items = [PollItem(.socket(socket)), PollItem(.fileDescriptor(wakePipe.readEnd))]
        while true {
            guard let ready = try? poll(items, timeoutMs: -1), !ready.readable[1] else { return }
            guard ready.readable[0] else { continue }
            do {
                guard let request = try socket.receive(dontWait: true) else { continue }
                try socket.send(answer(request, decide: decide), dontWait: true)
            } catch {
                if error.contextTerminated { return }
            }
        }
    }

    /// The reply frames for `frames` (the REP socket has taken the envelope off): version, request id,
    /// status code, status text, user id, metadata.
    static func answer(_ frames: Multipart, decide: (ZAPRequest) -> ZAPVerdict) -> Multipart {
        let requestID = frames.count > 1 ? frames[1] : []
        func reply(_ code: String, _ text: String, _ userID: String = "") -> Multipart {
            [Array("1.0".utf8), requestID, Array(code.utf8), Array(text.utf8), Array(userID.utf8), []]
        }
        guard frames.count >= 6, frames[0] == Array("1.0".utf8) else { return reply("500", "not a ZAP 1.0 request") }
        let request = ZAPRequest(
            domain: String(decoding: frames[2], as: UTF8.self), address: String(decoding: frames[3], as: UTF8.self),
            mechanism: String(decoding: frames[5], as: UTF8.self), credentials: Array(frames.dropFirst(6)))
        switch decide(request) {
        case .accept(let userID): return reply("200", "OK", userID)
        case .refuse(let reason): return reply("400", reason)
        }
    }

    /// Asks the handler's thread to close its socket and leave. Returns at once, never blocks.
    public func stop() {
        guard !stopping.exchange(true, ordering: .acquiringAndReleasing) else { return }
        wakePipe.wake()
    }

    /// Stops the handler and waits for its thread to leave. Synchronous: for the coordinator's own thread,
    /// which closes the sockets that use the handler first.
    public func stopAndWait() {
        stop()
        exited.wait()
        exited.signal()
        wakePipe.close()
    }
}
