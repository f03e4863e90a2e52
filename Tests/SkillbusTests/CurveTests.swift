import Foundation
import Synchronization
import Testing

@testable import SkillbusZMQ

/// Runs blocking socket work on a thread of its own, never on the cooperative pool.
func onThread<T: Sendable>(_ work: @escaping @Sendable () throws -> T) async throws -> T {
    try await withCheckedThrowingContinuation { continuation in
        Thread { continuation.resume(with: Result { try work() }) }.start()
    }
}

@Suite("CURVE keys and the ZAP handler")
struct CurveTests {
    @Test("a generated pair: 40 Z85 characters each, the public key derived from the secret one")
    func keyPairs() throws {
        #expect(Curve.isAvailable)
        let pair = try CurveKeyPair.generate()
        #expect(pair.publicKey.utf8.count == 40 && pair.secretKey.utf8.count == 40)
        #expect(Curve.publicKey(forSecret: pair.secretKey) == pair.publicKey)
        #expect(CurveKeyPair(secretKey: pair.secretKey) == pair)
        let bytes = try #require(Curve.decode(pair.publicKey))
        #expect(bytes.count == 32 && Curve.encode(bytes) == pair.publicKey)
        #expect(try CurveKeyPair.generate() != pair)
        for bad in ["", "short", String(pair.publicKey.dropLast()) + "\"", pair.publicKey + "x", "é" + pair.publicKey.dropFirst(2)] {
            #expect(Curve.decode(bad) == nil, "\(bad)")
            #expect(CurveKeyPair(secretKey: bad) == nil)
        }
    }

    @Test("ZAP answers as RFC 27 says: version, request id, status, text, user id, metadata")
    func zapFrames() {
        let key = [UInt8](repeating: 9, count: 32)
        let request: Multipart = [
            Array("1.0".utf8), Array("7".utf8), Array("d".utf8), Array("10.0.0.1".utf8), [], Array("CURVE".utf8), key,
        ]
        let seen = Mutex<ZAPRequest?>(nil)
        let accepted = ZAPHandler.answer(request) { request in
            seen.withLock { $0 = request }
            return .accept(userID: "alice")
        }
        #expect(accepted == [Array("1.0".utf8), Array("7".utf8), Array("200".utf8), Array("OK".utf8), Array("alice".utf8), []])
        #expect(seen.withLock { $0 } == ZAPRequest(domain: "d", address: "10.0.0.1", mechanism: "CURVE", credentials: [key]))
        let refused = ZAPHandler.answer(request) { _ in .refuse(reason: "unknown key") }
        #expect(refused[2] == Array("400".utf8) && refused[3] == Array("unknown key".utf8) && refused[4].isEmpty)
        #expect(ZAPHandler.answer([Array("2.0".utf8), Array("8".utf8)]) { _ in .accept(userID: "x") }[2] == Array("500".utf8))
    }

    @Test("over tcp: a known key is admitted with its user id, an unknown one and one without keys are not")
    func handshakes() async throws {
        let (server, alice, mallory) = (try CurveKeyPair.generate(), try CurveKeyPair.generate(), try CurveKeyPair.generate())
        let alicePublic = try #require(Curve.decode(alice.publicKey))
        let refusals = Mutex<[String]>([])
        // Sockets are not Sendable: the whole exchange runs on one thread, which owns them all.
        let outcome = try await onThread { () throws -> (first: Multipart, userID: String?, problem: String?, next: Multipart?) in
            let context = try ZMQContext()
            let zap = try ZAPHandler(context: context) { request in
                if request.credentials.first == alicePublic { return .accept(userID: "alice") }
                refusals.withLock { $0.append(request.credentials.first.map(Curve.encode) ?? "") }
                return .refuse(reason: "unknown key")
            }
            defer { zap.stopAndWait() }
            let router = try ZMQSocket(context: context, type: .router)
            try router.useCurveServer(secretKey: server.secretKey, domain: "test")
            try router.monitorHandshakeFailures(on: "inproc://curve-test-monitor")
            let monitor = try ZMQSocket(context: context, type: .pair)
            try monitor.connect("inproc://curve-test-monitor")
            try router.bind("tcp://127.0.0.1:*")
            func dealer(_ keys: CurveKeyPair?) throws -> ZMQSocket {
                let socket = try ZMQSocket(context: context, type: .dealer)
                if let keys { try socket.useCurveClient(CurveCredentials(serverKey: server.publicKey, keys: keys)) }
                try socket.connect(router.lastEndpoint)
                return socket
            }
            let (good, bad, none) = (try dealer(alice), try dealer(mallory), try dealer(nil))
            defer { for socket in [good, bad, none, router, monitor] { socket.close() } }
            for (socket, text) in [(bad, "bad"), (none, "none"), (good, "good")] { try socket.send([Array(text.utf8)]) }
            func next(_ socket: ZMQSocket) throws -> (Multipart, String?)? {
                _ = try poll([PollItem(.socket(socket))], timeoutMs: 5000)
                return try socket.receiveWithUserID(dontWait: true)
            }
            let first = try next(router)
            let problem = try next(monitor).flatMap { MonitorEvent(message: $0.0) }?.handshakeProblem
            let deadline = ContinuousClock.now + .seconds(5)
            while refusals.withLock({ $0.isEmpty }) && ContinuousClock.now < deadline { usleep(10_000) }
            // Nothing else got through: the next message is alice's again.
            try good.send([Array("again".utf8)])
            return (first?.0 ?? [], first?.1, problem, try next(router)?.0)
        }
        // Whatever the order of the three handshakes, only alice's messages come, with her user id.
        #expect(outcome.first.last == Array("good".utf8) && outcome.userID == "alice")
        #expect(outcome.problem != nil)
        #expect(refusals.withLock { $0.first } == mallory.publicKey)
        #expect(outcome.next?.last == Array("again".utf8))
    }
}
