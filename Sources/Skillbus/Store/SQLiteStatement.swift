import CSQLite

/// A value bound to a statement's `?` parameter.
enum SQLiteValue: Sendable, Hashable {
    case null
    case integer(Int64)
    case real(Double)
    case text(String)
    /// UTF-8 bytes bound as TEXT without building a String (serialized JSON).
    case utf8([UInt8])

    static func int(_ value: Int) -> SQLiteValue { .integer(Int64(value)) }
}

/// One prepared statement, owned by its `SQLiteDatabase` and used on that database's thread only.
/// `SQLiteDatabase.statement` caches them by SQL text; every use binds, steps and resets.
final class SQLiteStatement {
    let sql: String
    private(set) var handle: OpaquePointer?
    private unowned let database: SQLiteDatabase

    init(database: SQLiteDatabase, sql: String) throws(SkillbusError) {
        self.database = database
        self.sql = sql
        var statement: OpaquePointer?
        let code = sqlite3_prepare_v3(
            database.handle, sql, -1, UInt32(SQLITE_PREPARE_PERSISTENT), &statement, nil)
        guard code == SQLITE_OK, let statement else {
            throw database.failure(code, "prepare", sql: sql)
        }
        handle = statement
    }

    func finalize() {
        sqlite3_finalize(handle)
        handle = nil
    }

    /// Binds `arguments` to the parameters in order, runs the statement and calls `row` for each row.
    /// The statement is reset afterwards, whatever happened.
    func run(
        _ arguments: [SQLiteValue], row: (SQLiteRow) throws(SkillbusError) -> Void = { _ throws(SkillbusError) in }
    ) throws(SkillbusError) {
        defer {
            sqlite3_reset(handle)
            sqlite3_clear_bindings(handle)
        }
        try bind(arguments)
        while true {
            let code = sqlite3_step(handle)
            if code == SQLITE_DONE { return }
            guard code == SQLITE_ROW else { throw database.failure(code, "execute a statement", sql: sql) }
            try row(SQLiteRow(handle: handle))
        }
    }

    private func bind(_ arguments: [SQLiteValue]) throws(SkillbusError) {
        let expected = Int(sqlite3_bind_parameter_count(handle))
        guard arguments.count == expected else {
            throw SkillbusError(
                .internalError, "a statement takes \(expected) arguments, \(arguments.count) given: \(sql)")
        }
        for (offset, argument) in arguments.enumerated() {
            let index = Int32(offset + 1)
            let code: Int32
            switch argument {
            case .null: code = sqlite3_bind_null(handle, index)
            case .integer(let value): code = sqlite3_bind_int64(handle, index, value)
            case .real(let value): code = sqlite3_bind_double(handle, index, value)
            case .text(let value): code = sqlite3_bind_text(handle, index, value, -1, skillbus_sqlite_transient())
            case .utf8(let bytes) where bytes.isEmpty:
                // An empty array may have no base address, and SQLite binds NULL for a nil pointer.
                code = sqlite3_bind_text(handle, index, "", 0, skillbus_sqlite_transient())
            case .utf8(let bytes):
                code = bytes.withUnsafeBufferPointer { buffer in
                    buffer.withMemoryRebound(to: CChar.self) { chars in
                        sqlite3_bind_text(
                            handle, index, chars.baseAddress, Int32(chars.count), skillbus_sqlite_transient())
                    }
                }
            }
            guard code == SQLITE_OK else { throw database.failure(code, "bind", sql: sql) }
        }
    }
}

/// The current row of a running statement; valid only inside the `row` closure that received it.
struct SQLiteRow {
    fileprivate let handle: OpaquePointer?

    var columnCount: Int { Int(sqlite3_column_count(handle)) }

    func isNull(_ column: Int) -> Bool { sqlite3_column_type(handle, Int32(column)) == SQLITE_NULL }
    func int(_ column: Int) -> Int { Int(sqlite3_column_int64(handle, Int32(column))) }
    func int64(_ column: Int) -> Int64 { sqlite3_column_int64(handle, Int32(column)) }
    func double(_ column: Int) -> Double { sqlite3_column_double(handle, Int32(column)) }

    /// The column as TEXT, in UTF-8 bytes ("" for NULL).
    func bytes(_ column: Int) -> [UInt8] {
        guard let text = sqlite3_column_text(handle, Int32(column)) else { return [] }
        let count = Int(sqlite3_column_bytes(handle, Int32(column)))
        return Array(UnsafeBufferPointer(start: text, count: count))
    }

    /// The column as a String ("" for NULL).
    func text(_ column: Int) -> String {
        guard let text = sqlite3_column_text(handle, Int32(column)) else { return "" }
        let count = Int(sqlite3_column_bytes(handle, Int32(column)))
        return String(decoding: UnsafeBufferPointer(start: text, count: count), as: UTF8.self)
    }
}
