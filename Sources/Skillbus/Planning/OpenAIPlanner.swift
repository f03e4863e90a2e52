import Foundation
import Synchronization

/// A planner backed by any OpenAI-compatible chat-completions endpoint with tool calling (llama.cpp's
/// server, Ollama, vLLM, or a hosted one). Each step is one request: the registry's skills are its
/// `tools`, the session's history and the turn so far its `messages`. A tool call in the answer becomes a
/// skill call; text becomes the reply, forwarded piece by piece while the endpoint is still writing it.
///
/// Several tool calls in one answer run one after another: the later ones are handed out by the next
/// `next`s of the same turn without asking the model again, unless one of them failed (then the model
/// hears of it and decides anew). Arguments that are not a JSON object go back to the model as a failed
/// step (`.invalidCall`), as does a call the loop refuses (unknown skill, parameters that do not fit).
/// Failures of the endpoint itself (unreachable, refused key, rate limit, not a chat completion) throw a
/// `ChatEndpointError`, which fails the turn and nothing else.
public struct OpenAIPlanner: Planner {
    public let settings: Settings
    private let apiKey: String?
    private let pending = PendingCalls()

    /// The most of an answer the planner reads (a reply, or tool calls with their arguments).
    static let maxAnswerBytes = 8 << 20
    /// A 429 asking to wait at most this long is retried once; a longer wait fails the turn.
    static let longestRetryWait: Duration = .seconds(5)

    /// Resolves the API key and loads libcurl now, so that a worker whose variable is not set, or whose host
    /// lacks libcurl, refuses to start rather than failing its first turn.
    public init(settings: Settings, environment: [String: String] = ProcessInfo.processInfo.environment)
        throws(SkillbusError)
    {
        try Self.requireHTTPClient(LibCurl.standard)
        self.settings = settings
        if let name = settings.apiKeyEnv {
            guard let key = environment[name], !key.isEmpty else {
                throw SkillbusError(
                    .invalidConfiguration,
                    "openai.apiKeyEnv: the environment variable \(name), which should hold the API key, is not set")
            }
            apiKey = key
        } else {
            apiKey = nil
        }
    }

    /// The refusal of a planner whose HTTP client cannot work: libcurl could not be loaded.
    static func requireHTTPClient(_ loaded: Result<Void, LibCurl.LoadError>) throws(SkillbusError) {
        if case .failure(let error) = loaded {
            throw SkillbusError(.invalidConfiguration, "openai: \(error.message)")
        }
    }

    public init(json: JSONValue, environment: [String: String] = ProcessInfo.processInfo.environment)
        throws(SkillbusError)
    {
        try self.init(settings: Settings(json: json), environment: environment)
    }

    public func next(_ input: PlannerInput) async throws -> PlannerDecision {
        if let queued = pending.next(after: input) { return queued }
        let call = try await send(ChatCompletionsRequest.body(settings, input))
        let reader = ChatCompletionReader(call, endpoint: settings.baseURL, timeoutSeconds: settings.timeoutSeconds)
        switch try await reader.decide() {
        case .reply(let first):
            // The first piece is already here; the rest is read as the agent asks for it.
            let head = Mutex<String?>(first)
            return .streamedReply(
                ReplyStream(
                    AsyncThrowingStream {
                        if let first = head.withLock({ $0.take() }) { return first }
                        return try await reader.nextPiece()
                    }))
        case .toolCalls(let calls):
            let decisions = try calls.map { call throws(ChatEndpointError) in
                try Self.decision(for: call, skills: input.skills, agents: input.agents)
            }
            guard let first = decisions.first else {
                throw ChatEndpointError(.malformedResponse, "the endpoint's answer holds an empty list of tool calls")
            }
            pending.remember(decisions, after: input)
            return first
        }
    }

    /// A tool call as the loop's next step: the skill its name stands for, with its arguments parsed. The
    /// model gets arguments that are not a JSON object back as a failed step.
    static func decision(
        for call: ChatCompletionStream.ToolCall, skills: [SkillDescriptor], agents: [TeamMember] = []
    ) throws(ChatEndpointError) -> PlannerDecision {
        guard !call.name.isEmpty else {
            throw ChatEndpointError(.malformedResponse, "the answer holds a tool call without a function name")
        }
        if let asked = AgentTools.decision(for: call.name, arguments: try? JSONValue(parsing: call.arguments), among: agents) {
            return asked
        }
        let skill = ToolNames.skill(for: call.name, among: skills)
        let text = call.arguments.trimmingCharacters(in: .whitespacesAndNewlines)
        // A call of a skill without parameters may come with no arguments at all.
        guard !text.isEmpty else { return .call(skill: skill, parameters: [:]) }
        func refused(_ why: String) -> PlannerDecision {
            let excerpt = text.count > 200 ? text.prefix(200) + "…" : text
            return .invalidCall(
                skill: skill,
                error: SkillbusError(
                    .invalidParameters, "the arguments for '\(skill)' \(why); send one JSON object: \(excerpt)"))
        }
        do {
            let value = try JSONValue(parsing: text)
            guard let parameters = value.objectValue else { return refused("are \(value.typeName), not an object") }
            return .call(skill: skill, parameters: parameters)
        } catch {
            return refused("are not JSON (\(error))")
        }
    }

    /// POSTs the request and returns the call once its answer has begun with a 2xx status. A 429 that asks
    /// for a short wait is retried once.
    private func send(_ body: JSONValue) async throws(ChatEndpointError) -> HTTPStreamingCall {
        var request = HTTPStreamingCall.Request(
            url: settings.endpoint.absoluteString, method: "POST", body: body.serialized())
        request.setValue("application/json", forHTTPHeaderField: "Content-Type")
        request.setValue("text/event-stream", forHTTPHeaderField: "Accept")
        if let apiKey { request.setValue("Bearer \(apiKey)", forHTTPHeaderField: "Authorization") }
        var retried = false
        while true {
            let call: HTTPStreamingCall
            do {
                call = try await HTTPStreamingCall.start(
                    request, timeout: .seconds(settings.timeoutSeconds), maxBodyBytes: Self.maxAnswerBytes)
            } catch {
                throw ChatCompletionReader.endpointError(error, settings.baseURL, settings.timeoutSeconds)
            }
            let status = call.response.statusCode
            if (200..<300).contains(status) { return call }
            let text = (try? await call.body(limit: 16 * 1024)).map { String(decoding: $0, as: UTF8.self) } ?? ""
            let wait = Self.retryAfter(call.response.value(forHTTPHeaderField: "Retry-After"))
            if status == 429, !retried, let wait, wait <= Self.longestRetryWait {
                retried = true
                do { try await Task.sleep(for: wait) } catch {
                    throw ChatEndpointError(.cancelled, "the request to the endpoint was cancelled")
                }
                continue
            }
            throw Self.statusError(status, body: text, retryAfter: wait, hasKey: apiKey != nil)
        }
    }

    /// The turn's failure for an answer outside 2xx, with the endpoint's own message when it gave one.
    static func statusError(_ status: Int, body: String, retryAfter: Duration?, hasKey: Bool) -> ChatEndpointError {
        let said = serverMessage(body)
        let suffix = said.isEmpty ? "" : ": \(said)"
        switch status {
        case 401, 403:
            let advice = hasKey ? "" : " (no key is configured: name its environment variable in apiKeyEnv)"
            return ChatEndpointError(.unauthorized, "the endpoint refused the API key (\(status))\(advice)\(suffix)")
        case 429:
            let after = retryAfter.map { " and asks to retry after \($0.components.seconds) s" } ?? ""
            return ChatEndpointError(.rateLimited, "the endpoint is rate limiting requests (429)\(after)\(suffix)")
        case 404:
            return ChatEndpointError(
                .httpStatus, "the endpoint has no chat completions there (404; baseURL usually ends in /v1)\(suffix)")
        default:
            return ChatEndpointError(.httpStatus, "the endpoint answered HTTP \(status)\(suffix)")
        }
    }

    /// `{"error": {"message": …}}` as OpenAI writes it, else the start of the body.
    static func serverMessage(_ body: String) -> String {
        if let json = try? JSONValue(parsing: body),
            let message = json["error"]?["message"]?.stringValue ?? json["error"]?.stringValue
                ?? json["message"]?.stringValue
        {
            return message
        }
        let trimmed = body.trimmingCharacters(in: .whitespacesAndNewlines)
        return trimmed.count > 300 ? trimmed.prefix(300) + "…" : trimmed
    }

    /// Retry-After in seconds (the HTTP-date form is not worth a wait).
    static func retryAfter(_ header: String?) -> Duration? {
        guard let header, let seconds = Double(header.trimmingCharacters(in: .whitespaces)), seconds >= 0 else {
            return nil
        }
        return .milliseconds(Int(seconds * 1000))
    }
}

/// The tool calls of one answer beyond the first, for the later steps of the same turn. A batch is found
/// again by what the planner is asked: the same message and history, and the steps taken when it was
/// answered followed by the batch's calls so far, all of which succeeded.
final class PendingCalls: Sendable {
    private struct Batch: Sendable {
        let message: String
        let history: [SessionMessage]
        let steps: [PlannerStep]
        let decisions: [PlannerDecision]
    }

    /// Turns that stop halfway leave their batches behind: keep only the latest few.
    static let limit = 32
    private let batches = Mutex<[Batch]>([])

    func remember(_ decisions: [PlannerDecision], after input: PlannerInput) {
        guard decisions.count > 1 else { return }
        let batch = Batch(message: input.message, history: input.history, steps: input.steps, decisions: decisions)
        batches.withLock { batches in
            batches.append(batch)
            if batches.count > Self.limit { batches.removeFirst(batches.count - Self.limit) }
        }
    }

    func next(after input: PlannerInput) -> PlannerDecision? {
        batches.withLock { batches in
            for (position, batch) in batches.enumerated().reversed() {
                guard input.steps.count > batch.steps.count, input.message == batch.message,
                    input.steps.starts(with: batch.steps), input.history == batch.history
                else { continue }
                let served = input.steps[batch.steps.count...]
                guard served.count < batch.decisions.count,
                    zip(served, batch.decisions).allSatisfy({ step, decision in Self.step(step, took: decision) })
                else { continue }
                let succeeded = served.allSatisfy { if case .success = $0.outcome { true } else { false } }
                let last = served.count + 1 == batch.decisions.count
                if !succeeded || last { batches.remove(at: position) }
                return succeeded ? batch.decisions[served.count] : nil
            }
            return nil
        }
    }

    private static func step(_ step: PlannerStep, took decision: PlannerDecision) -> Bool {
        switch decision {
        case .call(let skill, let parameters): step.skill == skill && step.parameters == parameters
        case .invalidCall(let skill, _): step.skill == skill && step.parameters.isEmpty
        case .ask(let target, let message): step.asked == target && step.parameters["message"]?.stringValue == message
        default: false
        }
    }
}
