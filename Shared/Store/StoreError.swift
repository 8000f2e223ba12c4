/// Every SQLite failure, in one shape: the result code, SQLite's message and
/// the statement that failed.
public struct StoreError: Error, CustomStringConvertible, Sendable {
    public let code: Int32
    public let message: String
    public let sql: String?

    public init(code: Int32, message: String, sql: String?) {
        self.code = code; self.message = message; self.sql = sql
    }

    public var description: String {
        "SQLite error \(code): \(message)" + (sql.map { " — in: \($0)" } ?? "")
    }
}
