import FoundationEssentials
import Model
import Store

/// The host's own tables, the same in every service's database: one row per
/// device (the service's row, binary or, from earlier releases, JSON; the
/// input watermarks; the outbox watermark) and the store's identity.
public final class HostStore {
    let db: Database
    private let load: Statement
    private let save: Statement

    static let migrations: [(name: String, sql: String)] = [
        ("host-1", """
            CREATE TABLE host_devices (
                device TEXT PRIMARY KEY,
                row TEXT NOT NULL,
                inputs TEXT NOT NULL DEFAULT '{}',
                ackedThrough INTEGER NOT NULL DEFAULT 0
            ) WITHOUT ROWID;
            CREATE TABLE host_identity (epoch TEXT NOT NULL, createdMs INTEGER NOT NULL);
            """),
        // A rowid table: a row of a few KB (the filter's) is stored whole in
        // its leaf page. Clustered by device (WITHOUT ROWID), a row over ~1 KB
        // spilled into an overflow page, and every save rewrote both.
        ("host-2-rowid", Migrator.rebuild("host_devices", columns: "device, row, inputs, ackedThrough") { name in
            """
            CREATE TABLE \(name) (
                id INTEGER PRIMARY KEY, device TEXT NOT NULL UNIQUE, row TEXT NOT NULL,
                inputs TEXT NOT NULL DEFAULT '{}', ackedThrough INTEGER NOT NULL DEFAULT 0
            );
            """
        }),
        // A device's row this release cannot read (damaged, or written by a
        // newer release) is moved here as it was, and the device starts over.
        // One a device (the first): bounded by the fleet, however often it recurs.
        ("host-3-set-aside", """
            CREATE TABLE host_set_aside (
                device TEXT PRIMARY KEY, row BLOB NOT NULL, error TEXT NOT NULL, atMs INTEGER NOT NULL
            );
            """),
    ]

    /// The per-service `devices` table of versions before the host, for the
    /// first migrations of stores that predate it (later ones move its rows
    /// into `host_devices` and drop it).
    public static func legacyDevicesTable(_ columns: String) -> String {
        "CREATE TABLE devices (device TEXT PRIMARY KEY, lastSeq INTEGER NOT NULL DEFAULT 0, "
            + "ackedThrough INTEGER NOT NULL DEFAULT 0, \(columns));"
    }

    init(db: Database) throws {
        self.db = db
        load = try db.prepare("SELECT row, inputs, ackedThrough FROM host_devices WHERE device = ?")
        save = try db.prepare("""
            INSERT INTO host_devices (device, row, inputs, ackedThrough) VALUES (?, ?, ?, ?)
            ON CONFLICT(device) DO UPDATE SET row = excluded.row, inputs = excluded.inputs,
                ackedThrough = max(ackedThrough, excluded.ackedThrough)
            """)
    }

    /// The identity created with this store: stamped on every internal
    /// message, so a consumer can tell a producer that lost its state.
    /// The store's identity, and whether it was made just now (an empty store).
    func epoch(nowMs: Int64) throws -> (epoch: String, created: Bool) {
        if let epoch = try db.first("SELECT epoch FROM host_identity", map: { $0.string(0) }) { return (epoch, false) }
        let epoch = UUID().uuidString.lowercased()
        try db.run("INSERT INTO host_identity (epoch, createdMs) VALUES (?, ?)", .text(epoch), .integer(nowMs))
        return (epoch, true)
    }

    func entry(_ device: DeviceID) throws -> (row: Data, inputs: Data, ackedThrough: Int64)? {
        try load.first(.text(device.rawValue)) { ($0.data(0), $0.data(1), $0.int64(2)) }
    }

    /// A row in JSON is stored as text (SQL's json functions read it), one in
    /// a binary form as a blob; the input watermarks are binary (`StoredInputs`).
    /// `ackedThrough` moves the outbox watermark on in the same write (never back).
    func save(_ device: DeviceID, row: [UInt8], binary: Bool, inputs: [UInt8], ackedThrough: Int64 = 0) throws {
        try save.run(.text(device.rawValue), binary ? .blob(row) : .utf8(row), .blob(inputs), .integer(ackedThrough))
    }

    /// Keeps an unreadable row as it was stored, with why it could not be
    /// read; a device's first is kept, a later one is not. Whether it was kept.
    func setAside(_ device: DeviceID, row: Data, error: String, atMs: Int64) throws -> Bool {
        try db.run("INSERT OR IGNORE INTO host_set_aside (device, row, error, atMs) VALUES (?, ?, ?, ?)",
                   .text(device.rawValue), .blob(Array(row)), .text(error), .integer(atMs))
        return db.changes > 0
    }

    func saveAckedThrough(_ device: DeviceID, _ seq: Int64) throws {
        try db.run("UPDATE host_devices SET ackedThrough = max(ackedThrough, ?) WHERE device = ?", .integer(seq), .text(device.rawValue))
    }

    /// Every device the service has a row for, with its saved outbox watermark.
    func devices() throws -> [(device: DeviceID, ackedThrough: Int64)] {
        try db.query("SELECT device, ackedThrough FROM host_devices") { ($0.string(0), $0.int64(1)) }
            .compactMap { id, acked in DeviceID(allowingReserved: id).map { ($0, acked) } }
    }

    /// Every outbox entry above its device's watermark, oldest first per device.
    func unacknowledged(in log: DeviceLog) throws -> [(device: DeviceID, seq: Int64, body: String)] {
        try db.query("""
            SELECT l.device, l.seq, l.body FROM \(log.table) l JOIN host_devices d ON d.device = l.device
            WHERE l.seq > d.ackedThrough ORDER BY l.device, l.seq
            """) { row in (row.string(0), row.int64(1), row.string(2)) }
            .compactMap { device, seq, body in DeviceID(allowingReserved: device).map { ($0, seq, body) } }
    }

    /// Watermarks of devices with outbox entries above them (restored at start, so trims respect them).
    func watermarks(in log: DeviceLog) throws -> [(DeviceID, Int64)] {
        try db.query("""
            SELECT d.device, d.ackedThrough FROM host_devices d
            WHERE EXISTS (SELECT 1 FROM \(log.table) l WHERE l.device = d.device AND l.seq > d.ackedThrough)
            """) { ($0.string(0), $0.int64(1)) }
            .compactMap { device, acked in DeviceID(allowingReserved: device).map { ($0, acked) } }
    }
}
