import Foundation
import Model
@testable import Runtime
import Store
import TrackerLog
import Testing

/// `tracker-{service} repartition` on stores written by hand: where each
/// device's rows go, what every store gets, and a swap stopped halfway.
@Suite struct RepartitionTests {
    let directory: String
    let definition: ServiceDefinition<Tally>

    init() throws {
        directory = NSTemporaryDirectory() + "repartition-\(UUID().uuidString.prefix(8))"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        var service = tallyService()
        // A table of no device: the fleet's as a whole.
        service.migrations.append(("settings", "CREATE TABLE settings (id INTEGER PRIMARY KEY, value TEXT NOT NULL);"))
        definition = service
    }

    func store(_ name: String) throws -> Database {
        let db = try Database(path: "\(directory)/\(name)")
        try definition.migrate(db)
        return db
    }

    /// Partition k's store under `count`, holding `devices`, the fleet's row and its own settings row.
    func write(_ k: Int, of count: Int, devices: [String]) throws {
        let db = try store("tracker-filter-p\(k).sqlite")
        try db.run("INSERT INTO host_identity (epoch, createdMs) VALUES (?, 0)", .text("old-\(k)"))
        for device in devices + ["_fleet"] {
            let inputs = StoredInputs(["raw": InputMark(epoch: "gateway-\(k)", seq: 7)]).stored
            try db.run("INSERT INTO host_devices (device, row, inputs, ackedThrough) VALUES (?, '{}', ?, 3)", .text(device), .blob(inputs))
        }
        for device in devices {
            for seq in 1...3 { try db.run("INSERT INTO items (device, seq, body) VALUES (?, ?, 'x')", .text(device), .integer(Int64(seq))) }
        }
        try db.run("INSERT INTO settings (value) VALUES (?)", .text("from p\(k)"))
    }

    func devices(in name: String, table: String) throws -> Set<String> {
        Set(try Database(path: "\(directory)/\(name)").query("SELECT DISTINCT device FROM \(table)") { $0.string(0) })
    }

    @Test func everyDeviceMovesToItsPartitionAndTheFleetsRowsToEveryStore() throws {
        let names = (0..<12).map { "van\($0)" }
        let two = Partitioning(count: 2), three = Partitioning(count: 3)
        for k in 0..<2 { try write(k, of: 2, devices: names.filter { two.partition(ofSegment: $0) == k }) }
        let report = try Repartition(definition: definition, directory: directory, target: 3, nowMs: 42, logger: Logger(label: "test", minimum: .off)).run()
        #expect(report.from == 2 && report.to == 3)
        #expect(report.rows["items"] == 36 && report.rows["host_devices"] == 12 + 3)
        #expect(report.fleetWide == ["settings"])
        for k in 0..<3 {
            let name = "tracker-filter-p\(k).sqlite"
            let mine = Set(names.filter { three.partition(ofSegment: $0) == k })
            #expect(try devices(in: name, table: "items") == mine)
            #expect(try devices(in: name, table: "host_devices") == mine.union(["_fleet"]))
            let db = try Database(path: "\(directory)/\(name)")
            // The first old store's settings, once; a fresh identity; watermarks that kept their seq, not their producer.
            #expect(try db.query("SELECT value FROM settings") { $0.string(0) } == ["from p0"])
            #expect(try db.first("SELECT epoch FROM host_identity") { $0.string(0) }?.hasPrefix("old-") == false)
            let marks = try db.query("SELECT inputs FROM host_devices") { try StoredInputs.restored(from: $0.data(0), using: JSONCoding.decoder).marks }
            #expect(marks.allSatisfy { $0 == ["raw": InputMark(epoch: nil, seq: 7)] })
        }
        #expect(FileManager.default.fileExists(atPath: "\(directory)/before-repartition-42/tracker-filter-p1.sqlite"))
        // Back to one store, the unpartitioned one.
        _ = try Repartition(definition: definition, directory: directory, target: 1, nowMs: 43, logger: Logger(label: "test", minimum: .off)).run()
        #expect(try devices(in: "tracker-filter.sqlite", table: "items") == Set(names))
        #expect(!FileManager.default.fileExists(atPath: "\(directory)/tracker-filter-p0.sqlite"))
    }

    /// Stopped after the old stores went aside and before every new one came
    /// in: the service refuses to start, and the next run finishes the swap.
    @Test func aSwapStoppedHalfwayIsFinishedByTheNextRun() throws {
        let names = (0..<6).map { "van\($0)" }
        try write(0, of: 1, devices: names)
        try FileManager.default.moveItem(atPath: "\(directory)/tracker-filter-p0.sqlite", toPath: "\(directory)/tracker-filter.sqlite")
        // What a run leaves when stopped halfway: the swap said, the old store aside, one new store moved in.
        let staging = Repartition<Tally>.stagingPath(directory, service: "filter")
        try FileManager.default.createDirectory(atPath: staging, withIntermediateDirectories: false)
        for k in 0..<2 { _ = try Database(path: "\(staging)/tracker-filter-p\(k).sqlite") }
        let swap = Repartition<Tally>.Swap(sources: ["tracker-filter.sqlite"], targets: ["tracker-filter-p0.sqlite", "tracker-filter-p1.sqlite"],
                                           kept: "\(directory)/before-repartition-7")
        try JSONCoding.encode(swap).write(to: URL(fileURLWithPath: "\(staging)/\(Repartition<Tally>.swapFile)"))
        try FileManager.default.createDirectory(atPath: swap.kept, withIntermediateDirectories: false)
        try FileManager.default.moveItem(atPath: "\(directory)/tracker-filter.sqlite", toPath: "\(swap.kept)/tracker-filter.sqlite")
        try FileManager.default.moveItem(atPath: "\(staging)/tracker-filter-p0.sqlite", toPath: "\(directory)/tracker-filter-p0.sqlite")
        #expect(Repartition<Tally>.interrupted(in: directory, service: "filter"))

        let report = try Repartition(definition: definition, directory: directory, target: 2, nowMs: 8, logger: Logger(label: "test", minimum: .off)).run()
        #expect(report.kept == swap.kept)
        #expect(!Repartition<Tally>.interrupted(in: directory, service: "filter"))
        for k in 0..<2 { #expect(FileManager.default.fileExists(atPath: "\(directory)/tracker-filter-p\(k).sqlite")) }
        #expect(FileManager.default.fileExists(atPath: "\(swap.kept)/tracker-filter.sqlite"))
        #expect(!FileManager.default.fileExists(atPath: "\(directory)/tracker-filter.sqlite"))
    }

    /// An uploader's batch sent without an answer must be finished before a
    /// repartition; a batch set aside (parked) is not in flight.
    @Test func onlyABatchInFlightStopsARepartition() throws {
        var service = tallyService()
        service.migrations.append(("queue", "CREATE TABLE queue (id INTEGER PRIMARY KEY, device TEXT NOT NULL, batch TEXT, parked INTEGER NOT NULL DEFAULT 0);"))
        let logger = Logger(label: "test", minimum: .off)
        let db = try Database(path: "\(directory)/tracker-filter.sqlite")
        try service.migrate(db)
        try db.run("INSERT INTO host_identity (epoch, createdMs) VALUES ('old', 0)")
        try db.run("INSERT INTO queue (device, batch, parked) VALUES ('van1', 'batch-a', 1)")
        _ = try Repartition(definition: service, directory: directory, target: 2, nowMs: 1, logger: logger).run()
        let k = Partitioning(count: 2).partition(ofSegment: "van1")
        try Database(path: "\(directory)/tracker-filter-p\(k).sqlite").run("INSERT INTO queue (device, batch, parked) VALUES ('van1', 'batch-b', 0)")
        #expect(throws: (any Error).self) { try Repartition(definition: service, directory: directory, target: 1, nowMs: 2, logger: logger).run() }
    }
}
