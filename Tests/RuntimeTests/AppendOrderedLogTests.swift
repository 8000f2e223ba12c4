import Foundation
import Model
@testable import Runtime
import Store
import Testing

/// Logs are append-ordered (a rowid table found through a `(device, seq)`
/// index) and host rows live in a rowid table; stores of the clustered shape
/// of earlier releases move over with every row.
@Suite struct AppendOrderedLogTests {
    /// The shapes before: what the services' first migrations created.
    static let clustered: [(name: String, sql: String)] = [
        ("host-1", """
            CREATE TABLE host_devices (
                device TEXT PRIMARY KEY, row TEXT NOT NULL, inputs TEXT NOT NULL DEFAULT '{}', ackedThrough INTEGER NOT NULL DEFAULT 0
            ) WITHOUT ROWID;
            CREATE TABLE host_identity (epoch TEXT NOT NULL, createdMs INTEGER NOT NULL);
            """),
        ("ring", """
            CREATE TABLE ring (
                device TEXT NOT NULL, seq INTEGER NOT NULL, sessionID TEXT, timeMs INTEGER, body TEXT NOT NULL,
                PRIMARY KEY (device, seq)
            ) WITHOUT ROWID;
            CREATE UNIQUE INDEX ring_by_time ON ring(device, timeMs);
            """),
    ]

    @Test func aClusteredStoreMovesOverWithEveryRow() throws {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("reshape-\(UUID().uuidString).sqlite").path
        defer { for suffix in ["", "-wal", "-shm"] { try? FileManager.default.removeItem(atPath: path + suffix) } }
        let db = try Database(path: path)
        var before = Migrator()
        for (name, sql) in Self.clustered { before.register(name, sql) }
        try before.migrate(db)
        let a = try #require(DeviceID("a")), b = try #require(DeviceID("b"))
        for seq in Int64(1)...5 {
            for device in [a, b] {
                try db.run("INSERT INTO ring (device, seq, sessionID, timeMs, body) VALUES (?, ?, 's', ?, ?)",
                           .text(device.rawValue), .integer(seq), .integer(seq * 1_000), .text("{\"n\":\(seq)}"))
            }
        }
        try db.run("INSERT INTO host_devices (device, row, inputs, ackedThrough) VALUES ('a', X'F10102', '{\"raw\":{\"seq\":5}}', 4)")

        var after = Migrator()
        for (name, sql) in Self.clustered { after.register(name, sql) }
        after.register(HostStore.migrations[1].name, HostStore.migrations[1].sql)
        after.register("ring-reshaped", DeviceLog.reshape("ring", uniqueTime: true))
        #expect(try after.migrate(db) == ["host-2-rowid", "ring-reshaped"])

        let ring = try DeviceLog(db: db, table: "ring")
        #expect(try ring.entries(a, after: 2).map(\.seq) == [3, 4, 5])
        #expect(try ring.entries(b, after: 0).map(\.body) == (1...5).map { "{\"n\":\($0)}" })
        #expect(try ring.contains(b, timeMs: 3_000))
        // The (device, timeMs) index is still unique: the gateway's duplicate check relies on it.
        #expect(throws: StoreError.self) {
            try db.run("INSERT INTO ring (device, seq, timeMs, body) VALUES ('a', 9, 1000, '{}')")
        }
        let shape = try db.first("SELECT sql FROM sqlite_master WHERE name = 'ring'") { $0.string(0) } ?? ""
        #expect(!shape.contains("WITHOUT ROWID"))
        #expect(try db.first(#"SELECT count(*) FROM sqlite_master WHERE tbl_name LIKE 'ring\_%' ESCAPE '\'"#) { $0.int(0) } == 0)

        let store = try HostStore(db: db)
        let entry = try #require(try store.entry(a))
        #expect(Array(entry.row) == [0xF1, 0x01, 0x02])
        #expect(entry.ackedThrough == 4)
        try store.save(a, row: [0xF1, 0x01, 0x03], binary: true, inputs: Array("{}".utf8))
        try store.save(b, row: Array("{}".utf8), binary: false, inputs: Array("{}".utf8))
        #expect(try store.devices().map(\.device.rawValue).sorted() == ["a", "b"])
        #expect(try store.entry(a).map { Array($0.row) } == [0xF1, 0x01, 0x03])
    }

    @Test func appendsGoToTheTablesEndWhateverTheDevice() throws {
        let db = try Database(path: ":memory:")
        try db.execute(DeviceLog.schema("log"))
        let log = try DeviceLog(db: db, table: "log")
        let devices = (0..<50).compactMap { DeviceID("d\($0)") }
        for seq in Int64(1)...4 {
            for device in devices { try log.append(device, seq: seq, sessionID: nil, timeMs: seq, body: Array("{}".utf8)) }
        }
        // Rowids in the order written: device d7's entries are 50 rows apart, not neighbours.
        let ids = try db.query("SELECT id FROM log WHERE device = 'd7' ORDER BY seq") { $0.int64(0) }
        #expect(ids == [8, 58, 108, 158])
        // A redelivered (device, seq) replaces its entry rather than adding one.
        try log.append(devices[7], seq: 2, sessionID: nil, timeMs: 2, body: Array("{\"again\":1}".utf8))
        #expect(try log.entries(devices[7], after: 1, through: 2, limit: 10).map(\.body) == ["{\"again\":1}"])
        #expect(try log.totalCount() == 200)
        #expect(try log.trim(devices[7], through: 3) == 3)
        #expect(try log.newestSeq(devices[7]) == 4)
    }
}
