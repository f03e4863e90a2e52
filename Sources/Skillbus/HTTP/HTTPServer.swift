import Dispatch
import Foundation
import SkillbusZMQ
import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

/// One HTTP request: its head and its body (empty unless the site takes bodies).
struct HTTPRequest: Sendable {
    var head: HTTPRequestHead
    var body: [UInt8] = []
}

/// A connection of an `HTTPServer`, as its site and deliveries name it.
typealias HTTPConnectionID = UInt64

/// What an `HTTPServer` serves. It lives on the server's thread, which alone calls it.
protocol HTTPSite: AnyObject {
    /// Request bodies larger than this are refused (413); 0: bodies are not read at all.
    var maxBodyBytes: Int { get }
    /// The answer to `request`: now, or nil when it comes later through `HTTPServer.deliver`.
    func respond(to request: HTTPRequest, on connection: HTTPConnectionID) -> HTTPResponse?
    /// Bytes for every open broadcast stream (a stream answered by `respond`), collected each turn of the loop;
    /// `streaming` says whether one is open.
    func collect(streaming: Bool) -> [UInt8]
    /// `connection` is gone: its client left, or its response was sent.
    func closed(_ connection: HTTPConnectionID)
}

/// An answer that comes later, from another thread (`HTTPServer.deliver`).
enum HTTPDelivery: Sendable {
    /// The response to a request its site left unanswered; an event stream stays open for more.
    case response(HTTPResponse)
    /// More of a stream.
    case more([UInt8])
    /// The stream is complete: the connection closes once it is sent.
    case end
}

/// An HTTP endpoint's socket thread (`skillbus-http`): a listening TCP socket and its connections, all
/// non-blocking, under one poll(2). A connection gets one response and is closed, except an event stream,
/// which stays open. A client that stalls only ever holds its own connection, bounded in time and in
/// buffered bytes. The site answers at once (the operator endpoint: the coordinator's thread never waits
/// for this one, see `OperatorBoard`) or later, through `deliver` (the MCP endpoint).
final class HTTPServer: Sendable {
    /// The bound address, with the real port when port 0 was asked for.
    let address: HTTPAddress
    private let listener: Int32
    private let wakePipe: WakePipe
    private let stopping = Atomic<Bool>(false)
    private let exited = DispatchSemaphore(value: 0)
    private let deliveries = Mutex<[(HTTPConnectionID, HTTPDelivery)]>([])

    static let maxConnections = 64
    /// Connections beyond `maxConnections` that are answered 503; past these, new ones are closed unanswered.
    static let refusedConnections = 16
    /// How long a client has to send its request head, and to read its response.
    static let requestTimeoutNanos: UInt64 = 10_000_000_000
    /// An event stream whose client reads slower than events come is closed past this many unsent bytes.
    static let maxStreamBacklog = 1 << 20
    static let keepaliveNanos: UInt64 = 15_000_000_000

    /// The operator endpoint: the dashboard, metrics and state, from `board`.
    convenience init(address: HTTPAddress, board: OperatorBoard) throws(SkillbusError) {
        try self.init(address: address, wakePipe: board.wakePipe) { OperatorSite(board: board) }
    }

    /// Binds and listens on the caller's thread (so that a bad endpoint fails the start), then serves on its own
    /// the site `makeSite` makes there. `wakePipe` wakes the thread (to stop, or for a delivery).
    init(
        address: HTTPAddress, wakePipe: WakePipe, makeSite: @escaping @Sendable () -> any HTTPSite
    ) throws(SkillbusError) {
        guard let inAddr = address.inAddr else {
            throw SkillbusError(.invalidConfiguration, "HTTP endpoint \(address): no IPv4 address")
        }
        let (fd, port): (Int32, UInt16)
        switch TCPSocket.listen(on: inAddr, port: address.port, backlog: 64) {
        case .success(let listening): (fd, port) = listening
        case .failure(let failure):
            throw SkillbusError(
                .invalidConfiguration,
                "cannot serve HTTP on \(address): \(failure.call) failed: \(String(cString: strerror(failure.errno)))")
        }
        self.address = HTTPAddress(host: address.host, port: port)
        listener = fd
        self.wakePipe = wakePipe
        let thread = Thread { [self] in
            // The site lives and dies on this thread.
            serve(makeSite())
            exited.signal()
        }
        thread.name = "skillbus-http"
        thread.start()
    }

    /// Stops the thread and waits for it (a plain thread may wait; never call this from the cooperative pool).
    func stop() {
        guard !stopping.exchange(true, ordering: .acquiringAndReleasing) else { return }
        wakePipe.wake()
        exited.wait()
    }

    /// Hands the server's thread an answer for `connection` (any thread); one whose client is gone is dropped.
    func deliver(_ connection: HTTPConnectionID, _ delivery: HTTPDelivery) {
        deliveries.withLock { $0.append((connection, delivery)) }
        wakePipe.wake()
    }

    /// One client connection, owned by the server's thread.
    private struct Connection {
        var id: HTTPConnectionID
        var fd: Int32
        var received: [UInt8] = []
        /// The request is read and its site answers later (a delivery): no deadline meanwhile.
        var waiting = false
        /// A stream every broadcast of the site goes to (one its `respond` opened).
        var broadcast = false
        var outbox: [UInt8] = []
        var sent = 0
        /// Its response is decided: the outbox holds it (or, for a stream, what came so far).
        var answered = false
        var streams = false
        /// The response is sent and our side shut: waiting for the client's end of file before closing.
        var draining = false
        var deadline: UInt64

        var unsent: Int { outbox.count - sent }
    }

    private func serve(_ site: any HTTPSite) {
        var connections: [Connection] = []
        var nextID: HTTPConnectionID = 0
        var nextKeepalive = DispatchTime.now().uptimeNanoseconds + Self.keepaliveNanos
        while !stopping.load(ordering: .acquiring) {
            var fds = [
                pollfd(fd: listener, events: Int16(POLLIN), revents: 0),
                pollfd(fd: wakePipe.readEnd, events: Int16(POLLIN), revents: 0),
            ]
            for connection in connections {
                let events = connection.unsent > 0 && !connection.draining ? POLLIN | POLLOUT : POLLIN
                fds.append(pollfd(fd: connection.fd, events: Int16(events), revents: 0))
            }
            // Events and snapshots are collected every 100 ms (or sooner, when a client wakes it).
            _ = poll(&fds, nfds_t(fds.count), 100)
            if fds[1].revents != 0 { wakePipe.drain() }
            let now = DispatchTime.now().uptimeNanoseconds
            for (id, delivery) in deliveries.withLock({ pending in
                defer { pending = [] }
                return pending
            }) {
                guard let index = connections.firstIndex(where: { $0.id == id && $0.fd >= 0 }) else { continue }
                deliver(delivery, to: &connections[index], now: now)
            }
            var broadcast = site.collect(streaming: connections.contains { $0.broadcast })
            if now >= nextKeepalive {
                broadcast += Array(": keepalive\n\n".utf8)
                nextKeepalive = now + Self.keepaliveNanos
            }
            for index in connections.indices where connections[index].broadcast && !broadcast.isEmpty {
                connections[index].outbox += broadcast
            }
            for (index, polled) in zip(connections.indices, fds.dropFirst(2)) where polled.revents != 0 {
                if polled.revents & Int16(POLLIN | POLLHUP | POLLERR) != 0 {
                    receive(&connections[index], site, now: now)
                }
                if polled.revents & Int16(POLLOUT) != 0 { transmit(&connections[index], now: now) }
            }
            connections.removeAll { connection in
                let over =
                    connection.fd < 0 || (!connection.streams && !connection.waiting && now > connection.deadline)
                    || (connection.streams && connection.unsent > Self.maxStreamBacklog)
                if over && connection.fd >= 0 {
                    if !connection.answered {
                        // Best effort, one write: the client learns why it is cut off.
                        let late = HTTPResponse.text(408, "the request head did not arrive within 10 s").encoded()
                        _ = late.withUnsafeBytes { send(connection.fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
                    }
                    close(connection.fd)
                }
                if over { site.closed(connection.id) }
                return over
            }
            if fds[0].revents != 0 { accept(into: &connections, nextID: &nextID, now: now) }
        }
        for connection in connections { close(connection.fd) }
        close(listener)
    }

    private func accept(into connections: inout [Connection], nextID: inout HTTPConnectionID, now: UInt64) {
        while true {
            guard let fd = TCPSocket.accept(listener) else { return }
            guard connections.count < Self.maxConnections + Self.refusedConnections else {
                close(fd)
                continue
            }
            nextID += 1
            var connection = Connection(id: nextID, fd: fd, deadline: now + Self.requestTimeoutNanos)
            if connections.count >= Self.maxConnections {
                // Told at once, and closed the way any response is, so the client reads why.
                answer(&connection, .text(503, "too many connections (\(Self.maxConnections)); try again"), head: false, now: now)
            }
            connections.append(connection)
        }
    }

    private func receive(_ connection: inout Connection, _ site: any HTTPSite, now: UInt64) {
        var buffer = [UInt8](repeating: 0, count: 4096)
        while connection.fd >= 0 {
            let count = buffer.withUnsafeMutableBytes { recv(connection.fd, $0.baseAddress, $0.count, 0) }
            if count == 0 || (count < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
                // The client is gone (or has shut its side, having read what it wanted).
                close(connection.fd)
                connection.fd = -1
                return
            }
            guard count > 0 else { return }
            // After the request, nothing more is read into memory.
            guard !connection.answered, !connection.waiting else { continue }
            connection.received += buffer[..<count]
            switch HTTPRequestHead.parse(connection.received) {
            case .incomplete:
                continue
            case .head(let head):
                let request: HTTPRequest
                switch Self.request(head, in: connection.received, maxBodyBytes: site.maxBodyBytes) {
                case .incomplete: continue
                case .refused(let refusal):
                    answer(&connection, refusal, head: false, now: now)
                    continue
                case .complete(let complete): request = complete
                }
                guard let response = site.respond(to: request, on: connection.id) else {
                    connection.waiting = true
                    connection.received = []
                    continue
                }
                answer(&connection, response, head: head.method == "HEAD", now: now)
                connection.broadcast = connection.streams
            case .refused(let status, let reason):
                answer(&connection, .text(status, reason), head: false, now: now)
            }
        }
    }

    /// The whole request once its body (`Content-Length` bytes) has arrived; nil while it is still coming; a
    /// refusal for a body too large or of a length not given. A site that takes no body never waits for one.
    private enum BodyRead {
        case complete(HTTPRequest)
        case incomplete
        case refused(HTTPResponse)
    }

    private static func request(_ head: HTTPRequestHead, in received: [UInt8], maxBodyBytes: Int) -> BodyRead {
        guard maxBodyBytes > 0 else { return .complete(HTTPRequest(head: head)) }
        if head.headers["transfer-encoding"] != nil {
            return .refused(.text(411, "send the body with a Content-Length (chunked bodies are not accepted)"))
        }
        guard let text = head.headers["content-length"] else { return .complete(HTTPRequest(head: head)) }
        guard let length = Int(text), length >= 0 else {
            return .refused(.text(400, "invalid Content-Length '\(text.prefix(20))'"))
        }
        guard length <= maxBodyBytes else {
            return .refused(.text(413, "request body of \(length) bytes is larger than \(maxBodyBytes)"))
        }
        guard let start = HTTPRequestHead.bodyStart(received), received.count >= start + length else {
            return .incomplete
        }
        return .complete(HTTPRequest(head: head, body: Array(received[start..<(start + length)])))
    }

    private func deliver(_ delivery: HTTPDelivery, to connection: inout Connection, now: UInt64) {
        switch delivery {
        case .response(let response):
            guard !connection.answered else { return }
            connection.waiting = false
            answer(&connection, response, head: false, now: now)
        case .more(let bytes):
            guard connection.streams else { return }
            connection.outbox += bytes
            transmit(&connection, now: now)
        case .end:
            guard connection.streams else { return }
            connection.streams = false
            connection.deadline = now + Self.requestTimeoutNanos
            transmit(&connection, now: now)
        }
    }

    private func answer(_ connection: inout Connection, _ response: HTTPResponse, head: Bool, now: UInt64) {
        connection.answered = true
        connection.received = []
        connection.streams = response.streams && !head
        connection.outbox = response.encoded(includingBody: !head)
        connection.deadline = now + Self.requestTimeoutNanos
        transmit(&connection, now: now)
    }

    private func transmit(_ connection: inout Connection, now: UInt64) {
        while connection.unsent > 0 {
            let count = connection.outbox.withUnsafeBytes {
                send(connection.fd, $0.baseAddress! + connection.sent, connection.unsent, Int32(MSG_NOSIGNAL))
            }
            guard count > 0 else {
                if count < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR {
                    close(connection.fd)
                    connection.fd = -1
                }
                return
            }
            connection.sent += count
            // A stream's client that keeps up only partly: drop what it has taken, so the outbox holds only
            // what is still to send (which `maxStreamBacklog` bounds).
            if connection.unsent > 0 && connection.sent >= 1 << 16 {
                connection.outbox.removeFirst(connection.sent)
                connection.sent = 0
            }
        }
        connection.outbox = []
        connection.sent = 0
        if connection.answered && !connection.streams && !connection.draining {
            // Shut our side and wait for the client's end of file, so closing does not reset a connection
            // whose response it has not read yet.
            shutdown(connection.fd, Int32(SHUT_WR))
            connection.draining = true
            connection.deadline = now + 2_000_000_000
        }
    }
}
