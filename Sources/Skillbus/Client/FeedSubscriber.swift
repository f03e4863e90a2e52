import SkillbusZMQ

/// Watches the feed: subscribes to topic prefixes and yields each event as (topic, JSON body).
public final class FeedSubscriber: Sendable {
    private let socket: SocketLoop
    /// With keys: hears whether the coordinator refused them (libzmq tells only a socket monitor).
    private let refusals: RefusalWatch?

    private init(socket: SocketLoop, refusals: RefusalWatch?) {
        self.socket = socket
        self.refusals = refusals
    }

    /// Whether the coordinator refused this subscriber's key (then no event will ever come: libzmq gives
    /// such a connection up).
    public var keyRefused: Bool { refusals?.keyRefused ?? false }

    /// Subscribes to `topics` (all when empty). The synchronous form, for synchronous callers: it blocks
    /// the calling thread until the socket's thread has connected. Async code uses `connect(…)`.
    public convenience init(
        endpoint: String, topics: [String], context: ZMQContext, credentials: CurveCredentials? = nil
    ) throws {
        let refusals = try credentials.map { _ in try RefusalWatch(context: context) }
        do {
            self.init(
                socket: try SocketLoop(
                    context: context, type: .sub, name: "skillbus-feed",
                    configure: Self.configure(endpoint, topics, credentials, refusals)),
                refusals: refusals)
        } catch {
            refusals?.stop()
            throw error
        }
    }

    /// Subscribes, as `init` does, awaiting the socket's thread instead of blocking. With `credentials`, over
    /// CURVE (a feed with keys admits only the roles its coordinator lets read it); `onRefused` is called
    /// once, from another thread, if the coordinator refuses the key.
    public static func connect(
        endpoint: String, topics: [String], context: ZMQContext, credentials: CurveCredentials? = nil,
        onRefused: (@Sendable () -> Void)? = nil
    ) async throws -> FeedSubscriber {
        var refusals: RefusalWatch?
        if credentials != nil { refusals = try await RefusalWatch(context: context, onRefused: onRefused) }
        do {
            return FeedSubscriber(
                socket: try await SocketLoop.start(
                    context: context, type: .sub, name: "skillbus-feed",
                    configure: configure(endpoint, topics, credentials, refusals)),
                refusals: refusals)
        } catch {
            refusals?.stop()
            throw error
        }
    }

    private static func configure(
        _ endpoint: String, _ topics: [String], _ credentials: CurveCredentials?, _ refusals: RefusalWatch?
    ) -> @Sendable (ZMQSocket) throws -> Void {
        { socket in
            if let credentials { try socket.useCurveClient(credentials) }
            try refusals?.watch(socket)
            try socket.setMaxMessageSize(Wire.subscriberHardCap)
            for topic in topics.isEmpty ? [""] : topics { try socket.subscribe(topic) }
            // A group's feeds, all at once: only the leader publishes, so its events come whichever it is (§7).
            for feed in Endpoint.list(endpoint) { try socket.connect(feed) }
        }
    }

    /// Events as they arrive; messages that are not [topic, JSON] are skipped. Ends when closed.
    public var events: some AsyncSequence<(topic: String, event: JSONValue), Never> {
        socket.messages.compactMap { message -> (topic: String, event: JSONValue)? in
            guard message.count == 2, let event = try? JSONValue(parsing: message[1]) else { return nil }
            return (String(decoding: message[0], as: UTF8.self), event)
        }
    }

    /// Stops watching; `events` ends. Returns at once, never blocks.
    public func close() {
        socket.stop()
        refusals?.stop()
    }
}
