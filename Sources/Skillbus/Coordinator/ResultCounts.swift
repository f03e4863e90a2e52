/// How many RESULTs of one skill an agent returned, by the status its caller got (PROTOCOL §5.13): the
/// totals `skillbus top` shows and turns into rates.
public struct ResultCounts: Sendable, Equatable {
    public var ok = 0
    public var error = 0

    public init(ok: Int = 0, error: Int = 0) {
        self.ok = ok
        self.error = error
    }

    mutating func record(_ status: ReplyStatus) {
        if status == .ok { ok += 1 } else { error += 1 }
    }

    static func + (left: ResultCounts, right: ResultCounts) -> ResultCounts {
        ResultCounts(ok: left.ok + right.ok, error: left.error + right.error)
    }

    static func += (left: inout ResultCounts, right: ResultCounts) { left = left + right }

    var json: JSONValue { ["ok": .number(Double(ok)), "error": .number(Double(error))] }
}
