import Dispatch
import SkillbusZMQ
import Synchronization

/// What a group's journal and election threads tell the coordinator's thread, which takes it when woken.
final class GroupNotices: Sendable {
    private let lost = Mutex<String?>(nil)
    private let committed = Mutex<[[UInt8]]>([])

    func lose(_ reason: String) { lost.withLock { $0 = $0 ?? reason } }
    var lostReason: String? { lost.withLock { $0 } }

    func committed(_ ids: [[UInt8]]) { committed.withLock { $0 += ids } }

    func takeCommitted() -> [[UInt8]] {
        committed.withLock { list in
            defer { list = [] }
            return list
        }
    }
}

/// The coordinator's thread in a coordinator group (PROTOCOL §3.11): refusing as a standby, taking the lead,
/// stopping when it lost it, answers that wait for their commit (`answerAfterCommit`, §3.5.9), and the journal's
/// backlog on the feed.
extension CoordinatorLoop {
    /// Takes what the election and the journal reported; false when this coordinator lost the lead and must stop
    /// (`failure` says why).
    func groupChanged() -> Bool {
        guard let election else { return true }
        for event in election.takeEvents() {
            switch event {
            case .leading(let leader, let opened):
                journal = opened
                let now = DispatchTime.now().uptimeNanoseconds
                let interrupted = opened.interruptedAtOpen.load(ordering: .relaxed)
                logger.info(
                    "leading group '\(election.settings.group)' (epoch \(leader.epoch)); round journal in "
                        + "\(opened.location)"
                        + (interrupted > 0 ? ", \(interrupted) round(s) interrupted by the last leader's loss" : ""))
                state.journalOpened(holding: opened.takeIDsAtOpen())
                let sessions = opened.takeSessionsAtOpen()
                if !sessions.isEmpty { state.restoreSessions(sessions) }
                state.group = GroupStatus(group: election.settings.group, leader: leader, leading: true)
                // Workers come back to the new leader: rounds for their skills wait for them as after a start.
                state.beginStartupGrace(now: now)
                perform([
                    .publish(.coordinatorLeader(group: election.settings.group, epoch: leader.epoch, leader: leader))
                ])
            case .lost(let reason):
                notices.lose(reason)
            }
        }
        if let reason = notices.lostReason {
            logger.error("lost the lead, stopping (exit 1; restarted, it joins as a standby): \(reason)")
            failure = reason
            return false
        }
        publishBacklog()
        return true
    }

    /// At every tick: whom a standby knows as the leader, the group's members, and the leader's journal backlog.
    func refreshGroup() {
        guard let election else { return }
        if journal == nil { state.group?.leader = election.known.withLock { $0 } }
        state.group?.members = election.members.withLock { $0 }
        publishBacklog()
    }

    /// The journal's backlog, on the feed when it changes between none and some, and in AGENTS.
    func publishBacklog() {
        guard let election, let journal else { return }
        let rounds = journal.backlog.load(ordering: .relaxed)
        state.group?.journalBacklog = rounds
        guard (rounds > 0) != (publishedBacklog > 0) else { return }
        publishedBacklog = rounds
        if rounds > 0 {
            logger.warning("the journal is behind: \(rounds) round(s) wait for the database")
        } else {
            logger.info("the journal caught up with its database")
        }
        perform([.publish(.journalBehind(group: election.settings.group, rounds: rounds))])
    }

    /// A standby's answer (§3.11): `not_leader` naming the leader to every message that would get an answer, in
    /// the sender's dialect; nothing to the others. A leader whose lease ran out by its own clock names nobody.
    func refuseAsStandby(_ peer: PeerID, _ body: Multipart) {
        guard let election, let header = body.first else { return }
        let leader = journal == nil ? election.known.withLock { $0 } : nil
        let error = SkillbusError.notLeader(
            group: election.settings.group, standby: election.me.name,
            leader: leader?.name == election.me.name ? nil : leader)
        if header.starts(with: Wire.clientHeaderBytes) {
            let message: ClientMessage? = try? ClientMessage.decode(body)
            switch message {
            case .cancel?, .approve?: return
            default: send(to: peer, BusToClientMessage.error(requestID: Wire.requestID(of: body), error).encoded())
            }
        } else if header.starts(with: Wire.workerHeaderBytes) {
            let message: WorkerMessage? = try? WorkerMessage.decode(body)
            switch message {
            case .ready?, .skills?, .claim?, nil:
                send(to: peer, BusToWorkerMessage.error(error).encoded())
            default: return
            }
        } else {
            refuse(peer, body, error)
        }
    }

    /// With `answerAfterCommit`: the rounds these actions finish into the journal hold their answers (and any
    /// answer sent for them meanwhile, a resend's) until the journal says their documents are committed.
    func holdAnswers(of actions: [CoordinatorAction]) {
        for case .journal(.finish(let roundID, _, _)) in actions where heldAnswersByRound[ByteKey(roundID)] == nil {
            heldAnswersByRound[ByteKey(roundID)] = []
        }
    }

    func releaseAnswers(_ committed: [[UInt8]]) {
        for id in committed {
            guard let held = heldAnswersByRound.removeValue(forKey: ByteKey(id)) else { continue }
            for (peer, frames) in held { send(to: peer, frames) }
        }
    }
}

/// A coordinator group as AGENTS, `/metrics`, `/state` and `/group` show it (§5.13, §13.3, §13.4, §13.7).
public struct GroupStatus: Sendable, Equatable {
    public var group: String
    public var leader: GroupLeader?
    public var leading: Bool
    /// Rounds that wait for the database (the journal is behind by them).
    public var journalBacklog = 0
    /// The members seen lately, this coordinator among them, by name: where a dashboard looks for the leader.
    public var members: [GroupMember] = []

    public init(group: String, leader: GroupLeader?, leading: Bool, members: [GroupMember] = []) {
        self.group = group
        self.leader = leader
        self.leading = leading
        self.members = members
    }

    public var json: JSONValue {
        .object([
            "group": .string(group), "leader": leader?.json ?? .null, "leading": .bool(leading),
            "journalBacklog": .number(Double(journalBacklog)), "members": .array(members.map(\.json)),
        ])
    }

    /// `GET /group` (§13.7), which any page may read (`Access-Control-Allow-Origin: *`): whether this coordinator
    /// leads, and the leader's name, epoch and dashboard; no endpoint, no member list.
    public var publicJSON: JSONValue {
        let leader = self.leader.map { leader -> JSONValue in
            .object([
                "name": .string(leader.name), "epoch": .number(Double(leader.epoch)),
                "http": leader.http.map(JSONValue.string) ?? .null,
            ])
        }
        return .object(["group": .string(group), "leading": .bool(leading), "leader": leader ?? .null])
    }
}
