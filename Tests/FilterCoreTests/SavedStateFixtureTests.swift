import FilterCore
import Foundation
import Model
import TestSupport
import Testing

/// Filter rows as the service saved them before the state had a version
/// (`Tests/Fixtures/FilterStates/`, written by `writeTheFixtures` at
/// commit c788cbb): each must still load, and the filter must go on from
/// it exactly as that release did.
@Suite struct SavedStateFixtureTests {
    static let directory = Repository.root.appendingPathComponent("Tests/Fixtures/FilterStates")

    /// A device's fixes, saved after the first `savedAfter`; `motion`: the
    /// motion service's state, noted before the fix at that index.
    struct Scenario: Sendable, CustomStringConvertible {
        var name: String
        var fixes: [FilterInput]
        var savedAfter: Int
        var motion: [Int: MotionState] = [:]
        var description: String { name }
    }

    /// One judgement as the service records it.
    struct Recorded: Codable, Equatable {
        var fix: FilterInput
        var decision: Decision
        var point: TrackPoint?
        var announce: Bool
    }

    static func numbered(_ fixes: [DeviceFix]) -> [FilterInput] {
        fixes.enumerated().map { i, f in FilterInput(f, seq: Int64(i + 1), sessionID: "s") }
    }

    static func noisy(_ variant: NoiseVariant, seed: UInt64) throws -> [FilterInput] {
        numbered(variant.apply(to: try Fixtures.fixes("mtv-drive-truth.jsonl"), seed: seed).samples.map(\.fix))
    }

    static func scenarios() throws -> [Scenario] {
        let frame = LocalFrame(originLat: 48.1, originLon: 11.5)
        let t0: Int64 = 1_790_000_000_000
        // A fix every 15 s north at 12 m/s, a poor one, then a jump: two held at the save.
        let heldTwo = (0..<12).map { i -> FilterInput in
            let t = Double(i) * 15
            let (lat, lon) = frame.toGeo(x: i == 7 ? 150 : (i % 2 == 0 ? 3 : -3), y: t * 12)
            return FilterInput(seq: Int64(i + 1), sessionID: "s", timeMs: t0 + Int64(t * 1000), latitude: lat, longitude: lon,
                               accuracyM: i == 6 ? 50 : 10)
        }
        // Honest fixes, one stamped five minutes ahead, then a poor one behind
        // it: the timeline restarts and the filter waits for its next fix.
        var clock = (0..<12).map { i -> FilterInput in
            let (lat, lon) = frame.toGeo(x: 0, y: Double(i) * 10)
            return FilterInput(seq: Int64(i + 1), sessionID: "s", timeMs: t0 + Int64(i) * 1_000, latitude: lat, longitude: lon,
                               accuracyM: 10, receivedMs: t0 + Int64(i) * 1_000 + 300)
        }
        clock[3].timeMs += 5 * 60_000
        clock[4].accuracyM = 500
        var outlier = try Fixtures.fixes("city-run.jsonl")
        outlier[15].lat += 0.02
        let munich = numbered(try Fixtures.fixes("munich-drive.jsonl"))
        return [
            Scenario(name: "fresh", fixes: numbered(try Fixtures.fixes("city-run.jsonl")), savedAfter: 0),
            Scenario(name: "city-run-outlier", fixes: numbered(outlier), savedAfter: 16),
            Scenario(name: "clock-ran-ahead", fixes: clock, savedAfter: 5),
            Scenario(name: "held-two", fixes: heldTwo, savedAfter: 9),
            Scenario(name: "munich-no-doppler", fixes: Array(munich[0..<600]), savedAfter: 300),
            Scenario(name: "mtv-every-10s-no-doppler",
                     fixes: try noisy(NoiseVariant("sparse", every: 10, withSpeed: false), seed: 3), savedAfter: SavedAfter.sparse),
            Scenario(name: "mtv-doppler-parked", fixes: Array(try noisy(NoiseVariant("doppler"), seed: 1)[0..<900]),
                     savedAfter: SavedAfter.parked, motion: [10: .moving, SavedAfter.stationary: .stationary]),
        ]
    }

    enum SavedAfter {
        static let sparse = 61
        static let parked = 310
        static let stationary = 330
    }

    static func raw(_ fix: FilterInput) -> RawFix {
        RawFix(device: DeviceID("saved")!, seq: fix.seq, sessionID: fix.sessionID, timeMs: fix.timeMs, receivedMs: fix.receivedMs ?? 0,
               source: .device, latitude: fix.latitude, longitude: fix.longitude, accuracyM: fix.accuracyM,
               speedMps: fix.speedMps, courseDeg: fix.courseDeg)
    }

    /// Fixes `range` of the scenario through the row as the service takes
    /// them (arriving at their own time), then, at the end, what still waits.
    static func run(_ scenario: Scenario, _ range: Range<Int>, row: inout FilterRow, release: Bool) -> [Recorded] {
        let core = FilterCore()
        var recorded: [Recorded] = []
        func record(_ judgements: [Judgement]) {
            recorded += judgements.map { Recorded(fix: $0.judged.fix, decision: $0.decision, point: $0.point, announce: $0.announceRejection) }
        }
        for i in range {
            let fix = scenario.fixes[i]
            if let motion = scenario.motion[i] { core.noteMotion(motion, timeMs: fix.timeMs, state: &row.state) }
            row.arrivedMs = fix.timeMs
            record(core.handle(raw(fix), row: &row, rejectionEvents: .sampled(every: 3)))
        }
        if release { record(core.release(row: &row, rejectionEvents: .sampled(every: 3))) }
        return recorded
    }

    static func lines(_ recorded: [Recorded]) -> String {
        recorded.map { String(decoding: JSONCoding.foundation($0), as: UTF8.self) + "\n" }.joined()
    }

    /// Writes the saved rows and what the filter made of the fixes after them
    /// (run once, by the release whose rows they are).
    @Test(.enabled(if: ProcessInfo.processInfo.environment["TRACKER_WRITE_FILTER_STATES"] != nil))
    func writeTheFixtures() throws {
        try FileManager.default.createDirectory(at: Self.directory, withIntermediateDirectories: true)
        for scenario in try Self.scenarios() {
            var row = FilterRow()
            _ = Self.run(scenario, 0..<scenario.savedAfter, row: &row, release: false)
            let saved = JSONCoding.encode(row)
            try saved.write(to: Self.directory.appendingPathComponent("\(scenario.name).row.json"))
            var restored = try FilterRow.restored(from: saved, using: JSONCoding.decoder).row
            let after = Self.run(scenario, scenario.savedAfter..<scenario.fixes.count, row: &restored, release: true)
            try Data(Self.lines(after).utf8).write(to: Self.directory.appendingPathComponent("\(scenario.name).after.jsonl"))
        }
    }

    /// Rewrites what the filter makes of the rest of each scenario from its
    /// saved row (never the rows): run when the filter's behaviour changes on
    /// purpose, and the diff checked to hold that change alone.
    @Test(.enabled(if: ProcessInfo.processInfo.environment["TRACKER_REWRITE_FILTER_CONTINUATIONS"] != nil))
    func rewriteTheContinuations() throws {
        for scenario in try Self.scenarios() {
            var row = try FilterRow.restored(from: Data(contentsOf: Self.rowURL(scenario.name)), using: JSONCoding.decoder).row
            let after = Self.run(scenario, scenario.savedAfter..<scenario.fixes.count, row: &row, release: true)
            try Data(Self.lines(after).utf8).write(to: Self.directory.appendingPathComponent("\(scenario.name).after.jsonl"))
        }
    }

    static func rowURL(_ name: String) -> URL { directory.appendingPathComponent("\(name).row.json") }

    /// The device state of a saved row, as the JSON object version 1 wrote.
    static func version1State(_ name: String) throws -> [String: Any] {
        let row = try #require(JSONSerialization.jsonObject(with: Data(contentsOf: rowURL(name))) as? [String: Any])
        return try #require(row["state"] as? [String: Any])
    }

    static func state(_ object: [String: Any]) throws -> (state: DeviceFilterState, restarted: Bool) {
        DeviceFilterState.restored(from: try JSONSerialization.data(withJSONObject: object), using: JSONCoding.decoder)
    }

    /// Loaded as that release saved it, and again after this one saved it
    /// in its own version: the rest of the fixes come out as they did then.
    @Test(arguments: try scenarios())
    func aSavedRowContinuesAsTheReleaseThatSavedIt(scenario: Scenario) throws {
        let (row, restarted) = try FilterRow.restored(from: Data(contentsOf: Self.rowURL(scenario.name)), using: JSONCoding.decoder)
        #expect(!restarted)
        let resaved = try FilterRow.restored(from: JSONCoding.encode(row), using: JSONCoding.decoder)
        #expect(!resaved.restarted && resaved.row == row)
        let text = try String(contentsOf: Self.directory.appendingPathComponent("\(scenario.name).after.jsonl"), encoding: .utf8)
        let expected = try text.split(separator: "\n").map { try JSONCoding.decoder.decode(Recorded.self, from: Data($0.utf8)) }
        for start in [row, resaved.row] {
            var continued = start
            let after = Self.run(scenario, scenario.savedAfter..<scenario.fixes.count, row: &continued, release: true)
            #expect(after.count == expected.count)
            for (got, want) in zip(after, expected) { #expect(got == want) }
        }
    }

    @Test func version1MovesToItsOwners() throws {
        #expect(try Self.state(Self.version1State("fresh")).state == DeviceFilterState())
        let lost = try Self.state(Self.version1State("clock-ran-ahead")).state
        #expect(lost.kalman.track == nil && lost.kalman.frame != nil && !lost.smoothing.waiting.isEmpty)
        let held = try Self.state(Self.version1State("held-two")).state
        #expect(held.kalman.track != nil && held.lookAhead.held.map(\.seq) == [8, 9])
        let parked = try Self.state(Self.version1State("mtv-doppler-parked")).state
        #expect(parked.stop.anchor != nil && parked.stop.externalMotion == .moving && parked.stop.standingMs != nil)
        #expect(parked.odometerM == (try Self.version1State("mtv-doppler-parked")["odometerM"] as? Double))
        let saved = try #require(JSONSerialization.jsonObject(with: JSONCoding.encode(parked)) as? [String: Any])
        #expect(saved["version"] as? Int == DeviceFilterState.savedVersion && saved["state"] is [String: Any])
    }

    /// Older than the fields version 1 always had, or newer than this
    /// release: the filter restarts, odometer and ordering kept.
    @Test func aStateNoVersionReadsRestartsKeepingTheOdometer() throws {
        var tooOld = try Self.version1State("munich-no-doppler")
        tooOld["trend"] = nil
        let old = try Self.state(tooOld)
        #expect(old.restarted)
        #expect(old.state.odometerM == tooOld["odometerM"] as? Double && old.state.ordering.newestMs == (tooOld["newestMs"] as? NSNumber)?.int64Value)
        #expect(old.state.kalman.track == nil && old.state.smoothing.waiting.isEmpty)

        let current = try Self.state(Self.version1State("munich-no-doppler")).state
        var newer = try #require(JSONSerialization.jsonObject(with: JSONCoding.encode(current)) as? [String: Any])
        newer["version"] = DeviceFilterState.savedVersion + 1
        let restarted = try Self.state(newer)
        #expect(restarted.restarted && restarted.state.odometerM == current.odometerM)
        #expect(restarted.state.ordering.newestMs == current.ordering.newestMs && restarted.state.kalman.track == nil)
    }
}
