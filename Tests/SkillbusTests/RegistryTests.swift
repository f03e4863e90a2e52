import Testing

@testable import Skillbus

/// The registry value, the replica's Clone-pattern rules, and the coordinator's registry decisions:
/// all without sockets.
@Suite("Registry, replica sync and registry decisions")
struct RegistryTests {
    static func skill(_ identifier: String, _ fields: [ParameterField] = [], description: String = "")
        -> SkillDescriptor
    {
        SkillDescriptor(
            identifier: identifier, displayName: identifier, description: description,
            parameters: ParameterSchema(fields))
    }

    static func agent(_ name: String, _ skills: [String], capacity: Int = 2) -> Registry.Agent {
        Registry.Agent(name: name, capacity: capacity, skills: skills.map { skill($0) })
    }

    /// A ledger that has seen `count` changes, and the updates it published.
    static func history(_ count: Int) -> (RegistryLedger, [RegistryUpdate]) {
        var ledger = RegistryLedger(epoch: "e1")
        var updates: [RegistryUpdate] = []
        for index in 0..<count {
            let name = "agent\(index % 7)"
            let entry = index % 5 == 4 ? nil : agent(name, ["s\(index % 3)", "t\(index % 11)"])
            if let update = ledger.set(name, to: entry, reason: "test") { updates.append(update) }
        }
        return (ledger, updates)
    }

    @Test("the per-skill view follows agent entries: providers sorted, skills gone with their last provider")
    func derivedSkills() {
        var registry = Registry()
        registry.set("beta", to: Self.agent("beta", ["echo", "sleep"]))
        let change = registry.set("alpha", to: Self.agent("alpha", ["echo"]))
        #expect(change.provided == ["echo"] && change.withdrawn.isEmpty)
        #expect(registry.skills["echo"]?.providers == ["alpha", "beta"])
        let removal = registry.set("beta", to: nil)
        #expect(removal.withdrawn == ["echo", "sleep"])
        #expect(registry.skills["sleep"] == nil)
        #expect(registry.skills["echo"]?.providers == ["alpha"])
        #expect(registry == Registry(agents: [Self.agent("alpha", ["echo"])]))
    }

    @Test("the digest is the same for the same contents in any order and changes with any field")
    func digest() {
        let one = Registry(agents: [Self.agent("a", ["x"]), Self.agent("b", ["y"])])
        let two = Registry(agents: [Self.agent("b", ["y"]), Self.agent("a", ["x"])])
        #expect(one.digest == two.digest && one.digest.count == 16)
        #expect(one.digest != Registry(agents: [Self.agent("a", ["x"]), Self.agent("b", ["y"], capacity: 3)]).digest)
        #expect(Registry().digest != one.digest)
    }

    @Test("entries and updates survive their JSON form; a bad entry is refused")
    func codec() throws {
        let entry = Registry.Agent(
            name: "alpha", capacity: 3,
            skills: [
                SkillDescriptor(
                    identifier: "echo", displayName: "Echo", description: "d",
                    parameters: ParameterSchema([ParameterField("text", .string)]), defaultTimeoutMs: 500,
                    metadata: ["tags": ["demo"]])
            ])
        #expect(try Registry.Agent(json: entry.json) == entry)
        let update = RegistryUpdate(
            epoch: "e", sequence: 4, agent: "alpha", entry: entry, provided: ["echo"], reason: "joined")
        #expect(try RegistryUpdate(json: .object(update.fields)) == update)
        let gone = RegistryUpdate(epoch: "e", sequence: 5, agent: "alpha", entry: nil, withdrawn: ["echo"])
        #expect(try RegistryUpdate(json: .object(gone.fields)) == gone)
        #expect(throws: SkillbusError.self) { try Registry.Agent(json: ["agent": "a", "capacity": 0, "skills": []]) }
        #expect(throws: SkillbusError.self) {
            try RegistryUpdate(json: ["epoch": "e", "seq": 0, "agent": "a", "entry": .null])
        }
        var foreign = update.fields
        foreign["agent"] = "beta"
        #expect(throws: SkillbusError.self) { try RegistryUpdate(json: .object(foreign)) }
    }

    @Test("the ledger numbers each real change once and publishes nothing for no change")
    func ledger() {
        var ledger = RegistryLedger(epoch: "e1")
        #expect(ledger.set("a", to: Self.agent("a", ["x"]), reason: "joined")?.sequence == 1)
        #expect(ledger.set("a", to: Self.agent("a", ["x"]), reason: "joined") == nil)
        #expect(ledger.set("b", to: nil, reason: "left") == nil)
        #expect(ledger.set("a", to: nil, reason: "left")?.sequence == 2)
        #expect(ledger.position().sequence == 2 && ledger.position().digest == Registry().digest)
    }

    // MARK: Replica rules

    @Test("a replica that joins after 1,000 updates equals the ledger: snapshot plus queued updates")
    func lateJoiner() {
        let (ledger, updates) = Self.history(1000)
        let snapshotAt = 600
        var (early, _) = Self.history(0)
        for update in updates.prefix(snapshotAt) { _ = early.set(update.agent, to: update.entry, reason: "") }
        var replica = ReplicaSync()
        // Subscribed first: updates 550… arrive before the snapshot (taken at 600) does.
        for update in updates[550...] { #expect(replica.receive(update) == .unchanged) }
        let outcome = replica.load(
            RegistrySnapshot(epoch: "e1", sequence: UInt64(snapshotAt), registry: early.registry))
        #expect(outcome == .applied)
        #expect(replica.isSynced && replica.sequence == ledger.sequence)
        #expect(replica.registry == ledger.registry)
    }

    @Test("a gap in the sequence asks for a snapshot, and the next snapshot recovers everything")
    func gap() {
        let (ledger, updates) = Self.history(40)
        var replica = ReplicaSync()
        _ = replica.load(RegistrySnapshot(epoch: "e1", sequence: 0, registry: Registry()))
        for update in updates.prefix(10) { #expect(replica.receive(update) == .applied) }
        guard case .needsSnapshot(let reason) = replica.receive(updates[11]) else {
            Issue.record("a missing update was not noticed")
            return
        }
        #expect(reason.contains("missed updates 11"))
        #expect(!replica.isSynced)
        for update in updates[12...] { #expect(replica.receive(update) == .unchanged) }
        #expect(
            replica.load(RegistrySnapshot(epoch: "e1", sequence: 20, registry: Self.replay(updates, to: 20)))
                == .applied)
        #expect(replica.registry == ledger.registry && replica.sequence == ledger.sequence)
    }

    @Test("old, duplicate and backwards updates are ignored; the registry stays as it was")
    func backwards() {
        let (_, updates) = Self.history(10)
        var replica = ReplicaSync()
        _ = replica.load(RegistrySnapshot(epoch: "e1", sequence: 0, registry: Registry()))
        for update in updates { _ = replica.receive(update) }
        let before = replica.registry
        guard case .ignored = replica.receive(updates[3]) else {
            Issue.record("a backwards update was applied")
            return
        }
        guard case .ignored = replica.heartbeat(epoch: "e1", sequence: 2) else {
            Issue.record("a backwards heartbeat was not ignored")
            return
        }
        #expect(replica.registry == before && replica.isSynced)
    }

    @Test("an idle replica notices a lost update from the heartbeat, and a restart from the epoch")
    func heartbeatAndEpoch() {
        let (_, updates) = Self.history(5)
        var replica = ReplicaSync()
        _ = replica.load(RegistrySnapshot(epoch: "e1", sequence: 4, registry: Self.replay(updates, to: 4)))
        #expect(replica.heartbeat(epoch: "e1", sequence: 4) == .unchanged)
        guard case .needsSnapshot = replica.heartbeat(epoch: "e1", sequence: 5) else {
            Issue.record("a heartbeat ahead of the replica did not ask for a snapshot")
            return
        }
        _ = replica.load(RegistrySnapshot(epoch: "e1", sequence: 5, registry: Self.replay(updates, to: 5)))
        guard case .needsSnapshot = replica.heartbeat(epoch: "e2", sequence: 0) else {
            Issue.record("a new epoch did not ask for a snapshot")
            return
        }
        var restarted = RegistryLedger(epoch: "e2")
        let first = restarted.set("a", to: Self.agent("a", ["x"]), reason: "joined")!
        #expect(replica.receive(first) == .unchanged)  // queued until the new snapshot
        #expect(replica.load(RegistrySnapshot(epoch: "e2", sequence: 0, registry: Registry())) == .applied)
        #expect(replica.registry == restarted.registry && replica.epoch == "e2")
    }

    static func replay(_ updates: [RegistryUpdate], to sequence: Int) -> Registry {
        var registry = Registry()
        for update in updates where update.sequence <= sequence { registry.set(update.agent, to: update.entry) }
        return registry
    }

    // MARK: Coordinator decisions

    let alpha: PeerID = [0xA1]
    let beta: PeerID = [0xB1]

    func ready(_ name: String, _ skills: [JSONValue]) -> WorkerMessage {
        .ready(["name": .string(name), "capacity": 2, "skills": .array(skills)])
    }

    func updates(_ actions: [CoordinatorAction]) -> [RegistryUpdate] {
        actions.compactMap { if case .publish(.registryUpdate(let update)) = $0 { update } else { nil } }
    }

    func welcome(_ actions: [CoordinatorAction]) -> Welcome? {
        actions.compactMap { if case .toWorker(_, .welcome(let welcome)) = $0 { welcome } else { nil } }.first
    }

    static let textField: JSONValue = ["name": "text", "type": "string"]

    @Test("a second agent with another schema for a skill is refused that skill, registers the rest")
    func schemaConflict() {
        var state = CoordinatorState(epoch: "e1")
        _ = state.handleWorker(
            ready("alpha", [["identifier": "echo", "parameters": [Self.textField]]]), from: alpha, now: 0)
        let actions = state.handleWorker(
            ready(
                "beta",
                [
                    ["identifier": "echo", "parameters": [["name": "text", "type": "integer"]]],
                    ["identifier": "sleep", "parameters": []],
                ]), from: beta, now: 0)
        let refused = welcome(actions)?.refused ?? []
        #expect(refused.count == 1)
        #expect(refused.first?.code == .schemaConflict)
        #expect(refused.first?.message.contains("agent 'alpha'") == true)
        #expect(
            actions.contains {
                if case .publish(.registrationRefused(let agent, let error)) = $0 {
                    agent == "beta" && error.code == .schemaConflict
                } else {
                    false
                }
            })
        #expect(state.ledger.registry.skills["echo"]?.providers == ["alpha"])
        #expect(state.ledger.registry.skills["sleep"]?.providers == ["beta"])
        #expect(updates(actions).count == 1)
    }

    @Test("schemas are the same when they accept the same parameters, whatever the order and descriptions")
    func schemaSameness() {
        let text = ParameterField("text", .string, description: "one")
        let count = ParameterField("count", .integer, required: false, default: 1)
        let schema = ParameterSchema([text, count])
        var described = count
        described.description = "another"
        #expect(schema.accepts(sameParametersAs: ParameterSchema([described, text])))
        var optional = text
        optional.required = false
        #expect(!schema.accepts(sameParametersAs: ParameterSchema([optional, count])))
        var otherDefault = count
        otherDefault.defaultValue = 2
        #expect(!schema.accepts(sameParametersAs: ParameterSchema([text, otherDefault])))
        #expect(!schema.accepts(sameParametersAs: ParameterSchema([text])))
        #expect(!schema.accepts(sameParametersAs: ParameterSchema([text, ParameterField("count", .number)])))
    }

    @Test("the same schema with other metadata joins under the registry's descriptor")
    func sameSchemaOtherMetadata() {
        var state = CoordinatorState(epoch: "e1")
        _ = state.handleWorker(ready("alpha", [["identifier": "echo", "description": "first"]]), from: alpha, now: 0)
        _ = state.handleWorker(ready("beta", [["identifier": "echo", "description": "second"]]), from: beta, now: 0)
        #expect(state.ledger.registry.skills["echo"]?.providers == ["alpha", "beta"])
        #expect(state.ledger.registry.agents["beta"]?.skills.first?.description == "first")
    }

    @Test("a replica's skill list (skills --json) has the catalog's shape: the bus's SKILLS answer without inFlight")
    func replicaCatalogShape() {
        var state = CoordinatorState(epoch: "e1")
        let echo: JSONValue = ["identifier": "echo", "parameters": [Self.textField], "defaultTimeoutMs": 500]
        _ = state.handleWorker(ready("beta", [echo, ["identifier": "sleep"]]), from: beta, now: 0)
        _ = state.handleWorker(
            .ready(["name": "alpha", "capacity": 7, "skills": [echo]]), from: alpha, now: 0)
        let catalog = state.catalog().json["skills"]?.arrayValue ?? []
        let replica = SkillCatalog(registry: state.ledger.registry).entriesJSON.arrayValue ?? []
        #expect(replica.count == 2 && catalog.count == 2)
        // Descriptor keys and the provider list, field for field, with only the load left out.
        let withoutLoad = catalog.map { entry -> JSONValue in
            var object = entry.objectValue ?? [:]
            object["providers"] = .array(
                (entry["providers"]?.arrayValue ?? []).map { provider in
                    var fields = provider.objectValue ?? [:]
                    fields["inFlight"] = nil
                    return .object(fields)
                })
            return .object(object)
        }
        #expect(replica == withoutLoad)
        #expect(replica.first?["providers"] == [["agent": "alpha", "capacity": 7], ["agent": "beta", "capacity": 2]])
    }

    @Test(
        "invalid skills in a registration are refused with the reason, the valid ones register",
        arguments: [
            (["identifier": "", "parameters": []] as JSONValue, "invalid"),
            (["identifier": "x", "parameters": [["name": "a", "type": "colour"]]] as JSONValue, "unknown type"),
            (
                ["identifier": "x", "parameters": [RegistryTests.textField, RegistryTests.textField]] as JSONValue,
                "declared twice"
            ),
            (["identifier": "x", "defaultTimeoutMs": 0] as JSONValue, "defaultTimeoutMs"),
            (["identifier": "x", "metadata": "tags"] as JSONValue, "metadata"),
            (
                [
                    "identifier": "x",
                    "parameters": [["name": "n", "type": "integer", "required": false, "default": nil]],
                ]
                    as JSONValue,
                "skill 'x': default of 'n' is null, which no type accepts (leave 'default' out for no default)"
            ),
        ] as [(JSONValue, String)])
    func invalidSchemas(skill: JSONValue, reason: String) {
        var state = CoordinatorState(epoch: "e1")
        let actions = state.handleWorker(ready("alpha", [skill, ["identifier": "ok"]]), from: alpha, now: 0)
        let refused = welcome(actions)?.refused ?? []
        #expect(refused.first?.message.contains(reason) == true)
        #expect(state.ledger.registry.agents["alpha"]?.skills.map(\.identifier) == ["ok"])
    }

    @Test("SKILLS changes a live agent's skills in one update; waiting requests for a withdrawn skill fail")
    func runtimeChange() {
        var state = CoordinatorState(epoch: "e1")
        _ = state.handleWorker(ready("alpha", [["identifier": "echo"], ["identifier": "sleep"]]), from: alpha, now: 0)
        let changed = state.handleWorker(
            .skills([["identifier": "echo"], ["identifier": "math.eval"]]), from: alpha, now: 1)
        let published = updates(changed)
        #expect(published.count == 1)
        #expect(published.first?.provided == ["math.eval"] && published.first?.withdrawn == ["sleep"])
        #expect(welcome(changed)?.accepted == ["echo", "math.eval"])
        #expect(state.ledger.registry.skills["sleep"] == nil)
        let routed = state.handleInvoke(
            InvokeRequest(requestID: "r", roundID: "x", skill: "math.eval", parameters: Array("{}".utf8)),
            from: [0xC1], now: 2)
        #expect(routed.contains { if case .toWorker(_, .invoke) = $0 { true } else { false } })
        let bad = state.handleWorker(.skills(["identifier": "echo"]), from: alpha, now: 3)
        #expect(
            bad.contains { if case .toWorker(_, .error(let e)) = $0 { e.code == .invalidRegistration } else { false } })
    }

    @Test("a dead worker leaves the registry in one update; the heartbeat carries interval and sequence")
    func deathAndHeartbeat() {
        var state = CoordinatorState(epoch: "e1")
        _ = state.handleWorker(ready("alpha", [["identifier": "echo"], ["identifier": "sleep"]]), from: alpha, now: 0)
        // The worker announces a 100 ms interval in its heartbeat: dead after 300 ms of silence.
        _ = state.handleWorker(.heartbeat(intervalMs: 100, registry: nil), from: alpha, now: 0)
        let actions = state.tick(now: 301_000_000)
        let published = updates(actions)
        #expect(published.count == 1 && published.first?.entry == nil)
        #expect(published.first?.withdrawn == ["echo", "sleep"])
        #expect(state.ledger.registry.agents.isEmpty)
        let beats = state.tick(now: 2_000_000_000).filter {
            if case .publish(.registryHeartbeat(let epoch, let sequence, _)) = $0 {
                epoch == "e1" && sequence == 2
            } else {
                false
            }
        }
        #expect(beats.count == 1)
    }

    @Test("SNAPSHOT sends one entry per agent, sorted, then the summary with the sequence")
    func snapshot() throws {
        var state = CoordinatorState(epoch: "e1")
        _ = state.handleWorker(ready("beta", [["identifier": "echo"]]), from: beta, now: 0)
        _ = state.handleWorker(ready("alpha", [["identifier": "sleep"]]), from: alpha, now: 0)
        let messages = state.snapshot(requestID: "s", for: [0xC1]).compactMap {
            if case .toClient(_, let message) = $0 { message } else { nil }
        }
        #expect(messages.count == 3)
        guard case .entry(_, let first) = messages[0], case .snapshot(_, let summary) = messages[2] else {
            Issue.record("snapshot messages in the wrong order")
            return
        }
        #expect(try JSONValue(parsing: first)["agent"] == "alpha")
        #expect(summary["seq"] == 2 && summary["agents"] == 2 && summary["epoch"] == "e1")
    }

    @Test("a request, invoke or fan-out round with no timeout takes the skill's default; a plan the bus default")
    func defaultTimeout() {
        func fresh() -> CoordinatorState {
            var state = CoordinatorState(epoch: "e1")
            _ = state.handleWorker(
                ready("alpha", [["identifier": "slow", "defaultTimeoutMs": 40_000]]), from: alpha, now: 0)
            return state
        }
        var state = fresh()
        func deadlines(_ actions: [CoordinatorAction]) -> [Int] {
            actions.compactMap { if case .toWorker(_, .invoke(let i)) = $0 { i.deadlineMs } else { nil } }
        }
        let request = state.handleInvoke(
            InvokeRequest(requestID: "r", roundID: "x", skill: "slow", parameters: Array("{}".utf8)), from: [0xC1],
            now: 0)
        #expect(deadlines(request) == [40_000])
        let bodies: [(JSONValue, Int)] = [
            (["invoke": ["skill": "slow"]], 40_000), (["fanout": ["skill": "slow"]], 40_000),
            (["plan": ["steps": [["id": "a", "skill": "slow"]]]], 15_000),
        ]
        for (index, (body, expected)) in bodies.enumerated() {
            state = fresh()  // a free slot for each
            let round = state.handleRound(
                RoundRequest(requestID: "q\(index)", roundID: "R\(index)", body: body.serialized()), from: [0xC1],
                now: 0)
            #expect(deadlines(round) == [expected], "\(body.jsonString)")
        }
    }
}
