import Foundation
import SkillbusZMQ
import Synchronization

/// How one invocation ended, as a client sees it.
public struct InvocationOutcome: Sendable, Equatable {
    public var roundID: String
    public var status: ReplyStatus
    public var agent: String
    public var durationMicros: Int
    public var result: SkillResult?
    public var error: SkillbusError?

    /// The `skillbus send --json` document.
    public var json: JSONValue {
        [
            "round": .string(roundID), "status": .string(status.rawValue),
            "agent": agent.isEmpty ? .null : .string(agent), "durationMs": .number(Double(durationMicros) / 1000),
            "result": result?.json ?? .null, "error": error?.json ?? .null,
        ]
    }
}

/// A client of the bus: sends invocations over one DEALER socket, many in flight at once. Given the
/// coordinators of a group (`a,b`), it talks to one at a time and follows the leader (PROTOCOL §3.3).
public final class SkillbusClient: Sendable {
    /// The endpoint as given: one, or a group's as a comma list.
    public let endpoint: String
    /// The CURVE keys it connected with; a registry replica built on this client uses them for the feed.
    public let credentials: CurveCredentials?
    /// The connection to the coordinator it talks to now (with keys, what hears a refusal of them).
    let links: BusLinks
    private let pending: PendingReplies
    /// What arrives before the answer that ends a wait: ENTRY messages of snapshots, STREAM pieces of turns.
    let partials: PartialAnswers
    private let nextID = Atomic<UInt64>(0)
    private let idPrefix = String(UInt32.random(in: 0...UInt32.max), radix: 36)

    /// The connection's parts, made by the connecting initialisers (SkillbusClient+Connecting).
    init(
        endpoint: String, credentials: CurveCredentials?, pending: PendingReplies, partials: PartialAnswers,
        links: BusLinks
    ) {
        self.endpoint = endpoint
        self.credentials = credentials
        self.pending = pending
        self.partials = partials
        self.links = links
        // Weak: the socket's handler holds `partials`, which would otherwise hold the socket in turn.
        partials.reply.withLock { $0 = { [weak links] message in links?.send(message) } }
    }

    /// The coordinator it talks to now (of a group's: the one it followed last).
    public var currentEndpoint: String { links.endpoint }

    /// Hears each move from one coordinator of a group to another, with the reason (once per move).
    public func onMove(_ hear: @escaping @Sendable (_ from: String, _ to: String, _ reason: String) -> Void) {
        links.onMove.withLock { $0 = { move in hear(move.from, move.to, move.reason) } }
    }

    /// Decides whether invocations of skills that need confirmation, asked for by this client, may run
    /// (PROTOCOL §3.8). Until one is set, every one is refused.
    public func onConfirmation(_ decide: @escaping @Sendable (Confirmation) async -> Bool) {
        partials.confirmer.withLock { $0 = decide }
    }

    deinit { links.stop() }

    /// Closes the connection. Returns at once, never blocks; calls still waiting end as cancelled or
    /// unreachable, as their own cancellation or deadline says.
    public func close() { links.stop() }

    /// Closes the connection and awaits the socket's thread.
    func closeAndWait() async { await links.stopAndWait() }

    /// Runs `skill` on some agent. Throws only when no answer came (`unreachable`) or the reply was bad;
    /// a skill that failed comes back as an outcome with `status == .error`. `onOutput` hears the skill's
    /// partial output as it arrives, every batch before the outcome (on the client's socket thread: keep
    /// it quick).
    public func invoke(
        _ skill: String, parameters: JSONValue = [:], roundID: String = UUID().uuidString.lowercased(),
        sessionID: String = "", timeout: Duration = .seconds(15), onOutput: (@Sendable (OutputBatch) -> Void)? = nil
    ) async throws(SkillbusError) -> InvocationOutcome {
        let requestID = makeRequestID()
        if let onOutput { partials.outputs.withLock { $0[requestID] = { _, batch in onOutput(batch) } } }
        defer { if onOutput != nil { partials.outputs.withLock { _ = $0.removeValue(forKey: requestID) } } }
        let timeoutMs = Int(timeout / .milliseconds(1))
        let request = InvokeRequest(
            requestID: requestID, roundID: roundID, sessionID: sessionID, skill: skill, timeoutMs: max(1, timeoutMs),
            parameters: parameters.serialized())
        // The bus answers `timeout` itself at the deadline; the extra second is for that answer to arrive.
        // A caller that gives up cancels the request on the bus, whose answer (`cancelled`) ends the wait.
        // Refused by a standby, it goes to the leader with the time the caller has left (PROTOCOL §3.3).
        let deadline = ContinuousClock.now + timeout
        let again = PendingReplies.Again(afterMove: false) { now in
            var copy = request
            copy.timeoutMs = max(1, Int((deadline - now) / .milliseconds(1)))
            return ClientMessage.invoke(copy).encoded()
        }
        let answer = try await exchange(
            .invoke(request), requestID: requestID, waitFor: timeout + .seconds(1), cancelsOnBus: true, again: again)
        switch answer {
        case .reply(let reply):
            var outcome = InvocationOutcome(
                roundID: reply.roundID, status: reply.status, agent: reply.agent, durationMicros: reply.durationMicros)
            let payload: JSONValue
            do {
                payload = try JSONValue(parsing: reply.payload)
            } catch {
                throw SkillbusError(.malformedMessage, "the reply's payload is not JSON: \(error)")
            }
            if reply.status == .ok {
                outcome.result = try SkillResult(json: payload)
            } else {
                outcome.error = SkillbusError(json: payload)
            }
            return outcome
        case .error(_, let error):
            throw error
        default:
            throw unreachable(after: timeout + .seconds(1))
        }
    }

    /// The whole registry as the bus holds it now, with its epoch and sequence number.
    public func snapshot(timeout: Duration = .seconds(5)) async throws(SkillbusError) -> RegistrySnapshot {
        let requestID = makeRequestID()
        partials.snapshotEntries.withLock { $0[requestID] = [] }
        let answer: BusToClientMessage?
        do {
            // Sent again to another coordinator, it starts collecting anew: entries of two registries never mix.
            let message = ClientMessage.snapshot(requestID: requestID)
            let encoded = message.encoded()
            let partials = self.partials
            let again = PendingReplies.Again(afterMove: true) { _ in
                partials.snapshotEntries.withLock { $0[requestID] = [] }
                return encoded
            }
            answer = try await exchange(message, requestID: requestID, waitFor: timeout, again: again)
        } catch {
            partials.snapshotEntries.withLock { _ = $0.removeValue(forKey: requestID) }
            throw error
        }
        let entries = partials.snapshotEntries.withLock { $0.removeValue(forKey: requestID) } ?? []
        switch answer {
        case .snapshot(_, let summary):
            guard let epoch = summary["epoch"]?.stringValue, let sequence = summary["seq"]?.intValue, sequence >= 0,
                let count = summary["agents"]?.intValue
            else {
                throw SkillbusError(.malformedMessage, "SNAPSHOT summary needs 'epoch', 'seq' and 'agents'")
            }
            // ENTRY messages can be dropped on the way (high-water marks): a short snapshot is no snapshot.
            guard count == entries.count else {
                throw SkillbusError(
                    .malformedMessage, "snapshot announced \(count) entries but \(entries.count) arrived")
            }
            let agents = try await Self.parse(entries)
            let registry = Registry(agents: agents)
            guard registry.agents.count == agents.count else {
                throw SkillbusError(.malformedMessage, "snapshot holds two entries for one agent")
            }
            return RegistrySnapshot(epoch: epoch, sequence: UInt64(sequence), registry: registry)
        case .error(_, let error): throw error
        default: throw unreachable(after: timeout)
        }
    }

    /// Parses snapshot entries on every core: a large registry is mostly JSON to read.
    private static func parse(_ entries: [[UInt8]]) async throws(SkillbusError) -> [Registry.Agent] {
        let chunks = max(1, min(entries.count / 16, ProcessInfo.processInfo.activeProcessorCount))
        let parsed = await withTaskGroup(of: Result<[Registry.Agent], SkillbusError>.self) { group in
            for chunk in 0..<chunks {
                group.addTask {
                    var agents: [Registry.Agent] = []
                    for index in stride(from: chunk, to: entries.count, by: chunks) {
                        do {
                            agents.append(try Registry.Agent(json: try JSONValue(parsing: entries[index])))
                        } catch let error as SkillbusError {
                            return .failure(error)
                        } catch {
                            return .failure(SkillbusError(.malformedMessage, "snapshot entry: \(error)"))
                        }
                    }
                    return .success(agents)
                }
            }
            var results: [Result<[Registry.Agent], SkillbusError>] = []
            for await result in group { results.append(result) }
            return results
        }
        var agents: [Registry.Agent] = []
        for result in parsed { agents += try result.get() }
        return agents
    }

    /// Cancels everything of round `roundID` on the bus, whoever asked for it: the ROUND, its REQUESTs and
    /// its turn (PROTOCOL §3.10). Returns what the bus stopped: `{"round", "requests", "rounds", "turns",
    /// "stopped"}`, all zero when nothing of the round was running.
    public func cancelRound(_ roundID: String, timeout: Duration = .seconds(5)) async throws(SkillbusError) -> JSONValue {
        let requestID = makeRequestID()
        let message = ClientMessage.cancelRound(requestID: requestID, roundID: roundID)
        switch try await exchange(message, requestID: requestID, waitFor: timeout) {
        case .cancelled(_, let summary): return summary
        case .error(_, let error): throw error
        default: throw unreachable(after: timeout)
        }
    }

    /// The bus's catalog: every skill on offer with its schema and providers.
    public func skills(timeout: Duration = .seconds(5)) async throws(SkillbusError) -> SkillCatalog {
        let requestID = makeRequestID()
        switch try await exchange(.listSkills(requestID: requestID), requestID: requestID, waitFor: timeout) {
        case .skills(_, let catalog): return catalog
        case .error(_, let error): throw error
        default: throw unreachable(after: timeout)
        }
    }

    /// Live agents with skills, capacity, load, state and heartbeat age (the `skillbus agents` listing).
    public func agents(timeout: Duration = .seconds(5)) async throws(SkillbusError) -> JSONValue {
        let requestID = makeRequestID()
        switch try await exchange(.listAgents(requestID: requestID), requestID: requestID, waitFor: timeout) {
        case .agents(_, let listing): return listing
        case .error(_, let error): throw error
        default: throw unreachable(after: timeout)
        }
    }


    func makeRequestID() -> String {
        idPrefix + "-" + String(nextID.add(1, ordering: .relaxed).newValue)
    }

    /// Waits at most `wait` for any answer of the bus (a SKILLS listing, which every role may ask for):
    /// a coordinator that is not there is reported within it, not after a round's whole timeout.
    public func checkReachable(within wait: Duration) async throws(SkillbusError) {
        let requestID = makeRequestID()
        guard try await exchange(.listSkills(requestID: requestID), requestID: requestID, waitFor: wait) != nil else {
            throw unreachable(after: wait)
        }
    }

    /// No answer came within `wait`: the coordinator refused this client's key, when libzmq said so, else
    /// it may not be running.
    func unreachable(after wait: Duration) -> SkillbusError {
        if links.keyRefused {
            return SkillbusError(
                .unreachable,
                "the coordinator at \(links.endpoint) refused this client's key (unknown key: it is not among the keys "
                    + "of its security section)")
        }
        let endpoints = links.endpoints
        guard endpoints.count > 1 || links.lastRefusal != nil else {
            return SkillbusError(
                .unreachable, "no answer from the coordinator at \(endpoint) within \(wait) (is it running?)")
        }
        // A group: every endpoint it may have tried, and why the last one did not serve when it said so.
        let refusal = links.lastRefusal.map { "; the last refusal: \($0)" } ?? ""
        return SkillbusError(
            .unreachable,
            "no answer from any coordinator of \(endpoints.joined(separator: ", ")) within \(wait) (tried each in "
                + "turn; are they running, and is one the leader?)\(refusal)")
    }

    /// How long a caller that gave up on a REQUEST or ROUND waits for the bus's `cancelled` answer.
    static let cancelGrace: Duration = .seconds(1)

    /// Sends `message` and waits for the reply with `requestID`; nil when none came within `waitFor`.
    /// A cancelled caller returns at once with `cancelled`; its entry goes, so a late reply is dropped.
    /// With `cancelsOnBus`, it tells the bus (CANCEL) and waits for the bus's answer instead, for
    /// `cancelGrace` at most.
    func exchange(
        _ message: ClientMessage, requestID: String, waitFor: Duration, cancelsOnBus: Bool = false,
        resend: PendingReplies.Resend? = nil, again: PendingReplies.Again? = nil
    ) async throws(SkillbusError) -> BusToClientMessage? {
        let pending = self.pending
        let links = self.links
        let deadline = ContinuousClock.now + waitFor
        let encoded = message.encoded()
        // A refused message goes to the leader as it was; rounds and reads also go to whichever coordinator the
        // client moves to (PROTOCOL §3.3).
        let again = again ?? PendingReplies.Again(afterMove: message.mayGoAgain) { _ in encoded }
        let cancel = { @Sendable in links.send(ClientMessage.cancel(requestID: requestID).encoded()) }
        // The send wakes the socket's thread, which then keeps the deadline too.
        let answer = await pending.exchange(
            requestID, until: deadline, resend: resend, again: again, send: { links.send(encoded) },
            cancel: cancelsOnBus ? cancel : nil, grace: Self.cancelGrace)
        switch answer {
        case .message(let reply): return reply
        case .timedOut:
            // The caller gives up: whatever the bus still holds of it must not run for nobody.
            if cancelsOnBus { links.send(ClientMessage.cancel(requestID: requestID).encoded()) }
            return nil
        case .cancelled:
            throw SkillbusError(.cancelled, "request \(requestID) was cancelled before the coordinator answered")
        }
    }

    /// Runs on the socket's thread: hands each reply to the caller waiting for its request id. A reply
    /// that does not decode still ends its caller's wait, saying what was wrong, when its id is readable.
    /// A `not_leader` refusal (PROTOCOL §3.11) does not end the wait: the client moves as `links` says and the
    /// refused message goes again.
    static func receive(
        _ message: Multipart, from endpoint: String, pending: PendingReplies, partials: PartialAnswers, links: BusLinks?
    ) {
        let decoded: BusToClientMessage
        do {
            decoded = try BusToClientMessage.decode(message)
        } catch {
            links?.heard(from: endpoint)
            guard let fields = Wire.envelopeFields(message), fields.count > 2,
                let requestID = String(validating: fields[2], as: UTF8.self)
            else { return }
            let command = String(decoding: fields[1].prefix(32), as: UTF8.self)
            let problem = SkillbusError(
                .malformedMessage,
                "the coordinator's \(command) for request \(requestID) could not be read: \(error.message)")
            pending.finish(requestID, with: .message(.error(requestID: requestID, problem)))
            return
        }
        if case .error(let id, let error) = decoded, error.code == .notLeader, let links {
            let at = links.refused(by: endpoint, leader: error.leader, words: error.message, pending: pending)
            // Nobody waits for it any more (or it was a probe): nothing goes again.
            _ = pending.sendAgain(id, at: at)
            links.socket?.wake()
            return
        }
        links?.heard(from: endpoint)
        let requestID: String
        switch decoded {
        case .reply(let reply): requestID = reply.requestID
        case .skills(let id, _), .error(let id, _), .snapshot(let id, _), .agents(let id, _), .answer(let id, _, _),
            .turn(let id, _, _), .cancelled(let id, _):
            requestID = id
        case .round(let id, _, _): requestID = String(decoding: id, as: UTF8.self)
        case .entry(let id, let entry):
            partials.snapshotEntries.withLock { $0[id]?.append(entry) }
            return
        case .stream(let id, let text):
            partials.replyPieces.withLock { $0[id] }?(text)
            return
        case .relayedTurn:
            return  // what the bus sends; decoding reads it as `turn`
        case .progress(let id, let agent, let progress):
            partials.progress.withLock { $0[id] }?(agent, progress)
            return
        case .output(let id, let invocation, let batch):
            let requestID = String(decoding: id, as: UTF8.self)
            partials.outputs.withLock { $0[requestID] }?(invocation, batch)
            return
        case .confirm(let id, let confirmationID, let skill, let parameters):
            let decide = partials.confirmer.withLock { $0 }
            let send = partials.reply.withLock { $0 }
            let asked = Confirmation(
                requestID: id, skill: skill, parameters: (try? JSONValue(parsing: parameters)) ?? .null)
            // Deciding may take a person: off the socket's thread.
            Task {
                let approved = await decide?(asked) ?? false
                send?(ClientMessage.approve(confirmationID: confirmationID, approved: approved).encoded())
            }
            return
        }
        pending.finish(requestID, with: .message(decoded))
    }

    /// How many callers wait for an answer; a cancelled or timed-out caller leaves none behind.
    var waitingCallers: Int { pending.count }
}
