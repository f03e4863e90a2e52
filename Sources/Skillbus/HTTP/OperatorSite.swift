import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// What the operator endpoint answers (`GET /`, `/metrics`, `/state`, `/sessions`, `/events`, `/group`), and what its
/// event streams carry. Lives on the HTTP thread; reads the bus only through the `OperatorBoard`.
final class OperatorSite: HTTPSite {
    let board: OperatorBoard
    private var rounds = RecentRounds()
    private var sessions = RecentSessions()
    /// The agents part of the last snapshot streamed, to send `agents` only when it changed.
    private var lastAgents: JSONValue?
    private var droppedEvents = 0

    static let paths: Set<String> = ["/", "/metrics", "/state", "/sessions", "/events", "/group"]

    init(board: OperatorBoard) { self.board = board }

    /// Its pages take no request body.
    var maxBodyBytes: Int { 0 }

    func respond(to request: HTTPRequest, on connection: HTTPConnectionID) -> HTTPResponse? {
        respond(to: request.head)
    }

    func closed(_ connection: HTTPConnectionID) {}

    func respond(to head: HTTPRequestHead) -> HTTPResponse {
        guard Self.paths.contains(head.path) else {
            return .text(404, "no such page: \(head.path.prefix(200)) (there are /, /metrics, /state, /sessions, /events and /group)")
        }
        guard head.method == "GET" || head.method == "HEAD" else {
            return .text(405, "\(head.method) is not allowed on \(head.path); use GET", headers: [("Allow", "GET, HEAD")])
        }
        switch head.path {
        case "/metrics":
            return HTTPResponse(
                status: 200, contentType: MetricsExposition.contentType,
                body: Array(MetricsExposition.render(board.snapshot, extra: processMetrics()).utf8))
        case "/state":
            return HTTPResponse(
                status: 200, contentType: "application/json", body: state(board.snapshot).serialized())
        case "/group":
            // Read by the group's other dashboards, from their own origins: the only answer any page may read, so it
            // holds nothing but who leads (the endpoint has no keys: it is loopback-only unless --insecure).
            return HTTPResponse(
                status: 200, contentType: "application/json",
                body: (board.snapshot.group?.publicJSON ?? ["group": .null]).serialized(),
                headers: [("Access-Control-Allow-Origin", "*"), ("Cache-Control", "no-store")])
        case "/sessions":
            return HTTPResponse(status: 200, contentType: "application/json", body: sessions.json.serialized())
        case "/events":
            var response = HTTPResponse.eventStream
            // The reconnect delay, then the picture to start from.
            response.body = Array("retry: 2000\n\n".utf8) + Self.event("state", state(board.snapshot))
            return response
        default:
            return HTTPResponse(status: 200, contentType: "text/html; charset=utf-8", body: Array(DashboardPage.html.utf8))
        }
    }

    /// Most `feed` events of requests, rounds and invocations one collection streams; a browser cannot show
    /// thousands a second, and making them would cost the process as much as the bus's own work.
    static let feedEventsPerCollection = 200

    /// Takes the events posted since the last call and folds them into the latest rounds and sessions. While
    /// `streaming`, returns the bytes every open event stream gets: each `agent.*` (and other rare) feed event,
    /// the others up to `feedEventsPerCollection` (then one `skipped` with the count), each round that changed
    /// (once, as it stands now), and the agents when they changed.
    func collect(streaming: Bool) -> [UInt8] {
        let (posted, dropped) = board.takeEvents()
        droppedEvents = dropped
        // A set: under load nearly every REQUEST is a round of its own, thousands in one collection.
        var changed = Set<String>()
        var feed: [UInt8] = []
        var streamed = 0
        var skipped = 0
        for item in posted {
            if let round = rounds.apply(item.event), streaming { changed.insert(round.id) }
            let topic = item.event.topic
            // Only the topics a session view draws pay for their fields here (and once only, when streamed).
            var fields: [String: JSONValue]?
            if topic == "agent.left" || RecentSessions.topics.contains(topic) {
                let made = item.event.fields
                sessions.apply(topic: topic, fields: made, time: item.time)
                fields = made
            }
            guard streaming else { continue }
            let frequent = item.event.topic.hasPrefix("request.") || item.event.topic.hasPrefix("invocation.")
                || item.event.topic.hasPrefix("round.")
            if frequent && streamed >= Self.feedEventsPerCollection {
                skipped += 1
                continue
            }
            if frequent { streamed += 1 }
            var body = fields ?? item.event.fields
            body["type"] = .string(item.event.topic)
            body["time"] = .string(FeedEvent.timestamp(item.time))
            feed += Self.event("feed", .object(body))
        }
        guard streaming else { return [] }
        var bytes = feed
        if skipped > 0 { bytes += Self.event("skipped", ["events": .number(Double(skipped))]) }
        for round in rounds.newestFirst.reversed() where changed.contains(round.id) {
            bytes += Self.event("round", round.json)
        }
        let agents = agentsJSON(board.snapshot)
        if agents != lastAgents {
            lastAgents = agents
            bytes += Self.event("agents", agents)
        }
        return bytes
    }

    /// One server-sent event: its name and its JSON on one `data` line.
    static func event(_ name: String, _ data: JSONValue) -> [UInt8] {
        Array("event: \(name)\ndata: ".utf8) + data.serialized() + Array("\n\n".utf8)
    }

    private func agentsJSON(_ snapshot: BusSnapshot) -> JSONValue {
        let agents = snapshot.agents.map { agent -> JSONValue in
            var object: [String: JSONValue] = [
                "agent": .string(agent.name), "capacity": .number(Double(agent.capacity)),
                "inFlight": .number(Double(agent.inFlight)), "state": agent.state.json,
                "skills": .array(agent.skills.map { .string($0) }),
            ]
            let executed = snapshot.metrics.executions.filter { $0.key.second == agent.name }.values.reduce(0, +)
            object["executions"] = .number(Double(executed))
            return .object(object)
        }
        let skills = snapshot.providers.map { entry -> JSONValue in
            ["skill": .string(entry.skill), "providers": .array(entry.agents.map { .string($0) })]
        }
        return [
            "agents": .array(agents), "skills": .array(skills), "waiting": .number(Double(snapshot.waiting)),
            "registry": ["epoch": .string(snapshot.registryEpoch), "seq": .number(Double(snapshot.registrySequence))],
            "group": snapshot.group?.json ?? .null,
        ]
    }

    /// `GET /state`: the agents with their skills, and the latest rounds.
    private func state(_ snapshot: BusSnapshot) -> JSONValue {
        var object = agentsJSON(snapshot).objectValue ?? [:]
        object["rounds"] = .array(rounds.newestFirst.map(\.json))
        return .object(object)
    }

    /// What only this process can tell: its memory (from /proc/self/statm), and the events this side dropped.
    private func processMetrics() -> [(String, String, String, Double)] {
        var metrics: [(String, String, String, Double)] = []
        if let statm = try? String(contentsOfFile: "/proc/self/statm", encoding: .utf8) {
            let pages = statm.split(separator: " ").compactMap { Double($0) }
            let pageBytes = Double(sysconf(Int32(_SC_PAGESIZE)))
            if pages.count >= 2 {
                metrics.append(
                    ("skillbus_process_resident_memory_bytes", "Resident memory of the coordinator process.", "gauge",
                     pages[1] * pageBytes))
                metrics.append(
                    ("skillbus_process_virtual_memory_bytes", "Virtual memory of the coordinator process.", "gauge",
                     pages[0] * pageBytes))
            }
        }
        metrics.append(
            ("skillbus_http_dropped_events_total", "Feed events the HTTP side dropped because it was behind.",
             "counter", Double(droppedEvents)))
        return metrics
    }
}
