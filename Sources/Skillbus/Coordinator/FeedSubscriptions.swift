/// What the feed's subscribers asked for. The feed XPUB runs in manual mode (ZMQ_XPUB_MANUAL): libzmq
/// hands every subscription and unsubscription to the coordinator, which decides which take effect, so
/// that a giant topic prefix never enters libzmq's subscription trie (a node per byte: one 4 MiB prefix
/// cost 400 MiB for good). Also lets the coordinator skip building events nobody wants. No sockets here.
struct FeedSubscriptions {
    /// How many subscriptions hold each prefix (several subscribers may share one).
    private var holders: [[UInt8]: Int] = [:]

    /// What to do with one (un)subscription message from the XPUB.
    enum Change: Equatable {
        /// Apply it to the subscriber that sent it (ZMQ_SUBSCRIBE on the XPUB).
        case subscribe([UInt8])
        /// Remove it from that subscriber (ZMQ_UNSUBSCRIBE on the XPUB).
        case unsubscribe([UInt8])
        /// Longer than `Wire.maxSubscriptionBytes`: not applied, and counted.
        case refused(bytes: Int)
        /// Neither a subscription nor an unsubscription.
        case ignored
    }

    /// Reads one message of the XPUB: its first frame is 1 (subscribe) or 0 (unsubscribe) and the prefix.
    mutating func receive(_ frame: [UInt8]) -> Change {
        guard let kind = frame.first, kind <= 1 else { return .ignored }
        let prefix = Array(frame.dropFirst())
        guard prefix.count <= Wire.maxSubscriptionBytes else {
            return kind == 1 ? .refused(bytes: prefix.count) : .ignored
        }
        if kind == 1 {
            holders[prefix, default: 0] += 1
            return .subscribe(prefix)
        }
        // An unsubscription of a prefix nobody holds (never applied, or sent twice) changes nothing.
        guard let count = holders[prefix] else { return .ignored }
        holders[prefix] = count > 1 ? count - 1 : nil
        return .unsubscribe(prefix)
    }

    var isEmpty: Bool { holders.isEmpty }

    /// Whether anyone's subscription matches `topic`.
    func wants(_ topic: [UInt8]) -> Bool {
        holders.keys.contains { topic.starts(with: $0) }
    }

    /// Whether anyone subscribes to any `request.` event (the bus only builds those for a watcher).
    var wantsRequestEvents: Bool { wantsAny(of: "request.") }

    /// Whether anyone subscribes to any `round.` or `invocation.` event (likewise).
    var wantsRoundEvents: Bool { wantsAny(of: "round.") || wantsAny(of: "invocation.") }

    /// Whether a subscription takes some topic that starts with `family` (a shorter one, "" say, takes all).
    private func wantsAny(of family: String) -> Bool {
        let topics = Array(family.utf8)
        return holders.keys.contains { topics.starts(with: $0) || $0.starts(with: topics) }
    }
}
