import Foundation
import Skillbus
import SkillbusZMQ

/// The baseline's broker: a plain ROUTER→DEALER `zmq_proxy`, nothing else.
public enum BaselineProxyCommand: SkillbusCommand {
    public static let spec = CommandSpec(
        name: "bench-baseline-proxy", abstract: "Raw ROUTER→DEALER proxy for the benchmark's baseline.",
        discussion: "Started by 'skillbus bench'; prints its bound endpoints, then proxies until killed.",
        options: [
            OptionSpec("--frontend", value: "ENDPOINT", help: "ROUTER endpoint for clients."),
            OptionSpec("--backend", value: "ENDPOINT", help: "DEALER endpoint for workers."),
        ], hidden: true)

    public static func run(_ arguments: ParsedArguments) async throws -> Int32 {
        let frontendEndpoint = try arguments.endpoint("--frontend", in: spec) ?? "tcp://127.0.0.1:*"
        let backendEndpoint = try arguments.endpoint("--backend", in: spec) ?? "tcp://127.0.0.1:*"
        let context = try ZMQContext()
        // zmq_proxy blocks for good: on a thread of its own, never on the cooperative pool.
        try await OwnThread.run {
            let frontend = try ZMQSocket(context: context, type: .router)
            let backend = try ZMQSocket(context: context, type: .dealer)
            for socket in [frontend, backend] {
                try socket.setSendHighWaterMark(0)
                try socket.setReceiveHighWaterMark(0)
            }
            try frontend.bind(frontendEndpoint)
            try backend.bind(backendEndpoint)
            print("skillbus baseline proxy ready: frontend=\(frontend.lastEndpoint) backend=\(backend.lastEndpoint)")
            try frontend.proxy(to: backend)
        }
        return 0
    }
}

/// The baseline's worker: sends every message straight back.
public enum BaselineWorkerCommand: SkillbusCommand {
    public static let spec = CommandSpec(
        name: "bench-baseline-worker", abstract: "Raw echo worker for the benchmark's baseline.",
        discussion: "Started by 'skillbus bench'; echoes every message until killed.",
        options: [OptionSpec("--connect", value: "ENDPOINT", help: "The proxy's backend endpoint.")], hidden: true)

    public static func run(_ arguments: ParsedArguments) async throws -> Int32 {
        guard let endpoint = try arguments.endpoint("--connect", in: spec) else {
            throw UsageError(spec, "option '--connect' is required")
        }
        let context = try ZMQContext()
        // Blocking receives: on a thread of its own, never on the cooperative pool.
        try await OwnThread.run {
            let socket = try ZMQSocket(context: context, type: .dealer)
            try socket.connect(endpoint)
            while let message = try socket.receive() { try socket.send(message) }
        }
        return 0
    }
}
