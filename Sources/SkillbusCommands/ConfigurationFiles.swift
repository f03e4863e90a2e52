import Skillbus

/// The file forms `up` and `bench` write for the processes they start (read back by `load(path:)`).
extension CoordinatorConfiguration {
    /// The file form, `{"version": 1, …}`.
    public var json: JSONValue {
        var object: [String: JSONValue] = [
            "version": 1, "bus": .string(bus), "feed": .string(feed), "heartbeatMs": .number(Double(heartbeatMs)),
            "missedHeartbeats": .number(Double(missedHeartbeats)),
            "defaultTimeoutMs": .number(Double(defaultTimeoutMs)),
            "queueLimit": .number(Double(queueLimit)), "maxMessageBytes": .number(Double(maxMessageBytes)),
            "deduplication": .bool(deduplication), "roundRetentionMs": .number(Double(roundRetentionMs)),
            "retainedOutcomesLimit": .number(Double(retainedOutcomesLimit)),
            "retainedRoundsLimit": .number(Double(retainedRoundsLimit)),
            "planStepLimit": .number(Double(planStepLimit)), "cancelGraceMs": .number(Double(cancelGraceMs)),
            "maxOutputBytes": .number(Double(maxOutputBytes)), "maxRoundOutputBytes": .number(Double(maxRoundOutputBytes)),
        ]
        if let security { object["security"] = security.json }
        if insecure { object["insecure"] = true }
        if let dataDir { object["dataDir"] = .string(dataDir) }
        object["journalBytesLimit"] = .number(Double(journalBytesLimit))
        object["startupGraceMs"] = .number(Double(startupGraceMs))
        return .object(object)
    }
}

extension WorkerConfiguration {
    public var json: JSONValue {
        var object: [String: JSONValue] = [
            "version": 1, "name": .string(name), "coordinator": .string(coordinator),
            "skills": .array(skills.map { .string($0) }), "capacity": .number(Double(capacity)),
            "heartbeatMs": .number(Double(heartbeatMs)), "maxMessageBytes": .number(Double(maxMessageBytes)),
            "flushIntervalMs": .number(Double(flushIntervalMs)),
            "maxMemoryValueBytes": .number(Double(maxMemoryValueBytes)),
            "maxOutputBytes": .number(Double(maxOutputBytes)),
        ]
        if let sandbox { object["sandbox"] = .string(sandbox) }
        if let dataDir { object["dataDir"] = .string(dataDir) }
        if let planner { object["planner"] = planner }
        if let feed { object["feed"] = .string(feed) }
        if let serverKey { object["serverKey"] = .string(serverKey) }
        if let key { object["key"] = .string(key) }
        if !commands.isEmpty { object["commands"] = .array(commands.map(\.json)) }
        if !policies.isEmpty { object["policies"] = policies.json }
        return .object(object)
    }
}
