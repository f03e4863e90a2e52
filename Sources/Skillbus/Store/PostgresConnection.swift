import CPostgres
import Foundation

/// One libpq connection, used synchronously by the one thread that owns it (the journal's): statements are
/// prepared once by name and then executed with text parameters; every failure is a `SkillbusError` with
/// PostgreSQL's message, its SQLSTATE when the server sent one, and the statement's name.
/// Not `Sendable`: a libpq connection must not be used from two threads at once.
final class PostgresConnection {
    private var connection: OpaquePointer?
    /// Where it connects, without the password (for messages).
    let target: String
    private var prepared: Set<String> = []
    /// With a value, a statement whose answer does not come within it fails ("timeout", the connection closed),
    /// however the network lost it: the election's renewals must fail in time, not hang (PROTOCOL §3.11).
    var answerTimeoutMs: Int?

    /// Connects to `url` (`postgresql://host:port/db`, libpq's connection URI) with `password` (never part of
    /// the URI, so it stays out of every message). Blocks until connected or refused, at most `timeoutSeconds`.
    /// With `timeoutMs` (a coordinator group's lease) a connection that the network cut is found dead within about
    /// that long (TCP keepalives and `tcp_user_timeout`) instead of the kernel's minutes, and connecting gives up
    /// after it too; `settings` are server settings for the session (`statement_timeout`, …).
    init(
        url: String, password: String?, applicationName: String, timeoutSeconds: Int = 5, timeoutMs: Int? = nil,
        settings: [(String, String)] = []
    ) throws(SkillbusError) {
        target = Self.withoutPassword(url)
        // expand_dbname = 1: the "dbname" value is the URI, and the other keywords fill what it leaves out.
        var keywords = ["dbname", "application_name", "connect_timeout", "client_encoding"]
        // libpq counts connect_timeout in whole seconds, at least 2.
        let connectSeconds = timeoutMs.map { max(2, ($0 + 999) / 1000) } ?? timeoutSeconds
        var values = [url, applicationName, String(connectSeconds), "UTF8"]
        if let timeoutMs {
            keywords += ["keepalives", "keepalives_idle", "keepalives_interval", "keepalives_count", "tcp_user_timeout"]
            values += ["1", "1", "1", String(max(1, timeoutMs / 1000)), String(timeoutMs)]
        }
        if !settings.isEmpty {
            keywords.append("options")
            values.append(settings.map { "-c \($0.0)=\($0.1)" }.joined(separator: " "))
        }
        if let password {
            keywords.append("password")
            values.append(password)
        }
        let connection = Self.withCStrings(keywords) { keys in
            Self.withCStrings(values) { vals in PQconnectdbParams(keys, vals, 1) }
        }
        guard let connection, PQstatus(connection) == CONNECTION_OK else {
            let message = connection.map { Self.message(PQerrorMessage($0)) } ?? "out of memory"
            if let connection { PQfinish(connection) }
            throw SkillbusError(
                .storageUnavailable, "cannot connect to PostgreSQL at \(target): \(message)",
                details: ["database": .string(target)])
        }
        self.connection = connection
    }

    deinit { close() }

    func close() {
        if let connection { PQfinish(connection) }
        connection = nil
        prepared = []
    }

    /// Whether the connection is still up, as far as libpq saw it in its last call.
    var isOpen: Bool { connection.map { PQstatus($0) == CONNECTION_OK } ?? false }

    /// A row of a result: text values by column.
    struct Row {
        fileprivate let result: OpaquePointer
        fileprivate let index: Int32

        func isNull(_ column: Int32) -> Bool { PQgetisnull(result, index, column) == 1 }
        func bytes(_ column: Int32) -> [UInt8] {
            let length = Int(PQgetlength(result, index, column))
            guard let value = PQgetvalue(result, index, column) else { return [] }
            return value.withMemoryRebound(to: UInt8.self, capacity: length) {
                Array(UnsafeBufferPointer(start: $0, count: length))
            }
        }
        func text(_ column: Int32) -> String { String(decoding: bytes(column), as: UTF8.self) }
        func int64(_ column: Int32) -> Int64 { Int64(text(column)) ?? 0 }
        func int(_ column: Int32) -> Int { Int(int64(column)) }
        func bool(_ column: Int32) -> Bool { text(column) == "t" }
    }

    /// A parameter in text form; nil is SQL NULL.
    enum Value {
        case text(String)
        case utf8([UInt8])
        case integer(Int64)
        case null

        var bytes: [UInt8]? {
            switch self {
            case .text(let text): Array(text.utf8)
            case .utf8(let bytes): bytes
            case .integer(let number): Array(String(number).utf8)
            case .null: nil
            }
        }
    }

    /// Runs SQL without parameters (schema, BEGIN, COMMIT, ROLLBACK); several statements may be given at once.
    func execute(_ sql: String) throws(SkillbusError) {
        let connection = try checkedConnection()
        let result = try answer(connection, what: sql.prefix(60).description, sent: PQsendQuery(connection, sql)) {
            PQexec(connection, sql)
        }
        defer { PQclear(result) }
        try check(result, what: sql.prefix(60).description)
    }

    /// Executes the statement `name` (prepared from `sql` on first use); calls `each` for every row, and
    /// returns how many rows it changed (PQcmdTuples) or returned.
    @discardableResult
    func run(
        _ name: String, _ sql: String, _ parameters: [Value] = [], each: (Row) throws(SkillbusError) -> Void = { _ in }
    ) throws(SkillbusError) -> Int {
        let connection = try checkedConnection()
        if !prepared.contains(name) {
            let count = Int32(parameters.count)
            let result = try answer(connection, what: name, sent: PQsendPrepare(connection, name, sql, count, nil)) {
                PQprepare(connection, name, sql, count, nil)
            }
            defer { PQclear(result) }
            try check(result, what: name)
            prepared.insert(name)
        }
        let buffers = parameters.map { $0.bytes.map { $0 + [0] } }
        let lengths = buffers.map { Int32(($0?.count ?? 1) - 1) }
        let result = try Self.withBuffers(buffers) { pointers throws(SkillbusError) in
            try answer(
                connection, what: name,
                sent: PQsendQueryPrepared(connection, name, Int32(parameters.count), pointers, lengths, nil, 0)
            ) {
                PQexecPrepared(connection, name, Int32(parameters.count), pointers, lengths, nil, 0)
            }
        }
        defer { PQclear(result) }
        try check(result, what: name)
        guard let result else { return 0 }
        let rows = PQntuples(result)
        for index in 0..<rows { try each(Row(result: result, index: index)) }
        if PQresultStatus(result) == PGRES_TUPLES_OK { return Int(rows) }
        return Int(String(cString: PQcmdTuples(result))) ?? 0
    }

    /// The first column of the first row as an integer; nil when there is no row or it is NULL.
    func integer(_ name: String, _ sql: String, _ parameters: [Value] = []) throws(SkillbusError) -> Int64? {
        var value: Int64?
        try run(name, sql, parameters) { row in
            if value == nil, !row.isNull(0) { value = row.int64(0) }
        }
        return value
    }

    /// Runs `body` in one transaction: committed when it returns, rolled back when it throws.
    func transaction<T>(_ body: () throws(SkillbusError) -> T) throws(SkillbusError) -> T {
        try execute("BEGIN")
        do {
            let value = try body()
            try execute("COMMIT")
            return value
        } catch {
            // A connection that broke mid-transaction has nothing to roll back.
            if isOpen { try? execute("ROLLBACK") }
            throw error
        }
    }

    // MARK: - Helpers

    /// The result of a statement: `blocking` runs it the plain way; with `answerTimeoutMs` it was sent already
    /// (`sent`, 1 when it was) and this waits for its last result until the deadline.
    private func answer(
        _ connection: OpaquePointer, what: String, sent: @autoclosure () -> Int32, blocking: () -> OpaquePointer?
    ) throws(SkillbusError) -> OpaquePointer? {
        guard let timeoutMs = answerTimeoutMs else { return blocking() }
        guard sent() == 1 else { return nil }
        let deadline = DispatchTime.now().uptimeNanoseconds + UInt64(timeoutMs) * 1_000_000
        var last: OpaquePointer?
        while true {
            while PQisBusy(connection) == 1 {
                let now = DispatchTime.now().uptimeNanoseconds
                guard now < deadline else {
                    if let last { PQclear(last) }
                    close()
                    throw SkillbusError(
                        .storageUnavailable,
                        "PostgreSQL at \(target), \(what): timeout, no answer within \(timeoutMs) ms",
                        details: ["database": .string(target), "statement": .string(what)])
                }
                var descriptor = pollfd(fd: PQsocket(connection), events: Int16(POLLIN), revents: 0)
                _ = poll(&descriptor, 1, Int32(max(1, (deadline - now) / 1_000_000)))
                if PQconsumeInput(connection) == 0 { break }
            }
            guard let result = PQgetResult(connection) else { return last }
            if let last { PQclear(last) }
            last = result
            // A lost connection answers nothing more.
            if PQstatus(connection) != CONNECTION_OK { return last }
        }
    }

    private func checkedConnection() throws(SkillbusError) -> OpaquePointer {
        guard let connection, PQstatus(connection) == CONNECTION_OK else {
            throw SkillbusError(
                .storageUnavailable, "the connection to PostgreSQL at \(target) is closed",
                details: ["database": .string(target)])
        }
        return connection
    }

    private func check(_ result: OpaquePointer?, what: String) throws(SkillbusError) {
        let status = result.map(PQresultStatus) ?? PGRES_FATAL_ERROR
        guard status != PGRES_COMMAND_OK, status != PGRES_TUPLES_OK else { return }
        let text = result.map { Self.message(PQresultErrorMessage($0)) } ?? ""
        let message = text.isEmpty ? connection.map { Self.message(PQerrorMessage($0)) } ?? "" : text
        var details: [String: JSONValue] = ["database": .string(target), "statement": .string(what)]
        if let result, let state = PQresultErrorField(result, Int32(UInt8(ascii: "C"))) {
            details["sqlstate"] = .string(String(cString: state))
        }
        // A lost connection is no longer OK after this call: the journal then reconnects.
        throw SkillbusError(
            .storageUnavailable, "PostgreSQL at \(target), \(what): \(message)", details: .object(details))
    }

    private static func message(_ text: UnsafePointer<CChar>?) -> String {
        guard let text else { return "" }
        return String(cString: text).trimmingCharacters(in: [" ", "\n"])
    }

    /// A connection URI as it may be shown: any password in it replaced.
    static func withoutPassword(_ url: String) -> String {
        guard let scheme = url.range(of: "://"), let at = url[scheme.upperBound...].firstIndex(of: "@") else {
            return url
        }
        let userInfo = url[scheme.upperBound..<at]
        guard let colon = userInfo.firstIndex(of: ":") else { return url }
        return String(url[..<colon]) + ":***" + String(url[at...])
    }

    private static func withCStrings<T>(_ strings: [String], _ body: ([UnsafePointer<CChar>?]) -> T) -> T {
        let copies = strings.map { strdup($0) }
        defer { for copy in copies { free(copy) } }
        return body(copies.map { UnsafePointer($0) } + [nil])
    }

    private static func withBuffers<T, E: Error>(
        _ buffers: [[UInt8]?], _ body: ([UnsafePointer<CChar>?]) throws(E) -> T
    ) throws(E) -> T {
        let copies: [UnsafeMutablePointer<CChar>?] = buffers.map { buffer in
            guard let buffer else { return nil }
            let copy = UnsafeMutablePointer<CChar>.allocate(capacity: buffer.count)
            buffer.withUnsafeBytes { copy.update(from: $0.bindMemory(to: CChar.self).baseAddress!, count: buffer.count) }
            return copy
        }
        defer { for copy in copies { copy?.deallocate() } }
        return try body(copies.map { $0.map { UnsafePointer($0) } })
    }
}
