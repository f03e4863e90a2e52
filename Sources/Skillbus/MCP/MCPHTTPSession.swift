import Foundation
import Synchronization

/// One MCP session of the Streamable HTTP transport: its `MCPServer`, and its event streams — one per POST
/// answered with a stream, and the session's own stream (GET) for what belongs to no request. Every event
/// of a stream is kept (up to a bound) with an id `STREAM-SEQ`, so a client whose connection broke resumes
/// with `Last-Event-ID` and gets what it missed. A stream outlives its connections: a client that left
/// does not cancel its request (the spec's rule); only `notifications/cancelled` does.
final class MCPHTTPSession: Sendable {
    let id: String
    let access: MCPAccess
    /// The bearer token that started it (empty without tokens): only requests with it reach the session.
    let owner: String
    /// Set once, right after creation (the server needs the session's general output first).
    private let serverSlot = Mutex<MCPServer?>(nil)
    private let state = Mutex(State())
    private let lastUsed = Mutex(ContinuousClock.now)
    /// Sends bytes to a connection of the HTTP server (a delivery).
    let deliver: @Sendable (HTTPConnectionID, HTTPDelivery) -> Void

    /// Events kept per stream for resumption; older ones are dropped.
    static let maxEventsPerStream = 1000
    /// Finished streams kept for a late resumption; older ones are forgotten.
    static let maxFinishedStreams = 32
    /// The stream of the session itself (GET).
    static let generalStream = 0

    struct Stream {
        var events: [(seq: Int, bytes: [UInt8])] = []
        var nextSeq = 1
        var connection: HTTPConnectionID?
        /// Its request is answered: nothing more will come.
        var finished = false
    }

    private struct State {
        var streams: [Int: Stream] = [MCPHTTPSession.generalStream: Stream()]
        var nextStream = 1
        var finishedOrder: [Int] = []
        var closed = false
    }

    init(
        id: String, access: MCPAccess, owner: String = "",
        deliver: @escaping @Sendable (HTTPConnectionID, HTTPDelivery) -> Void
    ) {
        self.id = id
        self.access = access
        self.owner = owner
        self.deliver = deliver
    }

    var server: MCPServer? { serverSlot.withLock { $0 } }

    /// A request of the session arrived now.
    func touch() { lastUsed.withLock { $0 = .now } }

    /// Whether its client has gone quiet: no request for `idle`, no call running, no stream connected.
    func isAbandoned(idle: Duration, now: ContinuousClock.Instant) -> Bool {
        guard now - lastUsed.withLock({ $0 }) > idle, server?.callsInFlight ?? 0 == 0 else { return false }
        return state.withLock { state in state.streams.values.allSatisfy { $0.connection == nil } }
    }
    func attach(_ server: MCPServer) { serverSlot.withLock { $0 = server } }

    /// The server's output for what belongs to no request: the session's own stream.
    var general: MCPServer.Output { { [weak self] message in self?.append(message, to: MCPHTTPSession.generalStream) } }

    /// A new stream for a POST answered with one; returns its number.
    func openStream(connection: HTTPConnectionID) -> Int {
        state.withLock { state in
            let number = state.nextStream
            state.nextStream += 1
            state.streams[number] = Stream(connection: connection)
            return number
        }
    }

    /// The first bytes of a new stream: the reconnect delay and an event with an id and no data (so the
    /// client can resume even before the first message), then `messages` as events.
    func opening(_ stream: Int, with messages: [JSONRPCMessage], finished: Bool) -> [UInt8] {
        var bytes = Array("retry: 1000\n\n".utf8)
        state.withLock { state in
            guard var entry = state.streams[stream] else { return }
            bytes += Self.event(id: "\(stream)-0", data: [])
            for message in messages { bytes += Self.record(message, in: &entry, stream: stream) }
            entry.finished = finished
            state.streams[stream] = entry
            if finished { Self.finish(stream, in: &state) }
        }
        return bytes
    }

    /// Adds `message` to `stream` and sends it to the stream's connection, if one is attached; the answer
    /// to its request ends the stream (`ends`).
    func append(_ message: JSONRPCMessage, to stream: Int, ends: Bool = false) {
        let send = state.withLock { state -> (HTTPConnectionID, [UInt8])? in
            guard !state.closed, var entry = state.streams[stream], !entry.finished else { return nil }
            let bytes = Self.record(message, in: &entry, stream: stream)
            entry.finished = ends
            let connection = entry.connection
            if ends { entry.connection = nil }
            state.streams[stream] = entry
            if ends { Self.finish(stream, in: &state) }
            return connection.map { ($0, bytes) }
        }
        guard let (connection, bytes) = send else { return }
        deliver(connection, .more(bytes))
        if ends { deliver(connection, .end) }
    }

    /// A GET: resumes the stream `lastEventID` names after that event, or, without one, attaches to the
    /// session's own stream. Returns the bytes to start with and whether the stream is already complete;
    /// nil when the id names no stream this session still has.
    func resume(lastEventID: String?, connection: HTTPConnectionID) -> (bytes: [UInt8], finished: Bool)? {
        var stream = Self.generalStream
        var after = Int.max
        if let lastEventID {
            let parts = lastEventID.split(separator: "-")
            guard parts.count == 2, let number = Int(parts[0]), let seq = Int(parts[1]) else { return nil }
            (stream, after) = (number, seq)
        }
        let (replaced, result) = state.withLock { state -> (HTTPConnectionID?, (bytes: [UInt8], finished: Bool)?) in
            guard var entry = state.streams[stream] else { return (nil, nil) }
            let replaced = entry.connection
            var bytes = Array("retry: 1000\n\n".utf8)
            for event in entry.events where event.seq > after {
                bytes += Self.event(id: "\(stream)-\(event.seq)", data: event.bytes)
            }
            entry.connection = entry.finished ? nil : connection
            state.streams[stream] = entry
            return (replaced, (bytes, entry.finished))
        }
        // One connection per stream: a newer one takes over.
        if let replaced, replaced != connection { deliver(replaced, .end) }
        return result
    }

    /// The connection went away: its stream goes on without it, to be resumed.
    func detach(_ connection: HTTPConnectionID) {
        state.withLock { state in
            for (number, entry) in state.streams where entry.connection == connection {
                state.streams[number]?.connection = nil
            }
        }
    }

    /// Ends the session: its calls are cancelled and its open streams end.
    func close() {
        let connections = state.withLock { state -> [HTTPConnectionID] in
            state.closed = true
            defer { state.streams.removeAll() }
            return state.streams.values.compactMap(\.connection)
        }
        server?.close()
        for connection in connections { deliver(connection, .end) }
    }

    private static func record(_ message: JSONRPCMessage, in stream: inout Stream, stream number: Int) -> [UInt8] {
        let data = message.encoded()
        let seq = stream.nextSeq
        stream.nextSeq += 1
        stream.events.append((seq, data))
        if stream.events.count > maxEventsPerStream {
            stream.events.removeFirst(stream.events.count - maxEventsPerStream)
        }
        return event(id: "\(number)-\(seq)", data: data)
    }

    private static func finish(_ stream: Int, in state: inout State) {
        state.finishedOrder.append(stream)
        while state.finishedOrder.count > maxFinishedStreams {
            state.streams[state.finishedOrder.removeFirst()] = nil
        }
    }

    /// One server-sent event; a JSON message written compactly has no newline, so it is one data line.
    static func event(id: String, data: [UInt8]) -> [UInt8] {
        Array("id: \(id)\ndata: ".utf8) + data + Array("\n\n".utf8)
    }
}

/// What a bearer token of the HTTP endpoint may do.
public enum MCPAccess: String, Sendable, CaseIterable {
    /// List tools, not call them.
    case reader
    /// List and call tools.
    case client
}
