/// The leader of a coordinator group as others should reach it (PROTOCOL §3.11): what a standby's `not_leader`
/// refusal, the feed's `coordinator.leader` and AGENTS name, so clients and workers can follow it.
public struct GroupLeader: Sendable, Equatable {
    /// The coordinator's name in its group (its `ha.name`, else its host name).
    public var name: String
    /// The endpoints clients and workers connect to, as the leader advertises them.
    public var bus: String
    public var feed: String
    /// Rises by one with every change of leader; a coordinator whose epoch is not the group's writes nothing.
    public var epoch: Int
    /// When this coordinator took the lead, ISO 8601 UTC with milliseconds (`FeedEvent.timestamp`).
    public var since: String
    /// Its dashboard's URL (`ha.advertise.http`), which the group's dashboards move to; nil: it serves no HTTP.
    public var http: String?

    public init(name: String, bus: String, feed: String, epoch: Int, since: String, http: String? = nil) {
        self.name = name
        self.bus = bus
        self.feed = feed
        self.epoch = epoch
        self.since = since
        self.http = http
    }

    public var json: JSONValue {
        var object: [String: JSONValue] = [
            "name": .string(name), "bus": .string(bus), "feed": .string(feed), "epoch": .number(Double(epoch)),
            "since": .string(since),
        ]
        if let http { object["http"] = .string(http) }
        return .object(object)
    }

    /// Reads the object `json` writes; nil when a member is missing or of the wrong type.
    public init?(json: JSONValue) {
        guard let name = json["name"]?.stringValue, let bus = json["bus"]?.stringValue,
            let feed = json["feed"]?.stringValue, let epoch = json["epoch"]?.intValue,
            let since = json["since"]?.stringValue
        else { return nil }
        self.init(name: name, bus: bus, feed: feed, epoch: epoch, since: since, http: json["http"]?.stringValue)
    }
}

extension SkillbusError {
    /// A standby's answer to every message (PROTOCOL §3.11): who leads, when it is known.
    public static func notLeader(group: String, standby: String, leader: GroupLeader?) -> SkillbusError {
        var details: [String: JSONValue] = ["group": .string(group), "leader": leader?.json ?? .null]
        let message: String
        if let leader {
            details["epoch"] = .number(Double(leader.epoch))
            message =
                "coordinator '\(standby)' is a standby of group '\(group)'; the leader is '\(leader.name)' at "
                + "\(leader.bus) (epoch \(leader.epoch))"
        } else {
            details["epoch"] = .null
            message = "coordinator '\(standby)' is a standby of group '\(group)'; no leader is known yet"
        }
        return SkillbusError(.notLeader, message, details: .object(details))
    }

    /// The leader a `not_leader` refusal names; nil for other errors and while the group has none.
    public var leader: GroupLeader? {
        guard code == .notLeader, let leader = details?["leader"] else { return nil }
        return GroupLeader(json: leader)
    }
}
