/// What the feed's subscribers asked for. The feed XPUB runs in manual mode (ZMQ_XPUB_MANUAL): libzmq
/// hands every subscription and unsubscription to the coordinator, which decides which take effect, so
/// that a giant topic prefix never enters libzmq's subscription trie (a node per byte: one 4 MiB prefix
/// cost 400 MiB for good). Also lets the coordinator skip building events nobody wants. No sockets here.
///
/// A subscription is either a topic prefix (one message per event) or a batch subscription, `+` PREFIX NUL
/// (PROTOCOL §7): the events of a pass whose topic starts with PREFIX, in one message whose topic frame is
/// that subscription itself. The empty prefix takes effect as the roots of every topic, so that it never
/// takes a batch (no topic starts with `+`).
struct FeedSubscriptions {
    /// How many subscriptions hold each prefix (several subscribers may share one).
    private var holders: [[UInt8]: Int] = [:]
    /// The same for batch subscriptions, by the whole subscription (the topic frame of its batches).
    private var batchHolders: [[UInt8]: Int] = [:]

    /// Every topic starts with one of these (a unit test holds PROTOCOL §7's table to them).
    static let topicRoots: [[UInt8]] = [
        "agent.", "coordinator.", "invocation.", "limits.", "registry.", "request.", "round.", "security.", "turn.",
    ].map { Array($0.utf8) }

    /// What to do with one (un)subscription message from the XPUB.
    enum Change: Equatable {
        /// Apply these to the subscriber that sent it (ZMQ_SUBSCRIBE on the XPUB).
        case subscribe([[UInt8]])
        /// Remove these from that subscriber (ZMQ_UNSUBSCRIBE on the XPUB).
        case unsubscribe([[UInt8]])
        /// Longer than `Wire.maxSubscriptionBytes`: not applied, and counted.
        case refused(bytes: Int)
        /// Neither a subscription nor an unsubscription, or one that matches nothing (a `+` without its NUL).
        case ignored
    }

    /// Reads one message of the XPUB: its first frame is 1 (subscribe) or 0 (unsubscribe) and the prefix.
    mutating func receive(_ frame: [UInt8]) -> Change {
        guard let kind = frame.first, kind <= 1 else { return .ignored }
        let prefix = Array(frame.dropFirst())
        guard prefix.count <= Wire.maxSubscriptionBytes else {
            return kind == 1 ? .refused(bytes: prefix.count) : .ignored
        }
        if prefix.first == Wire.feedBatchMark {
            guard prefix.count >= 2, prefix.last == 0 else { return .ignored }
            return Self.count(kind == 1, prefix, in: &batchHolders) ? change(kind, [prefix]) : .ignored
        }
        // An unsubscription of a prefix nobody holds (never applied, or sent twice) changes nothing.
        guard Self.count(kind == 1, prefix, in: &holders) else { return .ignored }
        let applied = prefix.isEmpty ? Self.topicRoots : [prefix]
        guard kind == 0 else { return .subscribe(applied) }
        // libzmq keeps one entry per prefix and subscriber, so "" (applied as the roots) and a root held beside it
        // share one: an unsubscription removes only what no subscription still applies. A prefix left to a
        // subscriber that no longer asked for it costs messages its SUB socket drops; one removed too many would
        // lose events it asked for.
        let removed =
            prefix.isEmpty
            ? applied.filter { holders[$0] == nil }
            : applied.filter { holders[[]] == nil || !Self.topicRoots.contains($0) }
        return removed.isEmpty ? .ignored : .unsubscribe(removed)
    }

    private func change(_ kind: UInt8, _ prefixes: [[UInt8]]) -> Change {
        kind == 1 ? .subscribe(prefixes) : .unsubscribe(prefixes)
    }

    /// Counts a subscription in or out of `holders`; false for an unsubscription of one nobody holds.
    private static func count(_ subscribing: Bool, _ key: [UInt8], in holders: inout [[UInt8]: Int]) -> Bool {
        if subscribing {
            holders[key, default: 0] += 1
            return true
        }
        guard let count = holders[key] else { return false }
        holders[key] = count > 1 ? count - 1 : nil
        return true
    }

    var isEmpty: Bool { holders.isEmpty && batchHolders.isEmpty }

    /// Whether anyone's subscription for events one by one matches `topic`.
    func wants(_ topic: [UInt8]) -> Bool {
        holders.keys.contains { topic.starts(with: $0) }
    }

    /// The topic frames of the batches that take an event of `topic` (`+` PREFIX NUL).
    func batches(taking topic: [UInt8]) -> [[UInt8]] {
        guard !batchHolders.isEmpty else { return [] }
        return batchHolders.keys.filter { topic.starts(with: Self.batchPrefix($0)) }
    }

    /// The topic prefix of a batch subscription: what stands between `+` and NUL.
    private static func batchPrefix(_ subscription: [UInt8]) -> ArraySlice<UInt8> {
        subscription.dropFirst().dropLast()
    }

    /// Whether anyone subscribes to any `request.` event (the bus only builds those for a watcher).
    var wantsRequestEvents: Bool { wantsAny(of: "request.") }

    /// Whether anyone subscribes to any `round.` or `invocation.` event (likewise).
    var wantsRoundEvents: Bool { wantsAny(of: "round.") || wantsAny(of: "invocation.") }

    /// Whether anyone subscribes to a turn's states or calls (`agent.state`, `turn.call`).
    var wantsTurnEvents: Bool { wantsAny(of: "agent.state") || wantsAny(of: "turn.call") }

    /// Whether a subscription takes some topic that starts with `family` (a shorter one, "" say, takes all).
    private func wantsAny(of family: String) -> Bool {
        let topics = Array(family.utf8)
        let prefixes = Array(holders.keys.map { $0[...] }) + batchHolders.keys.map(Self.batchPrefix)
        return prefixes.contains { topics.starts(with: $0) || $0.starts(with: topics) }
    }
}
