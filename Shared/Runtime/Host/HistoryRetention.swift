import Model
import Store

/// A table of device history that a service writes itself (the gateway's
/// sessions, motion's trips, stops and crossings), held as the logs are:
/// `keepPerDevice` rows a device, the newest by `orderColumn`, and
/// `maxTotal` across devices. Over the total, every device is cut to an
/// equal share of 90 % of it, so a large fleet keeps less history per
/// device and the disk stays bounded. Confined to the host's network thread,
/// like the store it trims.
public final class HistoryRetention {
    public let table: String
    public let keepPerDevice: Int
    public let maxTotal: Int
    private let db: Database
    private let trimStatement: Statement
    /// Rows in the table: counted at start, followed since, recounted after a cut.
    public private(set) var total: Int
    /// Rows a device keeps while the table is held to `maxTotal`.
    public private(set) var share: Int?
    /// The next cut comes above this: a fleet with more devices than the
    /// total is not cut again on every row.
    private var cutAbove: Int

    /// `orderColumn` orders a device's rows (the newest are kept); the table
    /// needs an index on `(device, orderColumn)`.
    public init(db: Database, table: String, orderColumn: String, keepPerDevice: Int, maxTotal: Int) throws {
        precondition(keepPerDevice >= 1 && maxTotal >= 1, "a history keeps at least one row")
        self.db = db
        self.table = table
        self.keepPerDevice = keepPerDevice
        self.maxTotal = maxTotal
        // The device's rows older than its keep-th newest (ties at the cut stay).
        trimStatement = try db.prepare("""
            DELETE FROM \(table) WHERE device = ?1 AND \(orderColumn) < (
                SELECT \(orderColumn) FROM \(table) WHERE device = ?1 ORDER BY \(orderColumn) DESC LIMIT 1 OFFSET ?2)
            """)
        holdStatement = """
            DELETE FROM \(table) WHERE rowid IN (
                SELECT rowid FROM (SELECT rowid, row_number() OVER (PARTITION BY device ORDER BY \(orderColumn) DESC) AS newer FROM \(table))
                WHERE newer > ?)
            """
        total = try db.first("SELECT count(*) FROM \(table)") { $0.int(0) } ?? 0
        cutAbove = maxTotal
    }

    private let holdStatement: String

    /// Rows a device keeps now.
    public var keep: Int { min(keepPerDevice, share ?? .max) }

    /// `count` rows were added; over the total, every device is cut to its
    /// share. Returns whether it was (for health's `logsCapped`).
    @discardableResult
    public func added(_ count: Int = 1) throws -> Bool {
        total += count
        guard total > cutAbove else { return false }
        try holdToTotal()
        return true
    }

    /// `count` rows were deleted by the service itself (a command, an age limit).
    public func removed(_ count: Int) {
        total = max(0, total - count)
        if share != nil, total < maxTotal / 2 { share = nil; cutAbove = maxTotal }
    }

    /// Cuts the device to the rows it keeps; returns how many went.
    @discardableResult
    public func trim(_ device: DeviceID) throws -> Int {
        try trimStatement.run(.text(device.rawValue), .int(keep - 1))
        let trimmed = db.changes
        removed(trimmed)
        return trimmed
    }

    /// Every device cut to an equal share of 90 % of the total (in one
    /// statement; this runs once per tenth of the total added).
    private func holdToTotal() throws {
        let devices = try db.first("SELECT count(DISTINCT device) FROM \(table)") { $0.int(0) } ?? 1
        let share = max(1, maxTotal * 9 / 10 / max(1, devices))
        self.share = min(share, keepPerDevice)
        try db.run(holdStatement, .int(share))
        total = try db.first("SELECT count(*) FROM \(table)") { $0.int(0) } ?? 0
        cutAbove = max(maxTotal, total + maxTotal / 10)
    }
}
