/// Every SQLite failure, in one shape: the result code, SQLite's message and
/// the statement that failed.
public struct StoreError: Error, CustomStringConvertible, Sendable {
    public let code: Int32
    public let message: String
    public let sql: String?

    public init(code: Int32, message: String, sql: String?) {
        self.code = code; self.message = message; self.sql = sql
    }

    /// The machine's fault, not the message's: a full disk, an I/O error, a
    /// file that cannot be opened or written, no memory. Retrying the same
    /// message later may succeed; skipping it would lose it.
    public var isEnvironmental: Bool {
        // Primary result codes (the low byte of an extended code).
        switch code & 0xFF {
        case 7, 10, 13, 14, 8, 5, 6: true   // NOMEM, IOERR, FULL, CANTOPEN, READONLY, BUSY, LOCKED
        default: false
        }
    }

    public var description: String {
        "SQLite error \(code): \(message)" + (sql.map { " — in: \($0)" } ?? "")
    }
}
