import Foundation
import SkillbusZMQ
import Synchronization

/// The coordinator's keys at work: the bus ROUTER's CURVE (`busCurve`: the policy asked directly, on the
/// coordinator's thread, by the own engine), the ZAP handler that admits the feed's connections (libzmq's, on
/// its own thread; the bus's too when libzmq serves it), the socket monitors that see the feed's handshakes
/// which never reached it (a peer without keys, a wrong server key), and the count of refusals that the
/// coordinator's thread publishes as `security.refused`.
/// Everything but `refusals` belongs to the coordinator's thread, which creates and closes it.
final class BusGuard {
    let policy: AccessPolicy
    private let keys: CurveKeyPair
    private let zap: ZAPHandler
    private let refusals: Refusals
    private let logger: Logger
    /// A PAIR per monitored socket, with that socket's name.
    private var monitors: [(socket: ZMQSocket, name: String)] = []
    private(set) var refused = 0
    static let publishedPerTick = 10

    /// A refusal on its way from the ZAP thread to the coordinator's.
    struct Refusal: Sendable {
        var socket: String
        var address: String
        var key: String
        var reason: String
    }

    /// Written by the ZAP thread, read by the coordinator's thread, behind one lock.
    final class Refusals: Sendable {
        let queue = Mutex<(items: [Refusal], dropped: Int)>(([], 0))
        static let limit = 1000

        func add(_ refusal: Refusal) {
            queue.withLock { queue in
                if queue.items.count < Self.limit { queue.items.append(refusal) } else { queue.dropped += 1 }
            }
        }

        func take() -> (items: [Refusal], dropped: Int) {
            queue.withLock { queue in
                defer { queue = ([], 0) }
                return queue
            }
        }
    }

    /// Binds the ZAP handler in `context`; it must exist before any socket it guards binds.
    init(security: CoordinatorSecurity, context: ZMQContext, logger: Logger) throws {
        policy = security.policy
        keys = security.keys
        self.logger = logger
        let refusals = Refusals()
        self.refusals = refusals
        let policy = security.policy
        zap = try ZAPHandler(context: context) { request in Self.decide(request, policy: policy, refusals: refusals) }
    }

    /// The policy's answer about a connection, a refusal noted for the feed and the log.
    private static func decide(_ request: ZAPRequest, policy: AccessPolicy, refusals: Refusals) -> ZAPVerdict {
        let verdict = policy.authenticate(request)
        if case .refuse(let reason) = verdict {
            let key = request.credentials.first.flatMap { $0.count == 32 ? Curve.encode($0) : nil } ?? ""
            let socket = request.domain == AccessPolicy.feedDomain ? "feed" : "bus"
            refusals.add(Refusal(socket: socket, address: request.address, key: key, reason: reason))
        }
        return verdict
    }

    /// CURVE for the own bus ROUTER: the coordinator's secret key, and each client's key put to the policy
    /// as the ZAP handler would put it (so the same User-Id, the key's name, comes with its messages).
    var busCurve: ZMTPRouter.Curve {
        let (policy, refusals) = (self.policy, self.refusals)
        return ZMTPRouter.Curve(secretKey: keys.secretKey) { client in
            Self.decide(
                ZAPRequest(
                    domain: AccessPolicy.busDomain, address: client.address, mechanism: "CURVE",
                    credentials: [client.publicKey]), policy: policy, refusals: refusals)
        }
    }

    /// Counts the CURVE handshakes the own bus ROUTER saw fail (no keys, a wrong server key, a malformed or
    /// replayed command), with the peer's address.
    func handshakesFailed(_ failures: [ZMTPRouter.HandshakeFailure]) {
        for failure in failures {
            refusals.add(Refusal(socket: "bus", address: failure.address, key: "", reason: failure.reason))
        }
    }

    /// Makes `socket` a CURVE server under `domain`, and watches its failed handshakes unless its owner
    /// monitors it already and hands them to `handshakeFailed` (the bus ROUTER's `ConnectionWatch`).
    /// Call before bind.
    func protect(_ socket: ZMQSocket, domain: String, name: String, context: ZMQContext, monitored: Bool = false) throws {
        try socket.useCurveServer(secretKey: keys.secretKey, domain: domain)
        guard !monitored else { return }
        let endpoint = "inproc://skillbus-monitor-\(name)-\(UUID().uuidString)"
        try socket.monitorHandshakeFailures(on: endpoint)
        let monitor = try ZMQSocket(context: context, type: .pair)
        try monitor.connect(endpoint)
        monitors.append((monitor, name))
    }

    var pollItems: [PollItem] { monitors.map { PollItem(.socket($0.socket)) } }

    /// Counts the failed handshakes the monitors report (their peers' addresses are unknown to libzmq's
    /// monitor: it names the bound endpoint).
    func drainMonitors() {
        for (monitor, name) in monitors {
            while let message = try? monitor.receive(dontWait: true) {
                if let event = MonitorEvent(message: message) { handshakeFailed(event, socket: name) }
            }
        }
    }

    /// Counts a failed handshake a monitor reported on the socket called `socket`.
    func handshakeFailed(_ event: MonitorEvent, socket: String) {
        guard let problem = event.handshakeProblem else { return }
        refusals.add(Refusal(socket: socket, address: "", key: "", reason: problem))
    }

    /// The refusals since the last tick as feed events (at most `publishedPerTick`; the rest are only
    /// counted, and the next event's `refused` says so), each logged, up to the same number.
    func tick() -> [CoordinatorAction] {
        let (items, dropped) = refusals.take()
        guard !items.isEmpty || dropped > 0 else { return [] }
        var actions: [CoordinatorAction] = []
        for item in items {
            refused += 1
            guard actions.count < Self.publishedPerTick else { continue }
            let from = item.address.isEmpty ? "" : " from \(item.address)"
            logger.warning("refused a connection to the \(item.socket)\(from): \(item.reason)")
            actions.append(
                .publish(
                    .securityRefused(
                        socket: item.socket, address: item.address, key: item.key, reason: item.reason,
                        refused: refused)))
        }
        refused += dropped
        let unlogged = items.count - actions.count + dropped
        if unlogged > 0 { logger.warning("refused \(unlogged) more connection(s) without logging each") }
        return actions
    }

    /// Closes the monitors and stops the ZAP handler; the sockets it guards must be closed already.
    func close() {
        for (monitor, _) in monitors { monitor.close() }
        monitors = []
        zap.stopAndWait()
    }
}

extension CoordinatorLoop {
    /// A worker message the peer's key may not send: refused in the worker dialect, and a READY also on
    /// the feed as `agent.refused`, as every refused registration is.
    func refuseWorker(_ peer: PeerID, _ body: Multipart, _ message: WorkerMessage, _ error: SkillbusError) {
        refuse(peer, body, error)
        if case .ready(let registration) = message {
            let name = registration["name"]?.stringValue ?? ""
            perform([.publish(.registrationRefused(agent: String(name.prefix(128)), error: error))])
        }
    }
}
