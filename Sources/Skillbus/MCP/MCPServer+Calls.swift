import Foundation
import Synchronization

/// `tools/call`: a round on the bus for a skill, a turn for an agent; progress, cancel and confirmations.
extension MCPServer {
    func startCall(id: JSONRPCID, params: JSONValue, output: @escaping Output) throws(JSONRPCError) {
        guard let name = params["name"]?.stringValue else { throw .invalidParams("tools/call needs 'name', a string") }
        let arguments = params["arguments"] ?? [:]
        guard arguments.objectValue != nil || arguments == .null else {
            throw .invalidParams("'arguments' of tools/call must be an object, got \(arguments.typeName)")
        }
        guard let tool = MCPToolList.tool(named: name, in: bus.registry) else {
            throw .invalidParams("unknown tool '\(name.prefix(128))': no skill or agent of that name is on the bus")
        }
        let meta = params["_meta"]
        let token = meta?["progressToken"].flatMap(JSONRPCID.init(json:))
        var timeout: Duration?
        if let value = meta?["skillbus/timeoutMs"] {
            guard let ms = value.intValue, (1...Wire.maxTimeoutMs).contains(ms) else {
                throw .invalidParams("'_meta.skillbus/timeoutMs' must be an integer from 1 to \(Wire.maxTimeoutMs)")
            }
            timeout = .milliseconds(ms)
        }
        let named = meta?["skillbus/round"]
        guard named == nil || named?.stringValue?.isEmpty == false else {
            throw .invalidParams("'_meta.skillbus/round' must be a non-empty string")
        }
        let parameters = arguments == .null ? JSONValue.object([:]) : arguments
        let key = MCPRoundReuse.key(tool: name, arguments: parameters)
        let busRequestID = bus.makeRequestID()
        let round = try state.withLock { state throws(JSONRPCError) -> (round: String, reused: Bool) in
            guard state.calls[id] == nil else {
                throw JSONRPCError.invalidRequest("request id \(id) is already in use")
            }
            state.calls[id] = Call(busRequestID: busRequestID, output: output)
            if let named = named?.stringValue { return (named, true) }
            return state.reuse.round(for: key, now: .now) { UUID().uuidString.lowercased() }
        }
        if named != nil {
            logger?.info("\(name): in round \(round.round), as the call names it")
        } else if round.reused {
            logger?.info("\(name): in round \(round.round) again, as an identical call was within the reuse window")
        }
        let call = PreparedCall(
            id: id, tool: tool, arguments: parameters, key: key, round: round.round, busRequestID: busRequestID,
            progressToken: token, timeout: timeout, output: output)
        let task = Task { await self.run(call) }
        // A cancel (or close) that came before the task was recorded found nothing to cancel: do it now.
        let cancelledMeanwhile = state.withLock { state -> Bool in
            guard state.calls[id] != nil else { return false }
            state.calls[id]?.task = task
            return state.calls[id]?.cancelled == true
        }
        if cancelledMeanwhile { task.cancel() }
    }

    struct PreparedCall: Sendable {
        var id: JSONRPCID
        var tool: MCPTool
        var arguments: JSONValue
        var key: String
        var round: String
        var busRequestID: String
        var progressToken: JSONRPCID?
        var timeout: Duration?
        var output: Output
    }

    private func run(_ call: PreparedCall) async {
        let result: JSONValue
        var failed = false
        switch call.tool.target {
        case .skill(let skill):
            let progress = ProgressRelay(token: call.progressToken, output: call.output)
            do {
                let document = try await bus.run(
                    skill: skill.identifier, arguments: call.arguments, roundID: call.round,
                    sessionID: settings.sessionID, requestID: call.busRequestID,
                    timeout: call.timeout ?? settings.timeout,
                    onOutput: progress.relay)
                failed = document.status != .ok
                result = MCPCallResult.skill(document)
            } catch {
                failed = true
                result = MCPCallResult.failure(error, meta: ["skillbus/round": .string(call.round)])
            }
        case .agent(let agent):
            let progress = ProgressRelay(token: call.progressToken, output: call.output)
            let message = call.arguments["message"]?.stringValue
            do throws(SkillbusError) {
                guard let message else {
                    throw SkillbusError(
                        .invalidParameters,
                        "invalid parameters for '\(call.tool.name)': missing required parameter "
                            + "'message' (string)")
                }
                let document = try await bus.ask(
                    agent: agent, message: message, roundID: call.round, sessionID: settings.sessionID,
                    requestID: call.busRequestID, timeout: call.timeout ?? settings.askTimeout,
                    onPiece: progress.relayPiece)
                result = MCPCallResult.turn(agent: agent, document: document, round: call.round)
            } catch {
                failed = true
                result = MCPCallResult.failure(error, meta: ["skillbus/round": .string(call.round)])
            }
        }
        let (ended, waiting) = state.withLock { state in
            if failed { state.reuse.forget(call.key, round: call.round) }
            let waiting = state.outbound.filter { $0.value.call == call.id }
            for key in waiting.keys { state.outbound[key] = nil }
            return (state.calls.removeValue(forKey: call.id), Array(waiting.values))
        }
        for entry in waiting { entry.continuation.resume(returning: nil) }
        guard let ended, !ended.cancelled else {
            return logger?.info("\(call.tool.name) (round \(call.round)) was cancelled by the client") ?? ()
        }
        call.output(.result(id: call.id, result: result))
    }

    /// The client gave up on request `id`: its round is cancelled on the bus, and it gets no answer.
    func cancel(_ id: JSONRPCID) {
        let task = state.withLock { state -> Task<Void, Never>? in
            guard state.calls[id] != nil else { return nil }
            state.calls[id]?.cancelled = true
            return state.calls[id]?.task
        }
        guard let task else {
            return logger?.debug("cancel for \(id.description.prefix(64)), which is not running") ?? ()
        }
        logger?.info("the client cancelled request \(id.description.prefix(64))")
        task.cancel()
    }

    /// A skill of one of our calls needs the user's approval: asked through elicitation when the client
    /// can, else refused (the call then ends `confirmation_required`). nil: not one of our calls.
    func confirm(_ confirmation: Confirmation) async -> Bool? {
        let found = state.withLock { state -> (call: JSONRPCID, output: Output, elicits: Bool)? in
            guard let (id, call) = state.calls.first(where: { $0.value.busRequestID == confirmation.requestID })
            else { return nil }
            return (id, call.output, state.clientElicits)
        }
        guard let (call, output, elicits) = found else { return nil }
        guard elicits else {
            logger?.info(
                "refused to run \(confirmation.skill) unconfirmed: the client cannot ask its user (elicitation)")
            return false
        }
        let parameters = (confirmation.parameters.objectValue ?? [:]).sorted { $0.key < $1.key }
            .map { "\($0.key)=\($0.value.stringValue ?? $0.value.jsonString)" }.joined(separator: ", ")
        let params: JSONValue = [
            "message": .string("Skillbus: run \(confirmation.skill)(\(parameters))? It asks for confirmation first."),
            "requestedSchema": ["type": "object", "properties": [:]],
        ]
        guard
            case .result(_, let answer)? = await request(
                "elicitation/create", params: params, for: call, output: output)
        else { return false }
        return answer["action"] == "accept"
    }
}

/// Turns a skill's partial output, or an agent's reply as it streams, into `notifications/progress` when the
/// client sent a progress token. `progress` counts the parts (or pieces) so far, so it only grows.
private final class ProgressRelay: Sendable {
    let token: JSONRPCID?
    let output: MCPServer.Output
    private let pieces = Atomic<Int>(0)

    init(token: JSONRPCID?, output: @escaping MCPServer.Output) {
        self.token = token
        self.output = output
    }

    var relay: @Sendable (OutputBatch) -> Void {
        { batch in
            self.send(batch.parts.map(\.humanReadable).joined(separator: "\n"), count: batch.first + batch.parts.count)
        }
    }

    var relayPiece: @Sendable (String) -> Void {
        { piece in self.send(piece, count: self.pieces.add(1, ordering: .relaxed).newValue) }
    }

    private func send(_ text: String, count: Int) {
        guard let token else { return }
        output(
            .notification(
                method: "notifications/progress",
                params: ["progressToken": token.json, "progress": .number(Double(count)), "message": .string(text)]))
    }
}
