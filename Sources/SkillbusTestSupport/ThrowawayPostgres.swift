import Foundation
import Skillbus
import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

/// A PostgreSQL cluster of a test's own (its server a child process of the test): `initdb` in a temporary directory, the server on 127.0.0.1 and a free
/// port with its unix socket in that directory, password authentication over TCP for the user `skillbus`;
/// stopped and removed by `remove()`. Run as root, the programs run as an unprivileged user (`postgres`, else
/// `nobody`) through `setpriv`, since PostgreSQL refuses to run as root.
public final class ThrowawayPostgres: Sendable {
    public static let user = "skillbus"
    public static let password = "throwaway-\(getpid())"
    public static let database = "postgres"

    /// The folder that holds initdb and postgres: PATH, /usr/local/bin, else Debian's newest
    /// /usr/lib/postgresql/<version>/bin.
    static let binaries: String? = {
        var folders = (ProcessInfo.processInfo.environment["PATH"] ?? "").split(separator: ":").map(String.init)
        folders.append("/usr/local/bin")
        let versions = (try? FileManager.default.contentsOfDirectory(atPath: "/usr/lib/postgresql")) ?? []
        folders += versions.sorted { (Int($0) ?? 0) > (Int($1) ?? 0) }.map { "/usr/lib/postgresql/\($0)/bin" }
        return folders.first { folder in
            ["initdb", "postgres"].allSatisfy { FileManager.default.isExecutableFile(atPath: "\(folder)/\($0)") }
        }
    }()

    /// Who runs the server when this process is root.
    static let unprivileged: String? = {
        guard getuid() == 0 else { return nil }
        return ["postgres", "nobody"].first { getpwnam($0) != nil }
    }()

    static let ip = ["/usr/sbin/ip", "/sbin/ip", "/usr/bin/ip", "/bin/ip"].first {
        FileManager.default.isExecutableFile(atPath: $0)
    }

    static let setpriv = ["/usr/bin/setpriv", "/bin/setpriv"].first { FileManager.default.isExecutableFile(atPath: $0) }

    /// Nil when a throwaway cluster can be started here; else why not (a test's skip reason).
    public static let unavailable: String? = {
        guard binaries != nil else {
            return "PostgreSQL's initdb and postgres are not installed (Debian package postgresql)"
        }
        if getuid() == 0 {
            guard unprivileged != nil else { return "running as root, and no unprivileged user to run PostgreSQL as" }
            guard setpriv != nil else { return "running as root, and no setpriv (util-linux) to run PostgreSQL as another user" }
        }
        return nil
    }()

    public let directory: String
    private let server = Mutex<ChildProcess?>(nil)
    public let port: UInt16
    /// Whether commits reach the disk (fsync and synchronous commit on, as a deployment runs it): for measuring.
    /// Tests leave it off, as they need no durability across a power loss and run faster without.
    public let durable: Bool
    private var dataDirectory: String { directory + "/data" }
    private var socketDirectory: String { directory + "/socket" }

    /// `postgresql://skillbus@127.0.0.1:PORT/postgres` (the password apart: `password`).
    public var url: String { "postgresql://\(Self.user)@\(address):\(port)/\(Self.database)" }
    /// The network namespace the server runs in (`ip netns`), nil for this process's own.
    public let namespace: String?
    /// Where it listens (`listen_addresses`): 127.0.0.1, or in a namespace that namespace's addresses.
    public let address: String

    /// Makes the cluster and starts it; throws what went wrong, with the programs' output. With `namespace`, the
    /// server runs in that network namespace (made by the caller) and listens on `address` there, admitting
    /// password logins from anywhere: a test's other hosts reach it over their links.
    public init(durable: Bool = false, namespace: String? = nil, address: String = "127.0.0.1") throws {
        self.durable = durable
        self.namespace = namespace
        self.address = address
        guard Self.unavailable == nil else { throw Failed(message: Self.unavailable ?? "") }
        directory = NSTemporaryDirectory() + "skillbus-postgres-\(getpid())-\(UUID().uuidString.prefix(8))"
        try FileManager.default.createDirectory(atPath: directory + "/socket", withIntermediateDirectories: true)
        port = try unusedLoopbackPort()
        do {
            try Data(Self.password.utf8).write(to: URL(fileURLWithPath: directory + "/password"))
            if let user = Self.unprivileged, let entry = getpwnam(user) {
                for path in [directory, directory + "/socket", directory + "/password"] {
                    chown(path, entry.pointee.pw_uid, entry.pointee.pw_gid)
                }
            }
            try run(
                "initdb",
                ["-D", dataDirectory, "-U", Self.user, "--pwfile", directory + "/password", "--auth-local=trust",
                 "--auth-host=scram-sha-256", "-E", "UTF8", "--no-sync", "--no-instructions"])
            if namespace != nil {
                let rules = try FileHandle(forWritingTo: URL(fileURLWithPath: dataDirectory + "/pg_hba.conf"))
                defer { try? rules.close() }
                try rules.seekToEnd()
                try rules.write(contentsOf: Data("host all all 0.0.0.0/0 scram-sha-256\n".utf8))
            }
            try start()
        } catch {
            stop()
            try? FileManager.default.removeItem(atPath: directory)
            throw error
        }
    }

    /// Starts the server and waits until it accepts connections. The server is this process's own child, in the
    /// foreground (not pg_ctl's daemon, which would outlive a test that crashed), stopped with a signal.
    public func start() throws {
        let log = directory + "/server.log"
        let logged = (try? String(contentsOfFile: log, encoding: .utf8))?.utf8.count ?? 0
        let process = try spawn(
            "postgres", inNamespace: namespace,
            ["-D", dataDirectory, "-p", String(port), "-k", socketDirectory, "-c", "listen_addresses=\(address)"]
                + (durable ? [] : ["-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off"]),
            output: log, appending: true)
        server.withLock { $0 = process }
        let deadline = Date().addingTimeInterval(30)
        while Date() < deadline {
            let text = (try? String(contentsOfFile: log, encoding: .utf8)) ?? ""
            if text.utf8.dropFirst(logged).count > 0,
                String(decoding: text.utf8.dropFirst(logged), as: UTF8.self).contains("ready to accept connections")
            {
                return
            }
            guard process.isRunning else { break }
            usleep(20_000)
        }
        process.signal(SIGTERM)
        throw Failed(message: "postgres did not start within 30 s:\n" + tail(log))
    }

    /// Stops the server at once (SIGQUIT, PostgreSQL's immediate shutdown: every session is cut, as when the
    /// database goes away) and waits for it.
    public func stop() {
        guard let process = server.withLock({ $0 }), process.isRunning else { return }
        process.signal(SIGQUIT)
        process.waitUntilExit()
    }

    /// Stops the server and removes the directory.
    public func remove() {
        stop()
        try? FileManager.default.removeItem(atPath: directory)
    }

    public struct Failed: Error, CustomStringConvertible {
        public let message: String
        public var description: String { message }
    }

    private func run(_ program: String, _ arguments: [String]) throws {
        let output = directory + "/\(program).out"
        let process = try spawn(program, arguments, output: output, appending: false)
        let termination = process.waitUntilExit()
        guard termination == .exited(0) else {
            throw Failed(message: "\(program) ended \(termination):\n" + tail(output))
        }
    }

    /// `program` of PostgreSQL's folder, as the unprivileged user when this process is root (setpriv execs it
    /// in place: the process is the program itself, and a signal reaches it), its output to the file `output`.
    /// With `namespace`, `ip netns exec` runs it there (it execs in place too).
    private func spawn(
        _ program: String, inNamespace namespace: String? = nil, _ arguments: [String], output: String, appending: Bool
    ) throws -> ChildProcess {
        var command = ["\(Self.binaries ?? "")/\(program)"] + arguments
        if let user = Self.unprivileged, let setpriv = Self.setpriv {
            command = [setpriv, "--reuid=\(user)", "--regid=\(user)", "--init-groups", "--"] + command
        }
        if let namespace { command = [Self.ip ?? "ip", "netns", "exec", namespace] + command }
        let descriptor = open(output, O_WRONLY | O_CREAT | O_CLOEXEC | (appending ? O_APPEND : O_TRUNC), 0o644)
        guard descriptor >= 0 else {
            throw Failed(message: "cannot open \(output): \(String(cString: strerror(errno)))")
        }
        defer { close(descriptor) }
        return try ChildProcess.spawn(
            command[0], Array(command.dropFirst()), environment: ProcessInfo.processInfo.environment,
            output: descriptor, errors: descriptor)
    }

    private func tail(_ file: String) -> String {
        let text = (try? String(contentsOfFile: file, encoding: .utf8)) ?? ""
        return text.split(separator: "\n").suffix(12).joined(separator: "\n")
    }
}

/// A TCP socket bound to 127.0.0.1 on a port the kernel picks: the descriptor (the caller closes it or listens on
/// it) and the port.
public func bindLoopbackTCP(port: UInt16 = 0) throws -> (descriptor: Int32, port: UInt16) {
    let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    guard fd >= 0 else { throw ThrowawayPostgres.Failed(message: "socket: errno \(errno)") }
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_port = port.bigEndian
    address.sin_addr.s_addr = inet_addr("127.0.0.1")
    var length = socklen_t(MemoryLayout<sockaddr_in>.size)
    let bound = withUnsafeMutablePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { pointer in
            bind(fd, pointer, length) == 0 && getsockname(fd, pointer, &length) == 0
        }
    }
    guard bound else {
        let failure = errno
        close(fd)
        throw ThrowawayPostgres.Failed(message: "bind 127.0.0.1:\(port): errno \(failure)")
    }
    return (fd, UInt16(bigEndian: address.sin_port))
}

/// A port on 127.0.0.1 that nothing listens on now (bound and closed again), below the ephemeral range.
public func unusedLoopbackPort() throws -> UInt16 {
    let (fd, port) = try bindLoopbackTCPBelowEphemeralRange()
    close(fd)
    return port
}

/// The first port of the kernel's ephemeral range (`ip_local_port_range`): 32768 unless set otherwise.
private let ephemeralPortsStart: UInt16 = {
    let range = (try? String(contentsOfFile: "/proc/sys/net/ipv4/ip_local_port_range", encoding: .utf8)) ?? ""
    return range.split(whereSeparator: \.isWhitespace).first.flatMap { UInt16($0) } ?? 32768
}()

/// `bindLoopbackTCP` on a free port below the kernel's ephemeral range, for a port picked now and bound later
/// by another process: a port of that range can be taken meanwhile by the local end of any connection this
/// machine opens (a rare "Address already in use" in tests), one below it only by another explicit bind.
public func bindLoopbackTCPBelowEphemeralRange() throws -> (descriptor: Int32, port: UInt16) {
    let low: UInt16 = 10_000
    let high = max(low + 1_000, ephemeralPortsStart)
    for _ in 0..<100 {
        if let bound = try? bindLoopbackTCP(port: UInt16.random(in: low..<high)) { return bound }
    }
    return try bindLoopbackTCP()
}
