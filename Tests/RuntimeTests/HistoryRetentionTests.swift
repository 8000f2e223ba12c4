import Model
import Runtime
import Store
import TestSupport
import Testing

/// A service's own history tables (sessions, trips, stops, crossings) are
/// held as the logs are: per device, and across devices to an equal share.
@Suite struct HistoryRetentionTests {
    let database = TemporaryDatabase("history")
    let db: Database

    init() throws {
        db = try Database(path: database.path)
        try db.execute("CREATE TABLE trips (device TEXT NOT NULL, startMs INTEGER NOT NULL, PRIMARY KEY (device, startMs))")
    }

    func add(_ history: HistoryRetention, _ device: String, _ startMs: Int64) throws {
        try db.run("INSERT INTO trips (device, startMs) VALUES (?, ?)", .text(device), .integer(startMs))
        try history.added()
    }

    func count(_ device: String? = nil) throws -> Int {
        try db.first("SELECT count(*) FROM trips" + (device == nil ? "" : " WHERE device = ?"), device.map { [.text($0)] } ?? []) { $0.int(0) } ?? 0
    }

    func oldest(_ device: String) throws -> Int64? {
        try db.first("SELECT min(startMs) FROM trips WHERE device = ?", [.text(device)]) { $0.optionalInt64(0) } ?? nil
    }

    @Test func aDeviceKeepsItsNewestRows() throws {
        let history = try HistoryRetention(db: db, table: "trips", orderColumn: "startMs", keepPerDevice: 10, maxTotal: 1_000)
        // Inserted out of order: what is kept is the newest by the column, not by arrival.
        for startMs in (1...25).reversed() { try add(history, "a", Int64(startMs)) }
        try add(history, "b", 1)
        #expect(try history.trim(DeviceID("a")!) == 15)
        #expect(try count("a") == 10)
        #expect(try oldest("a") == 16)
        #expect(try count("b") == 1)
        #expect(history.total == 11)
        #expect(try history.trim(DeviceID("a")!) == 0)
    }

    @Test func overItsTotalEveryDeviceIsCutToAnEqualShare() throws {
        let history = try HistoryRetention(db: db, table: "trips", orderColumn: "startMs", keepPerDevice: 1_000, maxTotal: 100)
        // 5 devices × 20 rows fill the total; the next row is over it.
        for row in 1...20 { for device in 0..<5 { try add(history, "d\(device)", Int64(row)) } }
        #expect(try count() == 100)
        #expect(history.share == nil)
        try add(history, "d0", 21)
        // 90 % of 100 over 5 devices: 18 each, the newest.
        #expect(history.share == 18)
        #expect(try count() == 90)
        #expect(try count("d0") == 18)
        #expect(try oldest("d0") == 4)
        #expect(try oldest("d3") == 3)
        #expect(history.total == 90)
        // While held, a device's own trim keeps to the share.
        for row in 22...30 { try add(history, "d0", Int64(row)) }
        try history.trim(DeviceID("d0")!)
        #expect(try count("d0") == 18)
        #expect(try oldest("d0") == 13)
    }

    @Test func moreDevicesThanTheTotalAreNotCutOnEveryRow() throws {
        let history = try HistoryRetention(db: db, table: "trips", orderColumn: "startMs", keepPerDevice: 1_000, maxTotal: 1_000)
        // 1,200 devices with one row each, then a second row each: the share is one row and
        // the table stays over its total, so a cut comes once per tenth of the total added.
        var cuts = 0
        for startMs in [Int64(1), 2] {
            for device in 0..<1_200 {
                let before = history.total
                try add(history, "d\(device)", startMs)
                if history.total <= before { cuts += 1 }
            }
        }
        #expect(history.share == 1)
        #expect(cuts >= 12 && cuts <= 14)
        #expect(try count() == history.total)
        #expect(try count() <= 1_200 + 100)
    }

    @Test func theShareEndsOnceTheFleetShrinks() throws {
        let history = try HistoryRetention(db: db, table: "trips", orderColumn: "startMs", keepPerDevice: 1_000, maxTotal: 100)
        for row in 1...11 { for device in 0..<10 { try add(history, "d\(device)", Int64(row)) } }
        #expect(history.share == 9)
        try db.run("DELETE FROM trips WHERE device <> 'd0'")
        history.removed(db.changes)
        #expect(history.share == nil)
        #expect(history.keep == 1_000)
    }

    @Test func theTotalIsCountedAtStart() throws {
        for row in 1...30 { try db.run("INSERT INTO trips (device, startMs) VALUES ('a', ?)", .integer(Int64(row))) }
        let history = try HistoryRetention(db: db, table: "trips", orderColumn: "startMs", keepPerDevice: 5, maxTotal: 1_000)
        #expect(history.total == 30)
        #expect(try history.trim(DeviceID("a")!) == 25)
        #expect(history.total == 5)
    }
}
