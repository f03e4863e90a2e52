import Foundation
import SkillbusTestSupport
import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

/// A TCP proxy on 127.0.0.1 to a port on 127.0.0.1 that can go silent: once `cut()`, it forwards nothing more
/// and accepts nobody, but closes nothing, as a network that drops packets would (every socket stays open, so
/// nothing tells the peers; only their own timeouts do). One thread per direction of each connection.
final class SilentProxy: Sendable {
    let port: UInt16
    private let listener: Int32
    private let silent = Atomic<Bool>(false)
    private let stopped = Atomic<Bool>(false)
    private let descriptors = Mutex<[Int32]>([])

    init(to upstream: UInt16) throws {
        let (listener, port) = try bindLoopbackTCP()
        self.listener = listener
        self.port = port
        guard listen(listener, 64) == 0 else { throw TimedOut(what: "a proxy port (errno \(errno))") }
        let thread = Thread { [self] in accepting(upstream) }
        thread.start()
    }

    /// From now on, nothing passes and nobody is accepted.
    func cut() { silent.store(true, ordering: .relaxed) }

    func close() {
        stopped.store(true, ordering: .relaxed)
        shutdown(listener, Int32(SHUT_RDWR))
        Glibc.close(listener)
        for fd in descriptors.withLock({ $0 }) {
            shutdown(fd, Int32(SHUT_RDWR))
        }
    }

    private func accepting(_ upstream: UInt16) {
        while !stopped.load(ordering: .relaxed) {
            if silent.load(ordering: .relaxed) {
                usleep(20_000)
                continue
            }
            var ready = pollfd(fd: listener, events: Int16(POLLIN), revents: 0)
            guard poll(&ready, 1, 50) > 0 else { continue }
            let client = accept(listener, nil, nil)
            guard client >= 0 else { continue }
            guard let server = LoopbackTCP.connect(upstream, receiveTimeoutSeconds: 0) else {
                Glibc.close(client)
                continue
            }
            descriptors.withLock { $0 += [client, server] }
            for (from, to) in [(client, server), (server, client)] {
                let pump = Thread { [self] in forward(from, to) }
                pump.start()
            }
        }
    }

    private func forward(_ from: Int32, _ to: Int32) {
        var buffer = [UInt8](repeating: 0, count: 65536)
        while !stopped.load(ordering: .relaxed) {
            if silent.load(ordering: .relaxed) {
                usleep(20_000)
                continue
            }
            var ready = pollfd(fd: from, events: Int16(POLLIN), revents: 0)
            guard poll(&ready, 1, 50) > 0 else { continue }
            // Cut between the poll and the read: what came stays unread.
            if silent.load(ordering: .relaxed) { continue }
            let count = buffer.withUnsafeMutableBytes { read(from, $0.baseAddress, $0.count) }
            guard count > 0 else { break }
            var sent = 0
            while sent < count {
                let wrote = buffer.withUnsafeBytes { write(to, $0.baseAddress! + sent, count - sent) }
                guard wrote > 0 else { return }
                sent += wrote
            }
        }
        shutdown(to, Int32(SHUT_WR))
    }
}
