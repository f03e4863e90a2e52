import Foundation

/// Publishing an event: the two frames of its message, its body written in key order with `time` and `type`,
/// and the timestamps the feed writes.
extension FeedEvent {
    /// The two frames published: topic, then the JSON body with `type` (= topic) and `time`, its members
    /// in key order as `JSONValue` writes an object.
    public func encoded(time: Date = Date()) -> [[UInt8]] { encoded(timestamp: FeedEvent.timestamp(time)) }

    /// The same with the time already written as `timestamp` formats it.
    public func encoded(timestamp: String) -> [[UInt8]] {
        let topic = self.topic
        if let body = directBody(timestamp: timestamp, type: topic) { return [Array(topic.utf8), body] }
        // "time" < "type": each goes in before the first member whose key sorts after it.
        var added: [Member] = [("time", .string(timestamp)), ("type", .string(topic))]
        var body: [UInt8] = [UInt8(ascii: "{")]
        body.reserveCapacity(256)
        for member in members {
            while let next = added.first, next.key < member.key {
                Self.write(next, to: &body)
                added.removeFirst()
            }
            if member.key == "time" || member.key == "type" { continue }  // the published ones win
            Self.write(member, to: &body)
        }
        for member in added { Self.write(member, to: &body) }
        body.append(UInt8(ascii: "}"))
        return [Array(topic.utf8), body]
    }

    /// The body of an event that every request or round publishes, written member by member in key order
    /// (`members` builds, copies and frees a list of them first, four times a round for a watched bus);
    /// nil for the others. The same bytes as the general path (FeedEventTests); `time` and `type` sort after
    /// every member of these.
    private func directBody(timestamp: String, type: String) -> [UInt8]? {
        var body: [UInt8] = [UInt8(ascii: "{")]
        body.reserveCapacity(256)
        var members = JSONMemberWriter()
        func milliseconds(_ micros: Int) -> Double { Double(micros) / 1000 }
        switch self {
        case .roundAccepted(let round, let shape, let invocations):
            members.key("invocations", to: &body)
            body.append(UInt8(ascii: "["))
            for (index, invocation) in invocations.enumerated() {
                if index > 0 { body.append(UInt8(ascii: ",")) }
                JSONValue.writeString(invocation, to: &body)
            }
            body.append(UInt8(ascii: "]"))
            members.string("round", round, to: &body)
            members.string("shape", shape, to: &body)
        case .invocationDispatched(let round, let invocation, let skill, let agent, let dispatch):
            members.string("agent", agent, to: &body)
            members.string("dispatch", dispatch, to: &body)
            members.string("invocation", invocation, to: &body)
            members.string("round", round, to: &body)
            members.string("skill", skill, to: &body)
        case .invocationDone(let round, let invocation, let skill, let agent, let status, let micros, let deduplicated):
            members.string("agent", agent, to: &body)
            members.value("deduplicated", .bool(deduplicated), to: &body)
            members.number("durationMs", milliseconds(micros), to: &body)
            members.string("invocation", invocation, to: &body)
            members.string("round", round, to: &body)
            members.string("skill", skill, to: &body)
            members.string("status", status.documentName, to: &body)
        case .roundDone(let round, let status, let summary):
            members.string("round", round, to: &body)
            members.string("status", status.rawValue, to: &body)
            members.key("summary", to: &body)
            summary.write(to: &body)
        case .requestDispatched(let round, let request, let skill, let agent, let invocation):
            members.string("agent", agent, to: &body)
            members.string("invocation", invocation, to: &body)
            members.string("request", request, to: &body)
            members.string("round", round, to: &body)
            members.string("skill", skill, to: &body)
        case .requestDone(let round, let request, let skill, let agent, let status, let micros, let payload):
            members.string("agent", agent, to: &body)
            members.number("durationMs", milliseconds(micros), to: &body)
            if status == .error { members.value("error", try? JSONValue(parsing: payload), to: &body) }
            members.string("request", request, to: &body)
            members.string("round", round, to: &body)
            members.string("skill", skill, to: &body)
            members.string("status", status.rawValue, to: &body)
        default:
            return nil
        }
        members.string("time", timestamp, to: &body)
        members.string("type", type, to: &body)
        body.append(UInt8(ascii: "}"))
        return body
    }

    /// One member after the object's `{` or a previous member.
    private static func write(_ member: Member, to body: inout [UInt8]) {
        if body.count > 1 { body.append(UInt8(ascii: ",")) }
        JSONValue.writeString(member.key, to: &body)
        body.append(UInt8(ascii: ":"))
        member.value.write(to: &body)
    }

    /// ISO 8601 UTC with milliseconds, for example `2026-11-29T12:00:00.123Z`.
    public static func timestamp(_ date: Date) -> String {
        timestamp(milliseconds: Int64((date.timeIntervalSince1970 * 1000).rounded(.down)))
    }

    /// The same for milliseconds since 1970.
    public static func timestamp(milliseconds: Int64) -> String {
        var seconds = time_t(milliseconds / 1000)
        var parts = tm()
        gmtime_r(&seconds, &parts)
        let year = Int(parts.tm_year) + 1900
        if milliseconds >= 0, year <= 9999 {
            // Digit by digit into one buffer: every state of every turn is stamped, and the padded pieces
            // below cost a dozen small strings each time.
            var text = Array("0000-00-00T00:00:00.000Z".utf8)
            func put(_ value: Int, endingAt end: Int, width: Int) {
                var value = value
                for index in stride(from: end, to: end - width, by: -1) {
                    text[index] = UInt8(ascii: "0") + UInt8(value % 10)
                    value /= 10
                }
            }
            put(year, endingAt: 3, width: 4)
            put(Int(parts.tm_mon) + 1, endingAt: 6, width: 2)
            put(Int(parts.tm_mday), endingAt: 9, width: 2)
            put(Int(parts.tm_hour), endingAt: 12, width: 2)
            put(Int(parts.tm_min), endingAt: 15, width: 2)
            put(Int(parts.tm_sec), endingAt: 18, width: 2)
            put(Int(milliseconds % 1000), endingAt: 22, width: 3)
            return String(decoding: text, as: UTF8.self)
        }
        func pad(_ value: Int32, _ width: Int) -> String {
            let text = String(value)
            return String(repeating: "0", count: max(0, width - text.count)) + text
        }
        return "\(pad(parts.tm_year + 1900, 4))-\(pad(parts.tm_mon + 1, 2))-\(pad(parts.tm_mday, 2))T"
            + "\(pad(parts.tm_hour, 2)):\(pad(parts.tm_min, 2)):\(pad(parts.tm_sec, 2))."
            + "\(pad(Int32(milliseconds % 1000), 3))Z"
    }
}

/// The feed's timestamp of now, formatted once per millisecond: a watched bus stamps four events a round.
struct FeedClock {
    private var millisecond: Int64 = .min
    private var text = ""

    mutating func now() -> String {
        let now = Int64((Date().timeIntervalSince1970 * 1000).rounded(.down))
        if now != millisecond {
            millisecond = now
            text = FeedEvent.timestamp(milliseconds: now)
        }
        return text
    }
}
