/// Worker membership: READY and SKILLS admit an agent's skills into the registry, and a worker that
/// leaves (DISCONNECT, silence, registering again) takes its skills and its running work with it.
extension CoordinatorState {
    mutating func register(_ body: JSONValue, from peer: PeerID, now: UInt64) -> [CoordinatorAction] {
        let registration: Registration
        let offers: [SkillOffer]
        do throws(SkillbusError) {
            (registration, offers) = try Registration.decode(body)
            if let holder = workers.peer(named: registration.name), holder != peer {
                throw SkillbusError(
                    .nameTaken,
                    "agent name '\(registration.name)' is already registered by a live worker; retry after it leaves")
            }
        } catch {
            let name = body["name"]?.stringValue ?? ""
            return [.toWorker(peer, .error(error)), .publish(.registrationRefused(agent: name, error: error))]
        }
        var actions: [CoordinatorAction] = []
        if let existing = workers[peer] {
            // The same READY again (a worker that queued several while the bus was away): just welcome it.
            if existing.registration == registration && existing.offers == offers {
                workers.update(peer) { $0.lastHeard = now }
                return [.toWorker(peer, .welcome(existing.welcome))]
            }
            actions += remove(peer, reason: "registered again", now: now)
        }
        let name = registration.name
        let (skills, refused, refusals) = admit(offers, agent: name)
        actions += refusals
        let welcome = makeWelcome(skills, refused)
        workers.insert(
            Worker(
                peer: peer, name: name, nameFrame: Array(name.utf8), capacity: registration.capacity,
                heartbeatMs: registration.heartbeatMs ?? settings.heartbeatMs, skills: skills, lastHeard: now,
                registration: registration, offers: offers, welcome: welcome))
        actions.append(.toWorker(peer, .welcome(welcome)))
        actions.append(
            .publish(.agentJoined(agent: name, skills: skills.keys.sorted(), capacity: registration.capacity)))
        actions += publishEntry(of: peer, reason: "joined")
        actions.append(.publish(.agentState(agent: name, state: .idle)))
        actions += dispatchWaiting(to: peer, now: now)
        return actions
    }

    /// A registered worker replaces its skill list (SKILLS): one registry update, in-flight work untouched.
    mutating func changeSkills(of peer: PeerID, to list: JSONValue, now: UInt64) -> [CoordinatorAction] {
        guard let worker = workers[peer] else { return [] }
        guard let items = list.arrayValue else {
            let error = SkillbusError(
                .invalidRegistration, "SKILLS takes a JSON array of skill descriptors, got \(list.typeName)")
            return [.toWorker(worker.peer, .error(error)), .publish(.registrationRefused(agent: worker.name, error: error))]
        }
        let offers = items.map(SkillOffer.init(parsing:))
        var (skills, refused, actions) = admit(offers, agent: worker.name)
        let withdrawn = workers.setSkills(of: worker.peer, to: skills)
        let welcome = makeWelcome(skills, refused)
        workers.update(worker.peer) { worker in
            worker.registration.skills = offers.compactMap(\.descriptor)
            worker.offers = offers
            worker.welcome = welcome
        }
        actions.append(.toWorker(worker.peer, .welcome(welcome)))
        actions += publishEntry(of: worker.peer, reason: "skills changed")
        actions += failWaitingWithoutProvider(withdrawn, reason: "agent '\(worker.name)' withdrew it", now: now)
        actions += dispatchWaiting(to: worker.peer, now: now)
        return actions
    }

    /// Checks each offered descriptor: valid, listed once, and not in conflict with another agent's schema.
    /// Refused ones are reported to the worker (in WELCOME) and on the feed; the rest are admitted.
    func admit(_ offers: [SkillOffer], agent name: String) -> (
        skills: [String: SkillDescriptor], refused: [SkillbusError], actions: [CoordinatorAction]
    ) {
        var skills: [String: SkillDescriptor] = [:]
        var refused: [SkillbusError] = []
        var actions: [CoordinatorAction] = []
        for offer in offers {
            do throws(SkillbusError) {
                let descriptor: SkillDescriptor
                switch offer {
                case .parsed(let parsed): descriptor = parsed
                case .invalid(let error): throw error
                }
                guard skills[descriptor.identifier] == nil else {
                    throw SkillbusError(.invalidRegistration, "skill '\(descriptor.identifier)' is listed twice")
                }
                if let conflict = ledger.registry.conflict(descriptor, agent: name) { throw conflict }
                skills[descriptor.identifier] = ledger.registry.canonical(descriptor, agent: name)
            } catch {
                refused.append(error)
                actions.append(.publish(.registrationRefused(agent: name, error: error)))
            }
        }
        return (skills, refused, actions)
    }

    func makeWelcome(_ skills: [String: SkillDescriptor], _ refused: [SkillbusError]) -> Welcome {
        Welcome(
            heartbeatMs: settings.heartbeatMs, accepted: skills.keys.sorted(), refused: refused,
            feed: settings.feedEndpoint, epoch: ledger.epoch)
    }

    /// Records a worker's current skills in the registry; the update goes on the feed.
    mutating func publishEntry(of peer: PeerID, reason: String) -> [CoordinatorAction] {
        guard let worker = workers[peer] else { return [] }
        let entry = Registry.Agent(
            name: worker.name, capacity: worker.capacity, skills: Array(worker.skills.values),
            profile: worker.registration.profile)
        guard let update = ledger.set(worker.name, to: entry, reason: reason) else { return [] }
        descriptors.refresh(worker.skills.keys, from: ledger.registry)
        return [.publish(.registryUpdate(update))]
    }

    /// A worker's connection closed (the bus saw it go): it is lost now, as after missed heartbeats.
    public mutating func connectionClosed(_ peer: PeerID, now: UInt64) -> [CoordinatorAction] {
        remove(peer, reason: "connection closed", now: now)
    }

    /// Forgets a worker: its skills leave the registry and its running invocations fail with agent_lost.
    mutating func remove(_ peer: PeerID, reason: String, now: UInt64) -> [CoordinatorAction] {
        guard let worker = workers.remove(peer) else { return [] }
        var actions: [CoordinatorAction] = [.publish(.agentLeft(agent: worker.name, reason: reason))]
        if let update = ledger.set(worker.name, to: nil, reason: reason) {
            actions.append(.publish(.registryUpdate(update)))
        }
        descriptors.refresh(worker.skills.keys, from: ledger.registry)
        descriptors.beginDeparture(worker.skills)
        defer { descriptors.endDeparture() }
        for entry in requests.removeRunning(on: peer) where !entry.answered {
            let error = SkillbusError(
                .agentLost, "agent '\(worker.name)' was lost while running '\(entry.request.skill)' (\(reason))")
            actions += fail(entry.request, error, agent: worker.name, now: now)
        }
        actions += failWaitingWithoutProvider(
            Array(worker.skills.keys), reason: "agent '\(worker.name)' left (\(reason))", now: now)
        for request in requests.removeQueued(target: peer) {
            let error = SkillbusError(.agentLost, "agent '\(worker.name)' left (\(reason)) before it ran this")
            actions += fail(request, error, agent: worker.name, executed: false, now: now)
        }
        actions += failQueries(queries.removeAll(of: peer)) {
            SkillbusError(.agentLost, "agent '\($0.agent)' left (\(reason)) before it answered the query")
        }
        actions += failTurns(turns.removeAll(of: peer), now: now) {
            SkillbusError(.agentLost, "agent '\($0.agent)' left (\(reason)) before it ended the turn")
        }
        actions += dropClaims(
            where: { $0.worker == peer },
            SkillbusError(.agentLost, "agent '\(worker.name)' was lost while running a call of its turn (\(reason))"),
            now: now)
        return actions
    }

    /// Requests waiting for a skill nobody offers any more would only time out: fail them now.
    mutating func failWaitingWithoutProvider(
        _ identifiers: [String], reason: String, now: UInt64
    ) -> [CoordinatorAction] {
        var actions: [CoordinatorAction] = []
        for identifier in identifiers where !workers.offers(identifier) {
            for request in requests.removeQueued(skill: identifier) {
                let error = SkillbusError(
                    .unknownSkill, "no agent offers '\(identifier)' any more (\(reason)) while the request waited")
                actions += fail(request, error, agent: "", executed: false, now: now)
            }
        }
        return actions
    }
}
