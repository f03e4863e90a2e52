/// One coordinator of a group as the others find it (PROTOCOL §3.11): its name and what it advertises. A dashboard
/// whose own coordinator stops answering asks the other members' dashboards which of them leads.
public struct GroupMember: Sendable, Equatable {
    public var name: String
    /// Its dashboard's URL (`ha.advertise.http`); nil: it serves no HTTP.
    public var http: String?
    public var bus: String
    public var feed: String

    public init(name: String, http: String?, bus: String, feed: String) {
        self.name = name
        self.http = http
        self.bus = bus
        self.feed = feed
    }

    public var json: JSONValue {
        .object([
            "name": .string(name), "http": http.map(JSONValue.string) ?? .null, "bus": .string(bus),
            "feed": .string(feed),
        ])
    }
}

/// The members table, kept on the election's thread and connection: each coordinator notes itself about once a
/// lease, and reads who else was seen within the last few of their leases.
extension LeaderElection {
    /// A member not seen for this many of its own leases is left out (stopped, or cut off from the database).
    static let membersLeases = 3

    /// Notes this coordinator and reads the members; a failure keeps the last list (the lease's own statements
    /// decide what a failing database means).
    func refreshMembers(_ database: PostgresConnection) {
        do throws(SkillbusError) {
            try database.run(
                "member", Self.noteMember,
                [
                    .text(settings.group), .text(me.name), me.http.map { .text($0) } ?? .null, .text(me.bus),
                    .text(me.feed), .integer(Int64(settings.leaseMs)),
                ])
            var found: [GroupMember] = []
            try database.run("members", Self.readMembers, [.text(settings.group), .integer(Int64(Self.membersLeases))])
            {
                row in
                found.append(
                    GroupMember(
                        name: row.text(0), http: row.isNull(1) ? nil : row.text(1), bus: row.text(2), feed: row.text(3))
                )
            }
            members.withLock { $0 = found }
        } catch {
            logger.debug("election: the members of group '\(settings.group)': \(error.message)")
        }
    }

    static let noteMember =
        "INSERT INTO skillbus_members (grp, name, http, bus, feed, seen, lease_ms) VALUES ($1, $2, $3, $4, $5, now(), $6) "
        + "ON CONFLICT (grp, name) DO UPDATE SET http = excluded.http, bus = excluded.bus, feed = excluded.feed, "
        + "seen = excluded.seen, lease_ms = excluded.lease_ms"
    static let readMembers =
        "SELECT name, http, bus, feed FROM skillbus_members "
        + "WHERE grp = $1 AND seen > now() - $2::bigint * lease_ms * interval '1 millisecond' ORDER BY name"
}
