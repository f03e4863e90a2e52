/// A round document written straight to bytes: the same bytes as `json.serialized()` (compact, keys
/// sorted), without building a `JSONValue` tree of dictionaries and sorting their keys for every round.
/// Members are written in sorted order by hand; RoundDocumentWritingTests holds the two paths equal.
extension RoundDocument {
    public func serialized() -> [UInt8] {
        var out: [UInt8] = []
        // Results come twice in a fan-out's document (each invocation's, then the aggregate's entries).
        let results = invocations.reduce(0) { $0 + $1.resultByteEstimate }
        out.reserveCapacity(256 + invocations.count * 224 + 2 * results)
        write(to: &out)
        return out
    }

    func write(to out: inout [UInt8]) {
        var members = JSONMemberWriter()
        out.append(UInt8(ascii: "{"))
        if Self.alwaysNamesAgent(shape) || agent != nil { members.string("agent", agent, to: &out) }
        if let vote { members.value("aggregate", vote.json, to: &out) }
        members.number("durationMs", durationMs, to: &out)
        members.value("error", error?.json, to: &out)
        members.key("invocations", to: &out)
        out.append(UInt8(ascii: "["))
        for (index, invocation) in invocations.enumerated() {
            if index > 0 { out.append(UInt8(ascii: ",")) }
            invocation.write(to: &out)
        }
        out.append(UInt8(ascii: "]"))
        members.json("result", resultJSON, to: &out)
        members.string("round", round, to: &out)
        members.string("shape", shape, to: &out)
        members.string("status", status.rawValue, to: &out)
        members.key("summary", to: &out)
        summary.write(to: &out)
        out.append(UInt8(ascii: "}"))
    }
}

extension RoundDocument.Invocation {
    /// The bytes its result takes when they are held as bytes (a parsed one counts as small).
    var resultByteEstimate: Int {
        if case .canonical(let bytes)? = resultJSON { bytes.count } else { 16 }
    }

    func write(to out: inout [UInt8]) {
        var members = JSONMemberWriter()
        out.append(UInt8(ascii: "{"))
        members.string("agent", agent, to: &out)
        if let asked {
            members.value(
                "ask", ["to": .string(asked.text), "message": message.map { .string($0) } ?? .null], to: &out)
        }
        if !attempts.isEmpty { members.value("attempts", .array(attempts.map(\.json)), to: &out) }
        if cached { members.value("cached", true, to: &out) }
        members.value("deduplicated", .bool(deduplicated), to: &out)
        members.number("durationMs", durationMs, to: &out)
        members.value("error", error?.json, to: &out)
        members.string("id", id, to: &out)
        if !output.isEmpty { members.value("output", .array(output.map(\.json)), to: &out) }
        if outputTruncated { members.value("outputTruncated", true, to: &out) }
        members.json("result", resultJSON, to: &out)
        members.string("reusedFrom", reusedFrom, to: &out)
        members.string("skill", skill, to: &out)
        members.string("status", status.documentName, to: &out)
        if asked != nil { members.json("turn", turnJSON, to: &out) }
        out.append(UInt8(ascii: "}"))
    }
}

extension RoundDocument {
    /// A fan-out's `all` result: one entry per agent, in agent order, with its result as it is held.
    static func agentEntries(_ invocations: [Invocation]) -> DocumentJSON {
        var out: [UInt8] = []
        out.reserveCapacity(invocations.reduce(2) { $0 + 96 + $1.id.utf8.count + $1.resultByteEstimate })
        out.append(UInt8(ascii: "["))
        for (index, invocation) in invocations.enumerated() {
            if index > 0 { out.append(UInt8(ascii: ",")) }
            var members = JSONMemberWriter()
            out.append(UInt8(ascii: "{"))
            members.string("agent", invocation.id, to: &out)
            members.value("error", invocation.error?.json, to: &out)
            members.json("result", invocation.resultJSON, to: &out)
            members.string("status", invocation.status.documentName, to: &out)
            out.append(UInt8(ascii: "}"))
        }
        out.append(UInt8(ascii: "]"))
        return .canonical(out)
    }

    /// A plan's result: each step that succeeded, by step id (sorted as `JSONValue` sorts keys).
    static func stepResults(_ steps: [Invocation]) -> DocumentJSON {
        var out: [UInt8] = [UInt8(ascii: "{")]
        // Their indices sorted, not copies of the steps.
        let succeeded = steps.indices.filter { steps[$0].status == .ok }.sorted { steps[$0].id < steps[$1].id }
        for (index, step) in succeeded.enumerated() {
            if index > 0 { out.append(UInt8(ascii: ",")) }
            JSONValue.writeString(steps[step].id, to: &out)
            out.append(UInt8(ascii: ":"))
            if let result = steps[step].resultJSON {
                result.write(to: &out)
            } else {
                out.append(contentsOf: "null".utf8)
            }
        }
        out.append(UInt8(ascii: "}"))
        return .canonical(out)
    }
}

extension RoundDocument.Summary {
    func write(to out: inout [UInt8]) {
        var members = JSONMemberWriter()
        out.append(UInt8(ascii: "{"))
        members.number("deduplicated", Double(deduplicated), to: &out)
        members.number("executions", Double(executions), to: &out)
        members.number("failed", Double(failed), to: &out)
        members.number("invocations", Double(invocations), to: &out)
        members.number("totalMs", totalMs, to: &out)
        out.append(UInt8(ascii: "}"))
    }
}

extension RoundDocument {
    /// Whether a document as the bus writes it (§5.14: compact, keys sorted) says `"status":"ok"`, read from
    /// its tail without parsing it: the top-level object ends with `status`, perhaps `stored`, then `summary`,
    /// an object of numbers, so the last `,"summary":{` is the top level's. For a client that needs only the
    /// status (a load generator); nil when the document does not end that way.
    public static func tailSaysOK(_ document: [UInt8]) -> Bool? {
        let summary = Array(#","summary":{"#.utf8)
        guard let end = document.lastRange(of: summary) else { return nil }
        let head = document[..<end]
        for status in [#""status":"ok""#, #""status":"error""#] {
            for stored in ["", #","stored":true"#] where head.ends(with: Array((status + stored).utf8)) {
                return status == #""status":"ok""#
            }
        }
        return nil
    }
}

extension RoundDocument {
    /// Whether a document says `"status":"ok"`: from its tail when it ends as the bus writes it, else parsed.
    public static func saysOK(_ document: [UInt8]) -> Bool {
        tailSaysOK(document) ?? ((try? JSONValue(parsing: document))?["status"] == "ok")
    }
}

extension Array where Element == UInt8 {
    /// Where the last occurrence of `needle` starts.
    fileprivate func lastRange(of needle: [UInt8]) -> Int? {
        guard !needle.isEmpty, count >= needle.count else { return nil }
        var start = count - needle.count
        while start >= 0 {
            if self[start] == needle[0] && self[start..<start + needle.count].elementsEqual(needle) { return start }
            start -= 1
        }
        return nil
    }
}

extension ArraySlice where Element == UInt8 {
    fileprivate func ends(with suffix: [UInt8]) -> Bool {
        count >= suffix.count && self[(endIndex - suffix.count)...].elementsEqual(suffix)
    }
}

extension JSONMemberWriter {
    /// A result as the document holds it (written as it came, or `null`).
    mutating func json(_ name: StaticString, _ value: DocumentJSON?, to out: inout [UInt8]) {
        key(name, to: &out)
        if let value { value.write(to: &out) } else { out.append(contentsOf: "null".utf8) }
    }
}
