import Foundation
import Synchronization
import Testing

@testable import Skillbus

/// The HTTP transport's event streams, without sockets: what a connection is sent, and what a client that
/// resumes with `Last-Event-ID` gets.
@Suite("MCP over HTTP: event streams and resumption")
struct MCPHTTPSessionTests {
    final class Deliveries: Sendable {
        let list = Mutex<[(HTTPConnectionID, String)]>([])
        func add(_ connection: HTTPConnectionID, _ delivery: HTTPDelivery) {
            let text: String
            switch delivery {
            case .more(let bytes): text = String(decoding: bytes, as: UTF8.self)
            case .end: text = "END"
            case .response: text = "RESPONSE"
            }
            list.withLock { $0.append((connection, text)) }
        }
        var texts: [String] { list.withLock { $0.map(\.1) } }
    }

    func progress(_ n: Int) -> JSONRPCMessage {
        .notification(method: "notifications/progress", params: ["progressToken": 1, "progress": .number(Double(n))])
    }

    @Test("a stream's events carry ids; a client that lost its connection resumes after the last it saw")
    func resumes() throws {
        let deliveries = Deliveries()
        let session = MCPHTTPSession(id: "s", access: .client, deliver: deliveries.add)
        let stream = session.openStream(connection: 7)
        let opening = String(decoding: session.opening(stream, with: [progress(1)], finished: false), as: UTF8.self)
        #expect(opening == "retry: 1000\n\nid: 1-0\ndata: \n\nid: 1-1\ndata: \(progress(1).json.jsonString)\n\n")
        session.append(progress(2), to: stream)
        #expect(deliveries.texts == ["id: 1-2\ndata: \(progress(2).json.jsonString)\n\n"])
        session.detach(7)
        session.append(progress(3), to: stream)
        session.append(.result(id: 5, result: ["ok": true]), to: stream, ends: true)
        #expect(deliveries.texts.count == 1, "nothing goes to a connection that left")
        let resumed = try #require(session.resume(lastEventID: "1-1", connection: 8))
        let text = String(decoding: resumed.bytes, as: UTF8.self)
        #expect(resumed.finished)
        #expect(text.contains("id: 1-2\n") && text.contains("id: 1-3\n") && text.contains("id: 1-4\n"))
        #expect(!text.contains("id: 1-1\n"))
        #expect(session.resume(lastEventID: "9-1", connection: 9) == nil)
        #expect(session.resume(lastEventID: "garbage", connection: 9) == nil)
    }

    @Test("the session's own stream gets what belongs to no request; a newer GET takes it over")
    func generalStream() throws {
        let deliveries = Deliveries()
        let session = MCPHTTPSession(id: "s", access: .client, deliver: deliveries.add)
        let first = try #require(session.resume(lastEventID: nil, connection: 1))
        #expect(!first.finished)
        session.general(.notification(method: "notifications/tools/list_changed", params: nil))
        #expect(deliveries.list.withLock { $0.last?.0 } == 1)
        _ = try #require(session.resume(lastEventID: nil, connection: 2))
        #expect(deliveries.list.withLock { $0.last! } == (1, "END"))
        session.general(.notification(method: "notifications/tools/list_changed", params: nil))
        #expect(deliveries.list.withLock { $0.last?.0 } == 2)
        session.close()
        #expect(deliveries.list.withLock { $0.last! } == (2, "END"))
    }

    @Test("a session is abandoned once quiet for the idle time with no stream connected, not before")
    func abandoned() throws {
        let session = MCPHTTPSession(id: "s", access: .client, deliver: { _, _ in })
        let later = ContinuousClock.now + .seconds(2)
        #expect(!session.isAbandoned(idle: .seconds(5), now: later))
        #expect(session.isAbandoned(idle: .seconds(1), now: later))
        _ = try #require(session.resume(lastEventID: nil, connection: 3))
        #expect(!session.isAbandoned(idle: .seconds(1), now: later), "its client still listens")
        session.detach(3)
        #expect(session.isAbandoned(idle: .seconds(1), now: later))
    }
}
