import Foundation
import Synchronization
import Testing

@testable import Skillbus
@testable import SkillbusZMQ

/// A raw DEALER on the bus, to send what no well-behaved client would.
final class RawPeer: Sendable {
    let socket: SocketLoop
    private let inbox: MessageInbox

    init(_ endpoint: String, context: ZMQContext) throws {
        let inbox = MessageInbox()
        self.inbox = inbox
        socket = try SocketLoop(
            context: context, type: .dealer, name: "raw-peer",
            configure: { socket in try socket.connect(endpoint) },
            onMessage: { message in inbox.deliver(busFields(message)) })
    }

    /// A ROUTER bound to `endpoint` (`socket.endpoint` has the real port): the test plays the bus.
    /// Each message it receives is the sender's routing id, then the message's fields (envelope unpacked).
    init(bindingRouter endpoint: String, context: ZMQContext) throws {
        let inbox = MessageInbox()
        self.inbox = inbox
        socket = try SocketLoop(
            context: context, type: .router, name: "raw-bus",
            configure: { socket in try socket.bind(endpoint) },
            onMessage: { message in
                guard let routingID = message.first else { return }
                inbox.deliver([routingID] + peerFields(Array(message.dropFirst())))
            })
    }

    /// Sends `frames` and returns the next message (as its fields, when it is a v2 one from the bus), or
    /// throws after `timeout`.
    func exchange(_ frames: Multipart, timeout: Duration = .seconds(10)) async throws -> Multipart {
        socket.send(frames)
        return try await next(timeout: timeout)
    }

    func next(timeout: Duration = .seconds(10)) async throws -> Multipart {
        guard let message = await inbox.next(timeout: timeout) else { throw TimedOut(what: "a reply from the bus") }
        return message
    }

    func close() { socket.stop() }
}

/// Messages that arrived and callers waiting for one. A timed-out wait leaves later messages intact.
final class MessageInbox: Sendable {
    private struct Queue {
        var messages: [Multipart] = []
        var waiter: (id: Int, continuation: CheckedContinuation<Multipart?, Never>)?
        var nextWaiter = 0
    }
    private let queue = Mutex(Queue())

    func deliver(_ message: Multipart) {
        let waiter = queue.withLock { queue -> CheckedContinuation<Multipart?, Never>? in
            if let waiter = queue.waiter {
                queue.waiter = nil
                return waiter.continuation
            }
            queue.messages.append(message)
            return nil
        }
        waiter?.resume(returning: message)
    }

    func next(timeout: Duration) async -> Multipart? {
        let id = queue.withLock { queue -> Int in
            queue.nextWaiter += 1
            return queue.nextWaiter
        }
        return await withTaskGroup(of: Multipart?.self) { group in
            group.addTask {
                await withCheckedContinuation { continuation in
                    let ready = self.queue.withLock { queue -> Multipart? in
                        if !queue.messages.isEmpty { return queue.messages.removeFirst() }
                        queue.waiter = (id, continuation)
                        return nil
                    }
                    if let ready { continuation.resume(returning: ready) }
                }
            }
            group.addTask {
                // Cancelled once a message came; the waiter is then gone and this changes nothing.
                try? await Task.sleep(for: timeout)
                let waiter = self.queue.withLock { queue -> CheckedContinuation<Multipart?, Never>? in
                    guard let waiter = queue.waiter, waiter.id == id else { return nil }
                    queue.waiter = nil
                    return waiter.continuation
                }
                waiter?.resume(returning: nil)
                return nil
            }
            let first = await group.next() ?? nil
            group.cancelAll()
            return first
        }
    }
}

func text(_ frame: [UInt8]) -> String { String(decoding: frame, as: UTF8.self) }
