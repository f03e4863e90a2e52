extension CoordinatorState {
    /// One registered worker as the bus sees it.
    public struct Worker: Sendable {
        public let peer: PeerID
        public let name: String
        let nameFrame: [UInt8]
        public let capacity: Int
        public internal(set) var heartbeatMs: Int
        public internal(set) var skills: [String: SkillDescriptor]
        /// Invocations it runs now; `RunningInvocations` keeps it equal to its entries there.
        public internal(set) var inFlight = 0
        public internal(set) var lastHeard: UInt64
        public internal(set) var state: AgentState = .idle
        /// Where the worker's own registry replica stood at its last heartbeat.
        public internal(set) var registryPosition: RegistryPosition?
        /// Its last CONTEXT report; nil from a worker that keeps no context.
        public internal(set) var context: AgentContextStatus?
        /// The READY it registered with and its descriptors as offered (both updated by SKILLS), and the
        /// WELCOME it got: a repeated READY that matches is only welcomed again.
        var registration: Registration
        var offers: [SkillOffer]
        var welcome: Welcome
        /// The skills it offers whose descriptor bounds how many run at once (`concurrency`), and how many of
        /// each run now; `RunningInvocations` keeps the counts equal to its entries of those skills.
        var limits: [String: Int] = [:]
        var limitedInFlight: [String: Int] = [:]
        /// Skill → the RESULTs it returned since it registered, by status (AGENTS, §5.13).
        public internal(set) var results: [String: ResultCounts] = [:]

        var hasFreeSlot: Bool { inFlight < capacity }

        /// A free slot, and the skill below its own limit here.
        func canRun(_ skill: String) -> Bool {
            guard inFlight < capacity else { return false }
            guard !limits.isEmpty, let limit = limits[skill] else { return true }
            return limitedInFlight[skill, default: 0] < limit
        }

        mutating func takeSlot(_ skill: String) {
            inFlight += 1
            if !limits.isEmpty, limits[skill] != nil { limitedInFlight[skill, default: 0] += 1 }
        }

        mutating func giveSlot(_ skill: String) {
            inFlight -= 1
            // Also for a skill whose limit went with a SKILLS since: the count is what runs.
            if !limitedInFlight.isEmpty, let count = limitedInFlight[skill] {
                limitedInFlight[skill] = count > 1 ? count - 1 : nil
            }
        }
    }
}

/// The registered workers, found by peer, by name and by skill. It owns what ties the three together:
/// every worker's name leads back to its peer, a skill's provider list holds exactly the workers that
/// offer it (in registration order), and no provider list is left empty.
public struct WorkerTable: Sendable {
    public typealias Worker = CoordinatorState.Worker

    private var byPeer: [PeerID: Worker] = [:]
    private var peerByName: [String: PeerID] = [:]
    private var providers: [String: [PeerID]] = [:]
    /// Where the round-robin among equally loaded providers goes next.
    private var rotation = 0
    /// When the bus last sent the workers its heartbeat (monotonic nanoseconds).
    private var lastHeartbeat: UInt64 = 0

    public subscript(peer: PeerID) -> Worker? { byPeer[peer] }
    public var isEmpty: Bool { byPeer.isEmpty }
    public var count: Int { byPeer.count }
    var all: Dictionary<PeerID, Worker>.Values { byPeer.values }
    var peers: Dictionary<PeerID, Worker>.Keys { byPeer.keys }

    func peer(named name: String) -> PeerID? { peerByName[name] }

    /// Whether the workers are due the bus's heartbeat at `now`, one every `interval`; when they are, it counts as
    /// sent.
    mutating func heartbeatDue(now: UInt64, interval: UInt64) -> Bool {
        guard now &- lastHeartbeat >= interval else { return false }
        lastHeartbeat = now
        return true
    }

    /// The peers offering `skill`, in registration order; empty when nobody does.
    func providers(of skill: String) -> [PeerID] { providers[skill] ?? [] }

    func offers(_ skill: String) -> Bool { providers[skill] != nil }

    /// Every skill some worker offers, sorted.
    var offeredSkills: [String] { providers.keys.sorted() }

    /// Adds a worker whose peer and name are both free (the caller removed any earlier holder).
    mutating func insert(_ worker: Worker) {
        guard byPeer[worker.peer] == nil, peerByName[worker.name] == nil else {
            preconditionFailure("worker '\(worker.name)' inserted while its peer or name is still registered")
        }
        var worker = worker
        worker.limits = worker.skills.compactMapValues(\.concurrency)
        byPeer[worker.peer] = worker
        peerByName[worker.name] = worker.peer
        for identifier in worker.skills.keys { providers[identifier, default: []].append(worker.peer) }
    }

    /// Forgets a worker and its place among providers.
    mutating func remove(_ peer: PeerID) -> Worker? {
        guard let worker = byPeer.removeValue(forKey: peer) else { return nil }
        peerByName[worker.name] = nil
        withdraw(peer, from: worker.skills.keys)
        return worker
    }

    /// Replaces a worker's skills; returns the identifiers it no longer offers.
    mutating func setSkills(of peer: PeerID, to skills: [String: SkillDescriptor]) -> [String] {
        guard let old = byPeer[peer]?.skills else { return [] }
        let withdrawn = old.keys.filter { skills[$0] == nil }
        withdraw(peer, from: withdrawn)
        for identifier in skills.keys where old[identifier] == nil { providers[identifier, default: []].append(peer) }
        update(peer) { worker in
            worker.skills = skills
            worker.limits = skills.compactMapValues(\.concurrency)
        }
        return withdrawn
    }

    private mutating func withdraw(_ peer: PeerID, from identifiers: some Sequence<String>) {
        for identifier in identifiers {
            providers[identifier]?.removeAll { $0 == peer }
            if providers[identifier]?.isEmpty == true { providers[identifier] = nil }
        }
    }

    /// Changes fields of a worker other than its name, peer and skills, in place; nil when it is not registered.
    @discardableResult
    mutating func update<Result>(_ peer: PeerID, _ change: (inout Worker) -> Result) -> Result? {
        guard let index = byPeer.index(forKey: peer) else { return nil }
        return change(&byPeer.values[index])
    }

    /// Whether `peer` has a free slot (for `skill`, when given: below that skill's limit too); nil when it is
    /// not registered. Read in place: a method called on `byPeer[peer]` copies the whole worker first.
    mutating func canRun(_ peer: PeerID, skill: String?) -> Bool? {
        guard let index = byPeer.index(forKey: peer) else { return nil }
        return Self.canRun(&byPeer.values[index], skill)
    }

    private static func canRun(_ worker: inout Worker, _ skill: String?) -> Bool {
        if let skill { return worker.canRun(skill) }
        return worker.hasFreeSlot
    }

    /// Least in-flight first among providers with a free slot (for `skill`, when given: below its limit
    /// too); ties go round-robin.
    mutating func pickProvider(_ candidates: [PeerID], skill: String? = nil) -> PeerID? {
        var best: PeerID?
        var bestLoad = Int.max
        let count = candidates.count
        rotation &+= 1
        for offset in 0..<count {
            let peer = candidates[(rotation &+ offset) % count]
            // Through the index: `byPeer[peer]?.inFlight` would copy the whole Worker to read one number.
            guard let index = byPeer.index(forKey: peer) else { continue }
            let load = byPeer.values[index].inFlight
            guard load < bestLoad, Self.canRun(&byPeer.values[index], skill) else { continue }
            best = peer
            bestLoad = load
            if bestLoad == 0 { break }
        }
        return best
    }
}
