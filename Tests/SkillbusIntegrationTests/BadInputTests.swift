import Foundation
import Synchronization
import Testing

@testable import Skillbus
@testable import SkillbusZMQ

@Suite("Bad input: the bus answers clearly and keeps serving", .serialized, .timeLimit(.minutes(2)))
struct BadInputTests {
    @Test("garbage, truncated frames, wrong versions and oversized messages each get an error naming the problem")
    func malformedMessages() async throws {
        let cluster = try await TestCluster(coordinatorArguments: ["--max-message-bytes", "4096"])
        defer { cluster.terminate() }
        try await cluster.startWorker("alpha", ["--skills", "echo"])
        let context = try ZMQContext()
        let peer = try RawPeer(cluster.bus, context: context)
        defer { peer.close() }

        /// Sends `frames` as they are and expects an ERROR in `dialect` (a v1 peer's is in v1 framing).
        func expectError(raw frames: Multipart, code: String, mentioning: String, dialect: String = "SKB2C") async throws {
            let reply = try await peer.exchange(frames)
            #expect(text(reply[0]) == dialect)
            #expect(text(reply[1]) == "ERROR")
            let error = try JSONValue(parsing: reply.last!)
            #expect(error["code"]?.stringValue == code)
            let message = error["message"]?.stringValue ?? ""
            #expect(message.contains(mentioning), "message was: \(message)")
        }
        /// The same for a message given as its fields, packed as v2 frames.
        func expectError(_ fields: [String], code: String, mentioning: String, dialect: String = "SKB2C") async throws {
            try await expectError(raw: toBus(fields), code: code, mentioning: mentioning, dialect: dialect)
        }
        /// An envelope alone, holding `fields`, whatever the command's layout says.
        func envelope(_ fields: [String]) -> [UInt8] { Wire.pack(fields.map { Array($0.utf8) }, [:])[0] }

        try await expectError(raw: [[0xFF, 0x00, 0x13]], code: "unsupported_protocol", mentioning: "SKB2C")
        // A v1 peer hears, in v1 framing, that this bus speaks v2.
        try await expectError(
            raw: [Array("SKB1C".utf8), Array("REQUEST".utf8)], code: "unsupported_protocol", mentioning: "SKB2C",
            dialect: "SKB1C")
        try await expectError(
            raw: [Array("SKB1W".utf8), Array("READY".utf8), Array("{}".utf8)], code: "unsupported_protocol",
            mentioning: "SKB2W", dialect: "SKB1W")
        try await expectError(["SKB2C"], code: "malformed_message", mentioning: "command")
        try await expectError(
            ["SKB2C", "REQUEST", "r1"], code: "malformed_message", mentioning: "REQUEST takes 8 fields, got 3")
        try await expectError(["SKB2C", "DANCE", "r1"], code: "malformed_message", mentioning: "DANCE")
        try await expectError(
            ["SKB2C", "REQUEST", "r2", "round", "", "echo", "soon", "{}"], code: "malformed_message", mentioning: "timeout")
        // Parameters inside the envelope (the folded form, §2.1), and a frame after it as well.
        try await expectError(
            raw: [envelope(["SKB2C", "REQUEST", "r3", "round", "", "echo", "", "{}"]), Array("x".utf8)],
            code: "malformed_message", mentioning: "REQUEST carries fields 0 to 6 in its envelope")
        try await expectError(
            raw: [Array("SKB2C".utf8) + [9, 0x52]], code: "malformed_message", mentioning: "says 9 bytes; only 1 follow")
        try await expectError(
            ["SKB2W", "RESULT", "i99", "ok", "{}"], code: "not_registered", mentioning: "READY", dialect: "SKB2W")
        try await expectError(
            ["SKB2W", "READY", "{not json"], code: "malformed_message", mentioning: "invalid JSON", dialect: "SKB2W")
        // More frames than any message has: refused by count (the frames past 32 were never kept).
        try await expectError(
            raw: [envelope(["SKB2C", "REQUEST", "many"])] + Array(repeating: [0x41], count: 40),
            code: "message_too_large", mentioning: "message of 41 frames exceeds the limit of 32 frames (maxFrames)")
        try await expectError(
            raw: [envelope(["SKB2W", "RESULT"])] + Array(repeating: [], count: 32),
            code: "message_too_large", mentioning: "33 frames", dialect: "SKB2W")
        // Many frames each under the limit, together over it.
        try await expectError(
            raw: [envelope(["SKB2C", "REQUEST", "sum"])] + Array(repeating: [UInt8](repeating: 0x42, count: 1000), count: 8),
            code: "message_too_large", mentioning: "message of 8017 bytes exceeds the limit of 4096 bytes")
        // An envelope alone over the limit: still answered in its dialect, with its request id, as too large
        // (it used to be "empty message (no protocol header frame)" with no request id).
        let hugeEnvelope = envelope(["SKB2C", "REQUEST", "huge-envelope", "r", "", "echo", String(repeating: "9", count: 5000)])
        let tooLarge = try await peer.exchange([hugeEnvelope, Array("{}".utf8)])
        #expect(text(tooLarge[1]) == "ERROR" && text(tooLarge[2]) == "huge-envelope")
        #expect(try JSONValue(parsing: tooLarge.last!)["code"] == "message_too_large")
        let big = JSONValue.object(["text": .string(String(repeating: "x", count: 5000))]).serialized()
        try await expectError(
            raw: ClientMessage.invoke(InvokeRequest(requestID: "big", roundID: "r", skill: "echo", parameters: big))
                .encoded(),
            code: "message_too_large", mentioning: "limit of 4096 bytes")

        // A malformed batch (§2.2) is refused whole, naming the problem, with no request id: it has none.
        let skills = ClientMessage.listSkills(requestID: "s").encoded()[0]
        let heartbeat = Array("SKB2W".utf8) + [9] + Array("HEARTBEAT".utf8)
        try await expectError(
            raw: [Array("SKB2C".utf8) + [5] + Array("BATCH".utf8)], code: "malformed_message",
            mentioning: "BATCH holds no message")
        try await expectError(
            raw: [Wire.batched([skills, Wire.batched([skills])])], code: "malformed_message",
            mentioning: "BATCH message 2 is a BATCH (batches do not nest)")
        let otherDialect = try await peer.exchange([Wire.batched([skills, heartbeat])])
        #expect(text(otherDialect[1]) == "ERROR" && otherDialect[2].isEmpty)
        #expect(try JSONValue(parsing: otherDialect[3])["message"] == "BATCH message 2 does not start with SKB2C")

        // Parameters that are not a JSON object are refused by the worker before anything runs.
        let notObject = try await peer.exchange(
            ClientMessage.invoke(
                InvokeRequest(requestID: "arr", roundID: "r", skill: "echo", parameters: Array("[1]".utf8))
            )
            .encoded())
        #expect(text(notObject[4]) == "error")
        #expect(try JSONValue(parsing: notObject[7])["code"] == "invalid_parameters")

        // A well-behaved request right after is served.
        let good = try await peer.exchange(
            ClientMessage.invoke(
                InvokeRequest(requestID: "ok", roundID: "r", skill: "echo", parameters: Array(#"{"text":"fine"}"#.utf8))
            ).encoded())
        guard case .reply(let reply) = try BusToClientMessage.decode(fields: good) else {
            Issue.record("expected a REPLY")
            return
        }
        #expect(reply.requestID == "ok" && reply.status == .ok && reply.agent == "alpha")
        #expect(try SkillResult(json: JSONValue(parsing: reply.payload)) == .text("fine"))
        let (code, document) = try await cluster.sendJSON(["echo", "text=after the garbage"])
        #expect(code == 0 && document["result"]?["text"] == "after the garbage")
    }

    @Test("a BATCH's messages are each handled as if alone; answers that leave together go back in one BATCH")
    func batches() async throws {
        let cluster = try await TestCluster()
        defer { cluster.terminate() }
        try await cluster.startWorker("alpha", ["--skills", "echo"])
        let context = try ZMQContext()
        let peer = try RawPeer(cluster.bus, context: context)
        defer { peer.close() }

        // Three listings are answered in the same pass of the bus, so their answers leave in one batch.
        let listings = (1...3).map { ClientMessage.listSkills(requestID: "s\($0)").encoded()[0] }
        let answer = try await peer.exchange([Wire.batched(listings)])
        #expect(text(answer[1]) == "BATCH" && answer.count == 5)
        let answered = answer.dropFirst(2).map { text(busFields([$0])[1]) + " " + text(busFields([$0])[2]) }
        #expect(answered == ["SKILLS s1", "SKILLS s2", "SKILLS s3"])

        // Two requests in one batch each reach the worker and are answered, batched or not.
        let requests = ["one", "two"].map { word in
            Wire.folded(
                ClientMessage.invoke(
                    InvokeRequest(
                        requestID: word, roundID: "", skill: "echo", parameters: Array(#"{"text":"\#(word)"}"#.utf8))
                ).encoded())[0]
        }
        peer.socket.send([Wire.batched(requests)])
        var replies: [String: JSONValue] = [:]
        while replies.count < 2 {
            let message = try await peer.next()
            let answers = text(message[1]) == "BATCH" ? message.dropFirst(2).map { busFields([$0]) } : [message]
            for answer in answers {
                guard case .reply(let reply) = try BusToClientMessage.decode(fields: answer) else {
                    Issue.record("expected a REPLY, got \(text(answer[1]))")
                    return
                }
                replies[reply.requestID] = try JSONValue(parsing: reply.payload)
            }
        }
        #expect(replies["one"]?["text"] == "one" && replies["two"]?["text"] == "two")
    }

    @Test("a frame beyond libzmq's hard cap costs its sender the connection, and nobody else anything")
    func beyondHardCap() async throws {
        // --max-message-bytes 4096: answered up to 4 × 4096 + 4096 bytes per frame, dropped beyond.
        let cluster = try await TestCluster(coordinatorArguments: ["--max-message-bytes", "4096"])
        defer { cluster.terminate() }
        try await cluster.startWorker("alpha", ["--skills", "echo"])
        let context = try ZMQContext()
        let giant = try RawPeer(cluster.bus, context: context)
        defer { giant.close() }
        giant.socket.send(toBus([Array("SKB2C".utf8), Array("ROUND".utf8), [UInt8](repeating: 65, count: 30_000)]))
        let (code, document) = try await cluster.sendJSON(["echo", "text=unharmed"])
        #expect(code == 0 && document["result"]?["text"] == "unharmed")
        // The same socket, once libzmq has reconnected it, is served; and what it hears first is that
        // reply, not an answer to the giant: a peer's messages are handled in order, so the giant was
        // never read. (A request sent before the reconnect is lost with the old connection: ask again.)
        var first: Multipart?
        for attempt in 0..<20 where first == nil {
            let request = InvokeRequest(
                requestID: "after-\(attempt)", roundID: "r", skill: "echo", parameters: Array(#"{"text":"ok"}"#.utf8))
            giant.socket.send(ClientMessage.invoke(request).encoded())
            first = try? await giant.next(timeout: .milliseconds(500))
        }
        let reply = try #require(first)
        #expect(text(reply[1]) == "REPLY")
        #expect(text(reply[2]).hasPrefix("after-"))
    }

    @Test("bytes that are not ZMTP, or another mechanism, cost their sender the connection; silence and hang-ups cost nothing")
    func notZMTP() async throws {
        let cluster = try await TestCluster()
        defer { cluster.terminate() }
        try await cluster.startWorker("alpha", ["--skills", "echo"])
        let port = try #require(cluster.bus.split(separator: ":").last.flatMap { UInt16($0) })
        // A peer that connects and never speaks holds nothing up.
        let silent = try TCPProbe(port: port)
        defer { silent.close() }
        var curve = ZMTP.greeting
        curve.replaceSubrange(12..<17, with: Array("CURVE".utf8))
        for bytes in [Array("GET / HTTP/1.1\r\nHost: x\r\n\r\n".utf8) + [UInt8](repeating: 0, count: 40), curve] {
            let probe = try TCPProbe(port: port)
            defer { probe.close() }
            probe.write(bytes)
            #expect(probe.closedByPeer(within: .seconds(5)), "the bus kept a connection that sent \(bytes.prefix(16))")
        }
        // Peers that hang up before the bus has written its greeting to them.
        for _ in 0..<20 { try TCPProbe(port: port).close() }
        let (code, document) = try await cluster.sendJSON(["echo", "text=still served"])
        #expect(code == 0 && document["result"]?["text"] == "still served")
    }

    @Test("a feed subscription over 256 bytes is not applied and is counted on the feed; short ones still work")
    func longSubscription() async throws {
        let cluster = try await TestCluster()
        defer { cluster.terminate() }
        let context = try ZMQContext()
        let watcher = try await FeedSubscriber.connect(
            endpoint: cluster.feed, topics: ["limits.", "registry.heartbeat"], context: context)
        defer { watcher.close() }
        var events = watcher.events.makeAsyncIterator()
        _ = try #require(try await events.next())  // a heartbeat: the watcher's subscriptions are in place
        let long = "agent." + String(repeating: "x", count: 300)
        // The short one first: applied before the long one is refused. One message per event: a batch
        // subscription of several topics would take everything instead.
        let greedy = try await FeedSubscriber.connect(
            endpoint: cluster.feed, topics: ["agent.joined", long], context: context, batched: false)
        defer { greedy.close() }
        var refusal: JSONValue?
        while refusal == nil, let (topic, event) = try await events.next() {
            if topic == "limits.refused" { refusal = event }
        }
        #expect(refusal?["socket"] == "feed" && refusal?["limit"] == "maxSubscriptionBytes")
        #expect(refusal?["reason"]?.stringValue?.contains("subscription of 306 bytes") == true)
        #expect(refusal?["refused"] == 1)
        // Its short subscription took effect: it hears the next agent join.
        try await cluster.startWorker("alpha", ["--skills", "echo"])
        var joined = greedy.events.makeAsyncIterator()
        let (topic, event) = try #require(try await joined.next())
        #expect(topic == "agent.joined" && event["agent"] == "alpha")
    }

    @Test("a flood of garbage is refused without flooding the log; good clients are still served")
    func garbageFlood() async throws {
        let cluster = try await TestCluster()
        defer { cluster.terminate() }
        try await cluster.startWorker("alpha", ["--skills", "echo"])
        let context = try ZMQContext()
        let vandal = try RawPeer(cluster.bus, context: context)
        defer { vandal.close() }
        for index in 0..<2000 { vandal.socket.send([Array("junk \(index)".utf8), [0xFF]]) }
        // The bus answers each in order, so the last answer means it has read them all.
        try await waitUntil("the bus to answer the whole flood") {
            var answers = 0
            while let reply = try? await vandal.next(timeout: .milliseconds(200)) {
                if text(reply[1]) == "ERROR" { answers += 1 }
                if answers == 2000 { return true }
            }
            return false
        }
        let (code, document) = try await cluster.sendJSON(["echo", "text=still fine"])
        #expect(code == 0 && document["result"]?["text"] == "still fine")
        let logged = cluster.coordinator.output.filter { $0.contains("refused a message") }.count
        #expect(logged < 200, "\(logged) refusal lines for 2000 bad messages")
    }

    @Test("a client that vanishes before its reply costs nothing; the next client is served")
    func clientVanishes() async throws {
        let cluster = try await TestCluster()
        defer { cluster.terminate() }
        try await cluster.startWorker("alpha", ["--skills", "sleep,echo"])
        let context = try ZMQContext()
        let ghost = try RawPeer(cluster.bus, context: context)
        ghost.socket.send(
            ClientMessage.invoke(
                InvokeRequest(requestID: "g", roundID: "ghost", skill: "sleep", parameters: Array(#"{"ms":2000}"#.utf8))
            ).encoded())
        try await waitUntil("the ghost's sleep to run") {
            try await cluster.inFlight(agent: "alpha") == 1
        }
        ghost.close()
        try await waitUntil("the ghost's sleep to finish") {
            try await cluster.inFlight(agent: "alpha") == 0
        }
        let (code, document) = try await cluster.sendJSON(["echo", "text=next"])
        #expect(code == 0 && document["result"]?["text"] == "next")
    }

    @Test("a registration with a bad name or schema is refused with a reason; good skills still register")
    func badRegistrations() async throws {
        let cluster = try await TestCluster()
        defer { cluster.terminate() }
        let context = try ZMQContext()
        let worker = try RawPeer(cluster.bus, context: context)
        defer { worker.close() }
        let badName = try await worker.exchange(
            WorkerMessage.ready(["name": "", "capacity": 1, "skills": []]).encoded())
        #expect(text(badName[1]) == "ERROR")
        #expect(try JSONValue(parsing: badName[2])["code"] == "invalid_registration")

        let mixed: JSONValue = [
            "name": "raw", "capacity": 2, "heartbeatMs": 1000,
            "skills": [
                ["identifier": "good.skill", "parameters": [["name": "x", "type": "integer"]]],
                ["identifier": "bad.type", "parameters": [["name": "x", "type": "float"]]],
                [
                    "identifier": "dup.field",
                    "parameters": [["name": "x", "type": "string"], ["name": "x", "type": "string"]],
                ],
                ["identifier": "", "parameters": []],
            ],
        ]
        let welcome = try await worker.exchange(WorkerMessage.ready(mixed).encoded())
        #expect(text(welcome[1]) == "WELCOME")
        let body = try JSONValue(parsing: welcome[2])
        #expect(body["accepted"] == ["good.skill"])
        let reasons = body["refused"]?.arrayValue?.compactMap { $0["message"]?.stringValue } ?? []
        #expect(reasons.count == 3)
        #expect(reasons.contains { $0.contains("unknown type") })
        #expect(reasons.contains { $0.contains("declared twice") })
        #expect(reasons.contains { $0.contains("identifier '' is invalid") })

        // A second live worker may not take the same name.
        let impostor = try RawPeer(cluster.bus, context: context)
        defer { impostor.close() }
        let taken = try await impostor.exchange(
            WorkerMessage.ready(["name": "raw", "capacity": 1, "skills": []]).encoded())
        #expect(try JSONValue(parsing: taken[2])["code"] == "name_taken")
    }
}

/// A plain TCP connection to the bus, for bytes no ZeroMQ peer would send.
final class TCPProbe {
    let fd: Int32

    init(port: UInt16) throws {
        fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = port.bigEndian
        address.sin_addr.s_addr = UInt32(0x7F00_0001).bigEndian
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
            }
        }
        guard connected == 0 else { throw SkillbusError(.internalError, "could not connect to port \(port)") }
    }

    func write(_ bytes: [UInt8]) { _ = bytes.withUnsafeBytes { send(fd, $0.baseAddress, $0.count, 0) } }

    /// Whether the other side closed the connection before `limit` (what it sent first is read and dropped).
    func closedByPeer(within limit: Duration) -> Bool {
        let deadline = ContinuousClock.now + limit
        var buffer = [UInt8](repeating: 0, count: 4096)
        while ContinuousClock.now < deadline {
            var descriptor = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            guard poll(&descriptor, 1, 100) > 0 else { continue }
            let count = recv(fd, &buffer, buffer.count, 0)
            if count <= 0 { return true }
        }
        return false
    }

    func close() { Glibc.close(fd) }
}
