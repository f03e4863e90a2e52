import Dispatch
import Foundation
import SkillbusZMQ
import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

/// The operator endpoint's socket thread (`skillbus-http`): a listening TCP socket and its connections,
/// all non-blocking, under one poll(2). A connection gets one response and is closed, except an event
/// stream, which stays open. A client that stalls only ever holds its own connection, bounded in time and
/// in buffered bytes; the coordinator's thread never waits for this one (see `OperatorBoard`).
final class HTTPServer: Sendable {
    /// The bound address, with the real port when port 0 was asked for.
    let address: HTTPAddress
    private let listener: Int32
    private let board: OperatorBoard
    private let stopping = Atomic<Bool>(false)
    private let exited = DispatchSemaphore(value: 0)

    static let maxConnections = 64
    /// Connections beyond `maxConnections` that are answered 503; past these, new ones are closed unanswered.
    static let refusedConnections = 16
    /// How long a client has to send its request head, and to read its response.
    static let requestTimeoutNanos: UInt64 = 10_000_000_000
    /// An event stream whose client reads slower than events come is closed past this many unsent bytes.
    static let maxStreamBacklog = 1 << 20
    static let keepaliveNanos: UInt64 = 15_000_000_000

    /// Binds and listens on the caller's thread (so that a bad endpoint fails the start), then serves on its own.
    init(address: HTTPAddress, board: OperatorBoard) throws(SkillbusError) {
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
        self.board = board
        let thread = Thread { [self] in
            // The site lives and dies on this thread.
            serve(OperatorSite(board: board))
            exited.signal()
        }
        thread.name = "skillbus-http"
        thread.start()
    }


    /// Stops the thread and waits for it (a plain thread may wait; never call this from the cooperative pool).
    func stop() {
        guard !stopping.exchange(true, ordering: .acquiringAndReleasing) else { return }
        board.wakePipe.wake()
        exited.wait()
    }

    /// One client connection, owned by the server's thread.
    private struct Connection {
        var fd: Int32
        var received: [UInt8] = []
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

    private func serve(_ site: OperatorSite) {
        var connections: [Connection] = []
        var nextKeepalive = DispatchTime.now().uptimeNanoseconds + Self.keepaliveNanos
        while !stopping.load(ordering: .acquiring) {
            var fds = [
                pollfd(fd: listener, events: Int16(POLLIN), revents: 0),
                pollfd(fd: site.board.wakePipe.readEnd, events: Int16(POLLIN), revents: 0),
            ]
            for connection in connections {
                let events = connection.unsent > 0 && !connection.draining ? POLLIN | POLLOUT : POLLIN
                fds.append(pollfd(fd: connection.fd, events: Int16(events), revents: 0))
            }
            // Events and snapshots are collected every 100 ms (or sooner, when a client wakes it).
            _ = poll(&fds, nfds_t(fds.count), 100)
            if fds[1].revents != 0 { site.board.wakePipe.drain() }
            let now = DispatchTime.now().uptimeNanoseconds
            var broadcast = site.collect(streaming: connections.contains { $0.streams })
            if now >= nextKeepalive {
                broadcast += Array(": keepalive\n\n".utf8)
                nextKeepalive = now + Self.keepaliveNanos
            }
            for index in connections.indices where connections[index].streams && !broadcast.isEmpty {
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
                    connection.fd < 0 || (!connection.streams && now > connection.deadline)
                    || (connection.streams && connection.unsent > Self.maxStreamBacklog)
                if over && connection.fd >= 0 {
                    if !connection.answered {
                        // Best effort, one write: the client learns why it is cut off.
                        let late = HTTPResponse.text(408, "the request head did not arrive within 10 s").encoded()
                        _ = late.withUnsafeBytes { send(connection.fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
                    }
                    close(connection.fd)
                }
                return over
            }
            if fds[0].revents != 0 { accept(into: &connections, now: now) }
        }
        for connection in connections { close(connection.fd) }
        close(listener)
    }

    private func accept(into connections: inout [Connection], now: UInt64) {
        while true {
            guard let fd = TCPSocket.accept(listener) else { return }
            guard connections.count < Self.maxConnections + Self.refusedConnections else {
                close(fd)
                continue
            }
            var connection = Connection(fd: fd, deadline: now + Self.requestTimeoutNanos)
            if connections.count >= Self.maxConnections {
                // Told at once, and closed the way any response is, so the client reads why.
                answer(&connection, .text(503, "too many connections (\(Self.maxConnections)); try again"), head: false, now: now)
            }
            connections.append(connection)
        }
    }

    private func receive(_ connection: inout Connection, _ site: OperatorSite, now: UInt64) {
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
            // After the head, nothing more is read into memory: requests here have no body.
            guard !connection.answered else { continue }
            connection.received += buffer[..<count]
            switch HTTPRequestHead.parse(connection.received) {
            case .incomplete:
                continue
            case .head(let head):
                answer(&connection, site.respond(to: head), head: head.method == "HEAD", now: now)
            case .refused(let status, let reason):
                answer(&connection, .text(status, reason), head: false, now: now)
            }
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
