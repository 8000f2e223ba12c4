import Bus
@testable import Filter
import FilterCore
import Foundation
import TrackerLog
import Model
@testable import Runtime
import Store
import TestSupport
import Testing

/// The filter service's look-ahead on the host, in process, on a manual
/// clock: a sparse fix waits for the next one, and no longer than the
/// profile's `lookAheadMs` when none comes.
@Suite struct FilterHostTests {
    let bus = RecordingBus()
    let clock = ManualClock()
    let database = TemporaryDatabase("filter")
    let frame = LocalFrame(originLat: 48.1, originLon: 11.5)
    let t0: Int64 = 1_790_000_000_000

    func host(_ settings: [String: JSONValue] = [:]) throws -> ServiceHost<FilterRow> {
        try .inProcess(FilterService.definition(try FilterSettings(.test(settings))), path: database.path, bus: bus, clock: clock)
    }

    func raw(_ seq: Int64, t: Double, y: Double, doppler: Bool = true) -> MQTTMessage {
        let (lat, lon) = frame.toGeo(x: 0, y: y)
        let fix = RawFix(device: DeviceID("van1")!, seq: seq, sessionID: "s", timeMs: t0 + Int64(t * 1000), receivedMs: t0,
                         source: .device, latitude: lat, longitude: lon, accuracyM: 10, speedMps: doppler ? 12 : nil,
                         courseDeg: doppler ? 0 : nil)
        return MQTTMessage(topic: "tracker/van1/raw", payload: JSONCoding.bytes(fix))
    }

    func pointSeqs() -> [Int64] {
        bus.decoded(PointMessage.self, topicSuffix: "tracker/van1/points").map(\.point.seq)
    }

    /// `seconds` without a fix: the clock moves on and the sweep runs.
    func silence(_ seconds: Int, _ filter: ServiceHost<FilterRow>) {
        clock.advance(by: .seconds(seconds))
        filter.tick()
        #expect(filter.commit())
    }

    @Test func aHeldFixIsReleasedByTheNextOrAfterTheLookAhead() throws {
        var filter: ServiceHost<FilterRow>? = try host()
        // A fix every 10 s: each waits for the next.
        for i in 0..<4 { filter!.receive(raw(Int64(i + 1), t: Double(i) * 10, y: Double(i) * 120)) }
        #expect(filter!.commit())
        #expect(pointSeqs() == [1, 2, 3], "the fourth waits for the fifth")
        // A restart keeps the held fix.
        filter = nil
        filter = try host()
        silence(29, filter!)
        #expect(pointSeqs() == [1, 2, 3])
        // No fifth fix within the look-ahead: judged alone.
        silence(2, filter!)
        #expect(pointSeqs() == [1, 2, 3, 4])
    }

    @Test func aDamagedRowStartsItsDeviceOverInsteadOfStallingTheFilter() throws {
        do {
            let filter = try host()
            for i in 0..<9 { filter.receive(raw(Int64(i + 1), t: Double(i), y: Double(i) * 12)) }
            #expect(filter.commit())
            filter.close()
        }
        #expect(pointSeqs() == Array(1...9))
        try Database(path: database.path).run("UPDATE host_devices SET row = substr(row, 1, 20) WHERE device = 'van1'")
        bus.clear()

        let filter = try host()
        defer { filter.close() }
        filter.receive(raw(9, t: 8, y: 96))  // redelivered: its watermark is kept beside the row
        filter.receive(raw(10, t: 9, y: 108))
        #expect(filter.commit())
        #expect(bus.events().contains { $0.diagnosticCode == "stateSetAside" })
        // Started over, fix 10 starts the filter again: it waits for fixes to confirm it, or 10 s of silence.
        #expect(pointSeqs() == [])
        silence(10, filter)
        #expect(pointSeqs() == [10])
    }

    /// A device's first fix starts the filter, and a reflection there would
    /// lead it astray: it waits for the fixes after it (`comesOutOfSilence`),
    /// but no longer than 10 s of silence, not the look-ahead's 30 s.
    @Test func aDevicesFirstFixWaitsTenSecondsAtMostForTheFixesThatConfirmIt() throws {
        let filter = try host()
        defer { filter.close() }
        filter.receive(raw(1, t: 0, y: 0))
        #expect(filter.commit())
        silence(9, filter)
        #expect(pointSeqs() == [])
        silence(1, filter)
        #expect(pointSeqs() == [1])
    }

    /// Fixes waiting on silence are due when what waits now says: a first
    /// fix without Doppler, confirmed, goes on into the smoothing lag, which
    /// here waits 5 s where the held fix waited 10. The device's entry in
    /// the waiting table kept the held fix's time, and the points came late.
    @Test func whatWaitsIsDueByItsOwnWaitAfterAHeldFixMovesOnIntoTheLag() throws {
        let filter = try host(["smoothingLagSec": .number(5)])
        defer { filter.close() }
        for i in 0..<9 { filter.receive(raw(Int64(i + 1), t: Double(i), y: Double(i) * 12, doppler: false)) }
        #expect(filter.commit())
        #expect(pointSeqs() == [1, 2, 3, 4], "those 5 s and more before the newest")
        silence(5, filter)
        #expect(pointSeqs() == Array(1...9))
    }

    @Test func theDecisionsAndTheJudgedFixesOfAnEarlierStoreMoveIntoOneLogAndReadAsTheyWere() throws {
        // A store as the release before left it: the two logs apart, one fix in only one of them (a layer was off).
        var before = Migrator()
        for (name, sql) in HostStore.migrations + FilterStore.migrations.dropLast() { before.register(name, sql) }
        let db = try Database(path: database.path)
        _ = try before.migrate(db)
        let decisions = [
            #"{"accepted":true,"estimate":{"accuracyM":7.825587755538549,"latitude":48.137154,"longitude":11.576124},"reason":"accepted","seq":1,"timeMs":1790000000000}"#,
            #"{"accepted":false,"limit":150,"measured":412.5,"reason":"isolated_jump","seq":2,"timeMs":1790000001000}"#,
            #"{"accepted":true,"reason":"accepted","seq":3,"timeMs":1790000002000}"#,
        ]
        let judged = [
            #"{"accepted":true,"accuracyM":5,"latitude":48.137154,"longitude":11.576124,"reason":"accepted","seq":1,"sessionID":"s","timeMs":1790000000000}"#,
            #"{"accepted":false,"accuracyM":1e-07,"courseDeg":359.9,"latitude":-33.9,"longitude":151.2,"reason":"isolated_jump","seq":2,"speedMps":0.5,"timeMs":1790000001000}"#,
            #"{"accepted":true,"accuracyM":3,"latitude":1,"longitude":2,"reason":"accepted","seq":4,"timeMs":1790000003000}"#,
        ]
        for (table, bodies, seqs) in [("decisions", decisions, [1, 2, 3]), ("judged", judged, [1, 2, 4])] {
            for (body, seq) in zip(bodies, seqs) {
                try db.run("INSERT INTO \(table) (device, seq, sessionID, timeMs, body) VALUES ('van1', ?, 's', ?, ?)",
                           .integer(Int64(seq)), .integer(t0 + Int64(seq) * 1000), .text(body))
            }
        }

        let filter = try host()  // migrates
        defer { filter.close() }
        let log = try DeviceLog(db: db, table: "judgements")
        let van1 = DeviceID("van1")!
        // Each log lacked a fix the other had: both parts are noted missing for the device, so its pages skip the rows without them.
        #expect(try db.query("SELECT device, part FROM judgement_parts_missing ORDER BY part") { "\($0.string(0)) \($0.string(1))" }
                == ["van1 d", "van1 p"])
        // Read as getDecisions and getRawPoints read them.
        let query = QueryContext(device: van1, db: try Database(path: database.path, readOnly: true), maxReplyBytes: 1 << 20) {
            try DeviceLog(db: db, table: $0)
        }
        func page(_ part: String, sessionID: String? = nil, limit: Int = 10, offset: Int = 0) throws -> [String] {
            guard case .page(let page) = try FilterStore.page(query, part: part, sessionID: sessionID, limit: limit, offset: offset) else { return [] }
            return page.bodies
        }
        #expect(try page(LoggedJudgement.decisionPart) == decisions)
        #expect(try page(LoggedJudgement.pointPart) == judged)
        #expect(try page(LoggedJudgement.pointPart, sessionID: "s", limit: 1, offset: 1) == [judged[1]])
        // Unfiltered (as for a device not noted), a row without the part reads null, still JSON.
        #expect(try log.page(van1, sessionID: nil, limit: 10, offset: 0, part: LoggedJudgement.decisionPart) == decisions + ["null"])
        #expect(try log.totalCount() == 4, "one row a fix")
        #expect(try db.first("SELECT count(*) FROM sqlite_master WHERE name IN ('decisions', 'judged')") { $0.int(0) } == 0)
    }

    @Test func eachJudgedFixIsOneRowHoldingTheLayersThatAreOn() throws {
        for (decisionLog, rawPoints) in [(true, true), (true, false), (false, true), (false, false)] {
            let database = TemporaryDatabase("filter-layers")
            let settings = try FilterSettings(.test(["decisionLog": .bool(decisionLog), "rawPoints": .bool(rawPoints)]))
            let filter = try ServiceHost.inProcess(FilterService.definition(settings), path: database.path, bus: bus, clock: clock)
            for i in 0..<9 { filter.receive(raw(Int64(i + 1), t: Double(i), y: Double(i) * 12)) }
            #expect(filter.commit())
            filter.close()
            let db = try Database(path: database.path, readOnly: true)
            let bodies = try db.query("SELECT body FROM judgements ORDER BY seq") { try JSONDecoder().decode(JSONValue.self, from: $0.data(0)) }
            #expect(bodies.count == (decisionLog || rawPoints ? 9 : 0))
            for body in bodies {
                #expect((body["d"]?["reason"] != nil) == decisionLog)
                #expect((body["p"]?["latitude"] != nil) == rawPoints)
            }
            // A layer that is off is noted for the device, so its pages look into the bodies; with both on they need not.
            let missing = try db.query("SELECT device, part FROM judgement_parts_missing ORDER BY part") { "\($0.string(0)) \($0.string(1))" }
            let expected = (decisionLog || !rawPoints ? [] : ["van1 d"]) + (rawPoints || !decisionLog ? [] : ["van1 p"])
            #expect(missing == expected)
        }
    }

    /// A device that reports every 10 s holds a fix at all times, each a new
    /// one: each waits its own look-ahead, counted from when it was held.
    @Test func eachHeldFixWaitsItsOwnLookAhead() throws {
        let filter = try host()
        for i in 0..<4 {
            filter.receive(raw(Int64(i + 1), t: Double(i) * 10, y: Double(i) * 120))
            #expect(filter.commit())
            clock.advance(by: .seconds(10))
            filter.tick()
            #expect(filter.commit())
        }
        // 40 s after the first fix was held, 10 s after the fourth was: the fourth still waits for the fifth.
        #expect(pointSeqs() == [1, 2, 3])
        clock.advance(by: .seconds(21))
        filter.tick()
        #expect(filter.commit())
        #expect(pointSeqs() == [1, 2, 3, 4])
    }

    /// Fixes without Doppler wait the smoothing lag (10 s of later fixes);
    /// when the device falls silent, the service publishes them once it has
    /// been silent for the lag, and a restart in between keeps them.
    @Test func fixesWithoutDopplerArePublishedAfterTheSmoothingLag() throws {
        var filter: ServiceHost<FilterRow>? = try host()
        for i in 0..<20 {
            filter!.receive(raw(Int64(i + 1), t: Double(i), y: Double(i) * 12, doppler: false))
            #expect(filter!.commit())
            clock.advance(by: .seconds(1))
            filter!.tick()
            #expect(filter!.commit())
        }
        let published = pointSeqs()
        #expect(published.first == 1 && published.allSatisfy { $0 <= 10 }, "\(published): fixes 11–20 wait for later ones")
        filter = nil
        filter = try host()
        clock.advance(by: .seconds(8))
        filter!.tick()
        #expect(filter!.commit())
        #expect(pointSeqs() == published, "9 s after the last fix it still waits")
        clock.advance(by: .seconds(2))
        filter!.tick()
        #expect(filter!.commit())
        let all = pointSeqs()
        #expect(all.last == 20 && all == all.sorted(), "\(all)")
        let decisions = bus.messages.filter { $0.topic == "tracker/van1/points" }
        #expect(decisions.count == all.count)
    }

    /// The decision delays are settings: out of range or not a number,
    /// the service refuses to start and names the setting.
    @Test func decisionDelaysOutOfRangeAreRefusedByName() throws {
        for (key, value) in [("smoothingLagSec", JSONValue.number(61)), ("smoothingLagSec", .number(-1)),
                             ("lookAheadSec", .number(121)), ("lookAheadSec", .string("soon")),
                             ("lookAheadFixes", .number(0)), ("lookAheadFixes", .number(4))] {
            #expect { try FilterSettings(.test([key: value])) } throws: { ($0 as? ConfigError)?.setting == key }
        }
        var settings = try FilterSettings(.test(["smoothingLagSec": .number(0), "lookAheadSec": .number(15)]))
        #expect(settings.profile.smoothingLagMs == 0 && settings.profile.lookAheadMs == 15_000)
        settings = try FilterSettings(.test())
        #expect(settings.profile.smoothingLagMs == 10_000 && settings.profile.lookAheadMs == 30_000 && settings.profile.lookAheadFixes == 2)
        settings = try FilterSettings(.test(["lookAheadFixes": .number(1)]))
        #expect(settings.profile.lookAheadFixes == 1)
    }
}
