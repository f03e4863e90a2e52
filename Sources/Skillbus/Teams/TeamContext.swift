/// Where a turn stands in a team (TURN field 8, PROTOCOL §3.7.1): asked by another agent's turn (a nested
/// turn), or handed over by another agent (a handoff). Absent for a turn a client asked for.
public struct TeamContext: Sendable, Equatable {
    /// The turn that asked this one, its agent, and how deep this one is (1: asked by a client's turn).
    public var parentTurnID: String?
    public var caller: String?
    public var depth: Int
    /// The agent that handed the conversation over, with its note and its turn's document.
    public var handoff: Handoff?

    public struct Handoff: Sendable, Equatable {
        public var from: String
        public var note: String
        /// The handing agent's turn document (§5.18): what it did before it handed over.
        public var transcript: JSONValue

        public init(from: String, note: String, transcript: JSONValue) {
            self.from = from
            self.note = note
            self.transcript = transcript
        }
    }

    public init(parentTurnID: String? = nil, caller: String? = nil, depth: Int = 0, handoff: Handoff? = nil) {
        self.parentTurnID = parentTurnID
        self.caller = caller
        self.depth = depth
        self.handoff = handoff
    }

    /// `{"parent", "caller", "depth"}` for a nested turn, `{"handoff": {"from", "note", "turn"}}` for one handed
    /// over (both when a nested turn was handed over).
    public var json: JSONValue {
        var object: [String: JSONValue] = [:]
        if let parentTurnID {
            object["parent"] = .string(parentTurnID)
            object["caller"] = .string(caller ?? "")
            object["depth"] = .number(Double(depth))
        }
        if let handoff {
            object["handoff"] = [
                "from": .string(handoff.from), "note": .string(handoff.note), "turn": handoff.transcript,
            ]
        }
        return .object(object)
    }

    public init(json: JSONValue) throws(SkillbusError) {
        guard json.objectValue != nil else {
            throw SkillbusError(.malformedMessage, "field 8 of TURN (team) must be a JSON object")
        }
        self.init(parentTurnID: json["parent"]?.stringValue, caller: json["caller"]?.stringValue,
            depth: json["depth"]?.intValue ?? 0)
        if let value = json["handoff"] {
            guard let from = value["from"]?.stringValue, let note = value["note"]?.stringValue else {
                throw SkillbusError(.malformedMessage, "field 8 of TURN: 'handoff' needs 'from' and 'note' strings")
            }
            handoff = Handoff(from: from, note: note, transcript: value["turn"] ?? .null)
        }
    }
}

/// A turn hands its session over to another agent (TURNEND field 5): who takes it, and the note for it.
public struct HandoffRequest: Sendable, Equatable {
    public var to: AgentTarget
    public var note: String

    public init(to: AgentTarget, note: String) {
        self.to = to
        self.note = note
    }

    public var json: JSONValue { ["to": .string(to.text), "note": .string(note)] }

    public init(json: JSONValue) throws(SkillbusError) {
        guard let text = json["to"]?.stringValue, let to = AgentTarget(text) else {
            throw SkillbusError(.malformedMessage, "field 5 of TURNEND (handoff) needs 'to', an agent or role:NAME")
        }
        self.init(to: to, note: json["note"]?.stringValue ?? "")
    }
}
