import SkillbusZMQ

/// Watches the feed: subscribes to topic prefixes and yields each event as (topic, JSON body).
public final class FeedSubscriber: Sendable {
    private let socket: SocketLoop

    public init(endpoint: String, topics: [String], context: ZMQContext) throws {
        socket = try SocketLoop(
            context: context, type: .sub, name: "skillbus-feed",
            configure: { socket in
                for topic in topics.isEmpty ? [""] : topics { try socket.subscribe(topic) }
                try socket.connect(endpoint)
            })
    }

    /// Events as they arrive; messages that are not [topic, JSON] are skipped. Ends when closed.
    public var events: some AsyncSequence<(topic: String, event: JSONValue), Never> {
        socket.messages.compactMap { message -> (topic: String, event: JSONValue)? in
            guard message.count == 2, let event = try? JSONValue(parsing: message[1]) else { return nil }
            return (String(decoding: message[0], as: UTF8.self), event)
        }
    }

    public func close() { socket.stop() }
}
