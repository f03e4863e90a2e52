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

/// A client of the bus: sends invocations over one DEALER socket, many in flight at once.
public final class SkillbusClient: Sendable {
    public let endpoint: String
    private let socket: SocketLoop
    private let pending = PendingReplies()
    /// ENTRY messages of snapshots being received, by request id; the SNAPSHOT that ends one resolves it.
    private let snapshotEntries = SnapshotEntries()
    private let nextID = Atomic<UInt64>(0)
    private let idPrefix = String(UInt32.random(in: 0...UInt32.max), radix: 36)

    public init(endpoint: String, context: ZMQContext, maxMessageBytes: Int = 1 << 20) throws {
        self.endpoint = endpoint
        let pending = self.pending
        let snapshotEntries = self.snapshotEntries
        let maxBytes = Int64(maxMessageBytes) * 4 + 4096
        socket = try SocketLoop(
            context: context, type: .dealer, name: "skillbus-client",
            configure: { socket in
                try socket.setMaxMessageSize(maxBytes)
                try socket.connect(endpoint)
            },
            onMessage: { message in
                // Replies are matched to waiting callers by request id; anything else is dropped.
                guard let decoded = try? BusToClientMessage.decode(message) else { return }
                let requestID: String
                switch decoded {
                case .reply(let reply): requestID = reply.requestID
                case .skills(let id, _), .error(let id, _), .snapshot(let id, _), .agents(let id, _): requestID = id
                case .round(let id, _, _): requestID = String(decoding: id, as: UTF8.self)
                case .entry(let id, let entry):
                    snapshotEntries.table.withLock { $0[id]?.append(entry) }
                    return
                }
                pending.resolve(requestID, with: decoded)
            })
    }

    deinit { socket.stop() }

    public func close() { socket.stop() }

    /// Runs `skill` on some agent. Throws only when no answer came (`unreachable`) or the reply was bad;
    /// a skill that failed comes back as an outcome with `status == .error`.
    public func invoke(
        _ skill: String, parameters: JSONValue = [:], roundID: String = UUID().uuidString.lowercased(),
        sessionID: String = "", timeout: Duration = .seconds(15)
    ) async throws(SkillbusError) -> InvocationOutcome {
        let requestID = makeRequestID()
        let timeoutMs = Int(timeout / .milliseconds(1))
        let request = InvokeRequest(
            requestID: requestID, roundID: roundID, sessionID: sessionID, skill: skill, timeoutMs: max(1, timeoutMs),
            parameters: parameters.serialized())
        // The bus answers `timeout` itself at the deadline; the extra second is for that answer to arrive.
        let answer = await exchange(.invoke(request), requestID: requestID, waitFor: timeout + .seconds(1))
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
        snapshotEntries.table.withLock { $0[requestID] = [] }
        let answer = await exchange(.snapshot(requestID: requestID), requestID: requestID, waitFor: timeout)
        let entries = snapshotEntries.table.withLock { $0.removeValue(forKey: requestID) } ?? []
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

    /// Runs a whole round (one invocation, a fan-out or a plan) and returns its document. A round that
    /// failed comes back as a document with `status: error`; this throws only when no answer came.
    public func round(
        _ spec: RoundSpec, roundID: String = UUID().uuidString.lowercased(), sessionID: String = "",
        timeout: Duration = .seconds(15)
    ) async throws(SkillbusError) -> JSONValue {
        let requestID = makeRequestID()
        let request = RoundRequest(
            requestID: requestID, roundID: roundID, sessionID: sessionID,
            timeoutMs: max(1, Int(timeout / .milliseconds(1))),
            body: spec.json.serialized())
        switch await exchange(.round(request), requestID: requestID, waitFor: timeout + .seconds(1)) {
        case .round(_, _, let document):
            do {
                return try JSONValue(parsing: document)
            } catch {
                throw SkillbusError(.malformedMessage, "the round document is not JSON: \(error)")
            }
        case .error(_, let error): throw error
        default: throw unreachable(after: timeout + .seconds(1))
        }
    }

    /// Live agents with skills, capacity, load, state and heartbeat age (the `skillbus agents` listing).
    public func agents(timeout: Duration = .seconds(5)) async throws(SkillbusError) -> JSONValue {
        let requestID = makeRequestID()
        switch await exchange(.listAgents(requestID: requestID), requestID: requestID, waitFor: timeout) {
        case .agents(_, let listing): return listing
        case .error(_, let error): throw error
        default: throw unreachable(after: timeout)
        }
    }

    /// The bus's catalog: every skill on offer with its schema and providers.
    public func skills(timeout: Duration = .seconds(5)) async throws(SkillbusError) -> SkillCatalog {
        let requestID = makeRequestID()
        switch await exchange(.listSkills(requestID: requestID), requestID: requestID, waitFor: timeout) {
        case .skills(_, let catalog): return catalog
        case .error(_, let error): throw error
        default: throw unreachable(after: timeout)
        }
    }

    private func makeRequestID() -> String {
        idPrefix + "-" + String(nextID.add(1, ordering: .relaxed).newValue)
    }

    private func unreachable(after wait: Duration) -> SkillbusError {
        SkillbusError(.unreachable, "no answer from the coordinator at \(endpoint) within \(wait) (is it running?)")
    }

    /// Sends `message` and waits for the reply with `requestID`, or nil after `waitFor`.
    private func exchange(_ message: ClientMessage, requestID: String, waitFor: Duration) async -> BusToClientMessage? {
        await withTaskGroup(of: BusToClientMessage?.self) { group in
            group.addTask {
                await withCheckedContinuation { continuation in
                    self.pending.add(requestID, continuation)
                    self.socket.send(message.encoded())
                }
            }
            group.addTask {
                // Cancelled once the reply is in; otherwise the caller gets nil. Whoever removes the entry
                // resumes it: the reply or this timer, never both.
                guard (try? await Task.sleep(for: waitFor)) != nil else { return nil }
                self.pending.expire(requestID)
                return nil
            }
            let first = await group.next() ?? nil
            group.cancelAll()
            return first
        }
    }
}

/// ENTRY messages of snapshots being received, by request id.
private final class SnapshotEntries: Sendable {
    let table = Mutex<[String: [[UInt8]]]>([:])
}

/// Callers waiting for a reply, by request id. Whoever removes an entry resumes it, exactly once.
private final class PendingReplies: Sendable {
    private struct Table {
        var waiting: [String: CheckedContinuation<BusToClientMessage?, Never>] = [:]
        /// Ids whose time ran out before their caller was even registered.
        var expired: Set<String> = []
    }

    private let table = Mutex(Table())

    /// Registers a caller; one whose time already ran out is answered nil at once.
    func add(_ requestID: String, _ continuation: CheckedContinuation<BusToClientMessage?, Never>) {
        let late = table.withLock { table -> Bool in
            if table.expired.remove(requestID) != nil { return true }
            table.waiting[requestID] = continuation
            return false
        }
        if late { continuation.resume(returning: nil) }
    }

    /// A reply arrived: hands it to its caller, if one still waits.
    func resolve(_ requestID: String, with message: BusToClientMessage) {
        table.withLock { $0.waiting.removeValue(forKey: requestID) }?.resume(returning: message)
    }

    /// The caller's time ran out: it gets nil, now or as soon as it registers.
    func expire(_ requestID: String) {
        let continuation = table.withLock { table -> CheckedContinuation<BusToClientMessage?, Never>? in
            guard let continuation = table.waiting.removeValue(forKey: requestID) else {
                table.expired.insert(requestID)
                return nil
            }
            return continuation
        }
        continuation?.resume(returning: nil)
    }
}
