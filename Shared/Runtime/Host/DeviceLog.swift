import FoundationEssentials
import Model
import Store

/// A per-device log of messages numbered by seq — the raw ring, the decision
/// log, a points outbox. One table shape, kept once: `(device, seq,
/// sessionID, timeMs, body)`, paged by device or session, trimmed per device.
///
/// Append-ordered: rows are stored in the order they were written (a rowid
/// table) and found by device through a small `(device, seq)` index. A batch
/// that touches many devices then writes its bodies onto a few new pages at
/// the table's end, and dirties one index page per device instead of one
/// page of bodies per device, which split every few messages.
public final class DeviceLog {
    public let table: String
    let db: Database
    // Run for every message: prepared once.
    private let insertStatement: Statement
    private let containsTimeStatement: Statement

    /// The table, for a service's migration. `uniqueTime` adds a unique
    /// index on `(device, timeMs)` (the gateway's duplicate check).
    public static func schema(_ table: String, uniqueTime: Bool = false) -> String {
        createTable(table) + indexes(table, uniqueTime: uniqueTime)
    }

    /// A migration that moves a log of an earlier shape (`WITHOUT ROWID`,
    /// clustered by `(device, seq)`) into `schema`'s, oldest first; the
    /// table's other indexes are dropped with it (a service recreates its own).
    public static func reshape(_ table: String, uniqueTime: Bool = false) -> String {
        Migrator.rebuild(table, columns: "device, seq, sessionID, timeMs, body", order: "timeMs, device, seq", create: createTable)
            + indexes(table, uniqueTime: uniqueTime)
    }

    private static func createTable(_ table: String) -> String {
        """
        CREATE TABLE \(table) (
            id INTEGER PRIMARY KEY, device TEXT NOT NULL, seq INTEGER NOT NULL, sessionID TEXT, timeMs INTEGER, body TEXT NOT NULL
        );
        """
    }

    private static func indexes(_ table: String, uniqueTime: Bool) -> String {
        "\nCREATE UNIQUE INDEX \(table)_by_seq ON \(table)(device, seq);"
            + (uniqueTime ? "\nCREATE UNIQUE INDEX \(table)_by_time ON \(table)(device, timeMs);" : "")
    }

    public init(db: Database, table: String) throws {
        self.db = db
        self.table = table
        // A redelivered message after a producer reset may carry a seq seen
        // before: the newest judgement of (device, seq) wins.
        insertStatement = try db.prepare("INSERT OR REPLACE INTO \(table) (device, seq, sessionID, timeMs, body) VALUES (?, ?, ?, ?, ?)")
        containsTimeStatement = try db.prepare("SELECT 1 FROM \(table) WHERE device = ? AND timeMs = ?")
    }

    public func append(_ device: DeviceID, seq: Int64, sessionID: String?, timeMs: Int64?, body: [UInt8]) throws {
        try insertStatement.run(.text(device.rawValue), .integer(seq), .string(sessionID), .int(timeMs), .utf8(body))
    }

    /// Whether the device has an entry stamped `timeMs` (needs `uniqueTime` to be fast).
    public func contains(_ device: DeviceID, timeMs: Int64) throws -> Bool {
        try containsTimeStatement.exists(.text(device.rawValue), .integer(timeMs))
    }

    /// A page of bodies, oldest first, cut short once it holds `maxBytes`
    /// (then `nextOffset` says where the next page starts).
    public func page(_ device: DeviceID, sessionID: String?, limit: Int, offset: Int, maxBytes: Int, part: String? = nil,
                     onlyWherePresent: Bool = false) throws -> JSONPage {
        JSONPage(bounding: try page(device, sessionID: sessionID, limit: limit, offset: offset, part: part, onlyWherePresent: onlyWherePresent),
                 offset: offset, maxBytes: maxBytes)
    }

    /// A page of bodies, oldest first, for one device or one of its sessions.
    /// With `part`, bodies are JSON objects holding parts by name: the page
    /// is that member of each, as it was written. Where some bodies lack it,
    /// `onlyWherePresent` skips them; that reads every body the offset passes
    /// over, where otherwise only the index is read.
    public func page(_ device: DeviceID, sessionID: String?, limit: Int, offset: Int, part: String? = nil,
                     onlyWherePresent: Bool = false) throws -> [String] {
        var value = "body", having = "", arguments: [SQLValue] = [.text(device.rawValue)]
        if let part {
            // A path, not a string spliced into the SQL. A body without the part reads `null`, never an empty element.
            let path = SQLValue.text("$.\"\(part)\"")
            value = "coalesce(json_extract(body, ?), 'null')"
            arguments = [path] + arguments
            if onlyWherePresent {
                having = " AND json_type(body, ?) IS NOT NULL"
                arguments.append(path)
            }
        }
        let session = sessionID == nil ? "" : " AND sessionID = ?"
        if let sessionID { arguments.append(.text(sessionID)) }
        return try db.query("SELECT \(value) FROM \(table) WHERE device = ?\(having)\(session) ORDER BY seq LIMIT ? OFFSET ?",
                            arguments + [.int(limit), .int(offset)]) { $0.string(0) }
    }

    /// Entries above `seq`, oldest first.
    public func entries(_ device: DeviceID, after seq: Int64, limit: Int = .max) throws -> [(seq: Int64, body: String)] {
        try db.query("SELECT seq, body FROM \(table) WHERE device = ? AND seq > ? ORDER BY seq LIMIT ?",
                     [.text(device.rawValue), .integer(seq), .integer(Int64(min(limit, Int(Int64.max))))]) { ($0.int64(0), $0.string(1)) }
    }

    /// Entries with `after < seq ≤ through`, oldest first.
    public func entries(_ device: DeviceID, after: Int64, through: Int64, limit: Int) throws -> [(seq: Int64, body: String)] {
        try db.query("SELECT seq, body FROM \(table) WHERE device = ? AND seq > ? AND seq <= ? ORDER BY seq LIMIT ?",
                     [.text(device.rawValue), .integer(after), .integer(through), .int(limit)]) { ($0.int64(0), $0.string(1)) }
    }

    /// Deletes the device's entries at or below `seq`; returns how many.
    @discardableResult
    public func trim(_ device: DeviceID, through seq: Int64) throws -> Int {
        guard seq > 0 else { return 0 }
        try db.run("DELETE FROM \(table) WHERE device = ? AND seq <= ?", .text(device.rawValue), .integer(seq))
        return db.changes
    }

    /// The device's newest seq in this log.
    public func newestSeq(_ device: DeviceID) throws -> Int64? {
        try db.first("SELECT max(seq) FROM \(table) WHERE device = ?", [.text(device.rawValue)]) { $0.optionalInt64(0) } ?? nil
    }

    /// Entries of every device.
    public func totalCount() throws -> Int {
        try db.first("SELECT count(*) FROM \(table)") { $0.int(0) } ?? 0
    }

}

/// A log a service keeps, and how much of it: `keepPerDevice` entries for
/// each device and, across devices, `maxTotal`. Over that total, every device
/// is cut to an equal share until the log is back under it (a large fleet
/// keeps less history per device, the disk stays bounded). Confined to the
/// host's network thread, like the log.
public final class LogRetention {
    public let log: DeviceLog
    public let keepPerDevice: Int
    public let maxTotal: Int?
    /// Entries per device while the log is held to `maxTotal`.
    var share: Int?
    /// Entries in the log: counted at start, followed since.
    var total = 0

    public init(_ log: DeviceLog, keepPerDevice: Int, maxTotal: Int? = nil) {
        self.log = log; self.keepPerDevice = keepPerDevice; self.maxTotal = maxTotal
    }

    var keep: Int { min(keepPerDevice, share ?? .max) }
}
