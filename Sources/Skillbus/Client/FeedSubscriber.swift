import SkillbusZMQ

/// Watches the feed: subscribes to topic prefixes and yields each event as (topic, JSON body).
///
/// By default it takes the events in batches (PROTOCOL §7: one message per pass of the coordinator, a line per
/// event), which costs the coordinator and this process far less than a message per event under load; the
/// events and their order are the same. Several topics are taken as one batch of everything, kept here by
/// prefix, so that their order across topics holds too.
public final class FeedSubscriber: Sendable {
    private let socket: SocketLoop
    /// With keys: hears whether the coordinator refused them (libzmq tells only a socket monitor).
    private let refusals: RefusalWatch?
    /// The topic prefixes to keep of what arrives; nil when the subscriptions select it all.
    private let keeping: [[UInt8]]?

    private init(socket: SocketLoop, refusals: RefusalWatch?, keeping: [[UInt8]]?) {
        self.socket = socket
        self.refusals = refusals
        self.keeping = keeping
    }

    /// What to subscribe to for `topics`, and what to keep of what comes.
    private static func plan(_ topics: [String], batched: Bool) -> (subscriptions: [[UInt8]], keeping: [[UInt8]]?) {
        guard batched else { return ((topics.isEmpty ? [""] : topics).map { Array($0.utf8) }, nil) }
        let mark = [Wire.feedBatchMark]
        if topics.count == 1 { return ([mark + Array(topics[0].utf8) + [0]], nil) }
        return ([mark + [0]], topics.isEmpty ? nil : topics.map { Array($0.utf8) })
    }

    /// Whether the coordinator refused this subscriber's key (then no event will ever come: libzmq gives
    /// such a connection up).
    public var keyRefused: Bool { refusals?.keyRefused ?? false }

    /// Subscribes to `topics` (all when empty), in batches unless `batched` is false. The synchronous form, for
    /// synchronous callers: it blocks the calling thread until the socket's thread has connected. Async code uses
    /// `connect(…)`.
    public convenience init(
        endpoint: String, topics: [String], context: ZMQContext, credentials: CurveCredentials? = nil,
        batched: Bool = true
    ) throws {
        let refusals = try credentials.map { _ in try RefusalWatch(context: context) }
        let plan = Self.plan(topics, batched: batched)
        do {
            self.init(
                socket: try SocketLoop(
                    context: context, type: .sub, name: "skillbus-feed",
                    configure: Self.configure(endpoint, plan.subscriptions, credentials, refusals)),
                refusals: refusals, keeping: plan.keeping)
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
        batched: Bool = true, onRefused: (@Sendable () -> Void)? = nil
    ) async throws -> FeedSubscriber {
        var refusals: RefusalWatch?
        if credentials != nil { refusals = try await RefusalWatch(context: context, onRefused: onRefused) }
        let plan = Self.plan(topics, batched: batched)
        do {
            return FeedSubscriber(
                socket: try await SocketLoop.start(
                    context: context, type: .sub, name: "skillbus-feed",
                    configure: configure(endpoint, plan.subscriptions, credentials, refusals)),
                refusals: refusals, keeping: plan.keeping)
        } catch {
            refusals?.stop()
            throw error
        }
    }

    private static func configure(
        _ endpoint: String, _ subscriptions: [[UInt8]], _ credentials: CurveCredentials?, _ refusals: RefusalWatch?
    ) -> @Sendable (ZMQSocket) throws -> Void {
        { socket in
            if let credentials { try socket.useCurveClient(credentials) }
            try refusals?.watch(socket)
            try socket.setMaxMessageSize(Wire.subscriberHardCap)
            for subscription in subscriptions { try socket.subscribe(bytes: subscription) }
            // A group's feeds, all at once: only the leader publishes, so its events come whichever it is (§7).
            for feed in Endpoint.list(endpoint) { try socket.connect(feed) }
        }
    }

    /// Events as they arrive, in order; what is not an event (§7) is skipped. Ends when closed.
    public var events: some AsyncSequence<(topic: String, event: JSONValue), Never> {
        FeedEvents(batches: FeedBatches(messages: socket.messages, keeping: keeping))
    }

    /// The same events a message at a time (under load a batch holds a pass of the coordinator's loop, §7): for a
    /// consumer that does one thing per batch, such as one write of all its lines. Never an empty batch.
    public var batches: some AsyncSequence<[(topic: String, event: JSONValue)], Never> {
        FeedBatches(messages: socket.messages, keeping: keeping)
    }

    /// Stops watching; `events` ends. Returns at once, never blocks.
    public func close() {
        socket.stop()
        refusals?.stop()
    }
}

/// The events of a feed subscriber's messages, a message's at a time: one, or each line of a batch (PROTOCOL §7).
struct FeedBatches: AsyncSequence, Sendable {
    typealias Element = [(topic: String, event: JSONValue)]

    let messages: AsyncStream<Multipart>
    let keeping: [[UInt8]]?

    struct AsyncIterator: AsyncIteratorProtocol {
        var messages: AsyncStream<Multipart>.AsyncIterator
        let keeping: [[UInt8]]?

        mutating func next() async -> Element? {
            while let message = await messages.next() {
                let events = FeedEvents.events(of: message, keeping: keeping)
                if !events.isEmpty { return events }
            }
            return nil
        }
    }

    func makeAsyncIterator() -> AsyncIterator {
        AsyncIterator(messages: messages.makeAsyncIterator(), keeping: keeping)
    }
}

/// The events of a feed subscriber's messages one by one.
struct FeedEvents: AsyncSequence, Sendable {
    typealias Element = (topic: String, event: JSONValue)

    let batches: FeedBatches

    struct AsyncIterator: AsyncIteratorProtocol {
        var batches: FeedBatches.AsyncIterator
        /// The rest of the last batch, last event first.
        var pending: [Element] = []

        mutating func next() async -> Element? {
            while pending.isEmpty {
                guard let batch = await batches.next() else { return nil }
                pending = batch.reversed()
            }
            return pending.removeLast()
        }
    }

    func makeAsyncIterator() -> AsyncIterator { AsyncIterator(batches: batches.makeAsyncIterator()) }

    /// `[topic, JSON]`, or a batch `["+" PREFIX NUL, lines]` whose every line is an event with its topic in
    /// `type`; events whose topic starts with none of `keeping` (when given) are left out.
    static func events(of message: Multipart, keeping: [[UInt8]]?) -> [Element] {
        guard message.count == 2 else { return [] }
        guard message[0].first == Wire.feedBatchMark else {
            guard let event = try? JSONValue(parsing: message[1]) else { return [] }
            return [(String(decoding: message[0], as: UTF8.self), event)]
        }
        return message[1].split(separator: UInt8(ascii: "\n")).compactMap { line -> Element? in
            guard let event = try? JSONValue(parsing: Array(line)), let topic = event["type"]?.stringValue else {
                return nil
            }
            if let keeping, !keeping.contains(where: { topic.utf8.starts(with: $0) }) { return nil }
            return (topic, event)
        }
    }
}
