@testable import FilterCore
import Foundation
import Model
import TestSupport
import Testing

/// The filter's row is stored with every batch that touched its device, in
/// its binary form (`StoredRow.swift`). Along whole drives, in every
/// profile, each state it goes through reads back as the same state; the
/// JSON that older releases stored still reads.
@Suite struct StoredRowTests {
    static func drive(_ recording: String, _ profile: FilterProfile.Name, check: (Int, FilterRow) throws -> Void) throws {
        let core = FilterCore(profile: .named(profile))
        var row = FilterRow()
        for (i, fix) in try Fixtures.fixes(recording).enumerated() {
            let raw = RawFix(device: DeviceID("d")!, seq: Int64(i + 1), sessionID: "s", timeMs: Int64(fix.t * 1000), receivedMs: Int64(fix.t * 1000),
                             source: .device, latitude: fix.lat, longitude: fix.lon, accuracyM: fix.acc, speedMps: fix.speed,
                             courseDeg: fix.course, altitudeM: fix.alt, batteryPct: 80)
            _ = core.handle(raw, row: &row, rejectionEvents: .all)
            row.arrivedMs = Int64(i)
            // Every state early on (the filter starting, held fixes), then a sample.
            if i < 40 || i % 25 == 0 { try check(i, row) }
        }
    }

    @Test(arguments: ["munich-drive.jsonl", "pixel6-walk.jsonl"], FilterProfile.Name.allCases)
    func everyStateAlongADriveReadsBack(_ recording: String, _ profile: FilterProfile.Name) throws {
        var checked = 0
        try Self.drive(recording, profile) { i, row in
            let read = try FilterRow.restored(from: Data(row.stored), using: JSONCoding.decoder)
            #expect(!read.restarted)
            #expect(read.row == row, "fix \(i)")
            // The JSON form, as earlier releases stored it, reads back as the same row too.
            let json = try FilterRow.restored(from: JSONCoding.foundation(row), using: JSONCoding.decoder)
            #expect(json.row == row && !json.restarted, "fix \(i)")
            checked += 1
        }
        #expect(checked >= 40)
    }

    /// What the drives leave at their defaults (a lost filter, the motion
    /// service's state, a standing run, held fixes) round-trips too.
    @Test func everyFieldSet() throws {
        var row = FilterRow(rejections: 7)
        row.arrivedMs = -5
        let frame = LocalFrame(originLat: 48.1, originLon: -11.5)
        var axis = AxisFilter(position: 1.5, velocity: -2.25, positionVariance: 3, velocityVariance: 4)
        axis.pv = 0.5
        row.state.kalman.phase = .lost(frame: frame)
        row.state.kalman.outliers = [.init(x: 1, y: 2, timeMs: 3, accuracyM: 4, doppler: false)]
        row.state.ordering.newestMs = 1_793_197_938_549
        row.state.ordering.reportIntervalMs = 15_000
        row.state.ordering.newestReceivedMs = 1_793_197_939_000
        row.state.ordering.previousPosition = .init(latitude: 48.1, longitude: 11.5)
        row.state.stop.externalMotion = .stopPending
        row.state.stop.departedMs = 99
        row.state.stop.anchor = .init(x: -3, y: 4)
        row.state.stop.leavingCount = 2
        row.state.stop.standingRun = .init(count: 3, sinceMs: 12)
        row.state.stop.standingMs = 13
        let input = FilterInput(seq: 9, sessionID: "s \"1\" ☃", timeMs: 10, latitude: 1, longitude: 2, accuracyM: 3, speedMps: 4,
                                courseDeg: 5, receivedMs: 11, altitudeM: 6, batteryPct: 7)
        var scaled = FilterInput(seq: 10, sessionID: nil, timeMs: 11, latitude: 1, longitude: 2, accuracyM: 3)
        scaled.accuracyScale = 2.5
        row.state.lookAhead.held = [input, scaled]
        row.state.kalman.calibration.note(reportedM: 10)
        row.state.kalman.calibration.learn(mahalanobis: 4, gate: 3.5, reportedM: 10, judgedWith: 1.5)
        row.state.odometer.lastPoint = .init(x: 1, y: 2, timeMs: 3, accuracyM: 4, ve: 5, vn: 6)
        row.state.odometer.meters = 1234.5
        var read = try FilterRow.restored(from: Data(row.stored), using: JSONCoding.decoder)
        #expect(read.row == row && !read.restarted)
        row.state.kalman.phase = .tracking(filter: .init(frame: frame, east: axis, north: axis, timeMs: 77))
        read = try FilterRow.restored(from: Data(row.stored), using: JSONCoding.decoder)
        #expect(read.row == row)
    }

    /// A row cut short or not a row at all is an error, never a crash; a
    /// version from a newer release restarts the filter and keeps the
    /// odometer and the newest fix's time.
    @Test func damagedAndNewerRows() throws {
        var row = FilterRow()
        try Self.drive("munich-drive.jsonl", .balanced) { i, current in if i == 300 { row = current } }
        let stored = row.stored
        for cut in [1, 2, 10, stored.count / 2, stored.count - 1] {
            #expect(throws: (any Error).self) { try FilterRow.restored(from: Data(stored.prefix(cut)), using: JSONCoding.decoder) }
        }
        #expect(throws: (any Error).self) { try FilterRow.restored(from: Data(stored + [0]), using: JSONCoding.decoder) }
        var newer = stored
        newer[1] = UInt8(FilterRow.binaryVersion + 1)
        let (restarted, flag) = try FilterRow.restored(from: Data(newer), using: JSONCoding.decoder)
        #expect(flag)
        #expect(restarted.state.odometer.meters == row.state.odometer.meters)
        #expect(restarted.state.ordering.newestMs == row.state.ordering.newestMs)
        #expect(restarted.state.smoothing.waiting.isEmpty)
        // A fifth the size of the JSON, or less: it is written once per fix with a large fleet.
        #expect(stored.count * 3 < JSONCoding.foundation(row).count, "\(stored.count) bytes")
    }

    /// A row as version 2 wrote it, and the row it reads as: without the
    /// accuracy's calibration, its held and waiting fixes without a scale.
    static func version2(_ row: FilterRow) throws -> (bytes: [UInt8], reads: FilterRow) {
        var row = row
        row.state.kalman.calibration = AccuracyCalibration()
        for i in row.state.lookAhead.held.indices { row.state.lookAhead.held[i].accuracyScale = nil }
        for i in row.state.smoothing.waiting.indices { row.state.smoothing.waiting[i].fix.accuracyScale = nil }
        let bytes = row.stored
        func firstDifference(_ changed: FilterRow) throws -> Int {
            try #require(zip(bytes, changed.stored).enumerated().first { $1.0 != $1.1 }?.offset)
        }
        var marked = row
        marked.state.kalman.calibration.run = 1
        // The calibration's run is the byte after its absent accuracy; the two doubles follow it.
        let run = try firstDifference(marked)
        var cuts = [(run - 1)..<(run + 1 + 16)]
        // Each fix's absent scale is one byte, at its end.
        for i in row.state.lookAhead.held.indices {
            var scaled = row
            scaled.state.lookAhead.held[i].accuracyScale = 1
            let at = try firstDifference(scaled)
            cuts.append(at..<(at + 1))
        }
        for i in row.state.smoothing.waiting.indices {
            var scaled = row
            scaled.state.smoothing.waiting[i].fix.accuracyScale = 1
            let at = try firstDifference(scaled)
            cuts.append(at..<(at + 1))
        }
        var old = bytes
        for cut in cuts.sorted(by: { $0.lowerBound > $1.lowerBound }) { old.removeSubrange(cut) }
        old[1] = 2
        return (old, row)
    }

    /// Munich without Doppler, after 300 fixes: fixes held and waiting in the lag, the accuracy calibrated.
    static func munichRow() throws -> FilterRow {
        var row = FilterRow()
        try drive("munich-drive.jsonl", .balanced) { i, current in if i == 300 { row = current } }
        return row
    }

    /// Version 2 kept no calibration: its rows still read, with nothing
    /// learned and every held or waiting fix judged as reported.
    @Test func aVersion2RowReadsWithNothingCalibrated() throws {
        let row = try Self.munichRow()
        #expect(row.state.kalman.calibration != AccuracyCalibration() && !row.state.smoothing.waiting.isEmpty)
        let (bytes, reads) = try Self.version2(row)
        let (read, restarted) = try FilterRow.restored(from: Data(bytes), using: JSONCoding.decoder)
        #expect(!restarted && read == reads)
    }

    /// Version 1 kept no Doppler flag on an outlier: its rows still read,
    /// their outliers as with Doppler (the longer recovery window).
    @Test func aVersion1RowReadsItsOutliersAsDoppler() throws {
        var row = try Self.munichRow()
        row.state.kalman.outliers = [.init(x: 1, y: 2, timeMs: 3, accuracyM: 4, doppler: false)]
        let (withFlag, reads) = try Self.version2(row)
        row.state.kalman.outliers[0].doppler = true
        // The one byte the flag changes is where version 1 had none.
        let flag = try #require(zip(withFlag, try Self.version2(row).bytes).enumerated().first { $1.0 != $1.1 }?.offset)
        var version1 = withFlag
        version1.remove(at: flag)
        version1[1] = 1
        var expected = reads
        expected.state.kalman.outliers[0].doppler = true
        let (read, restarted) = try FilterRow.restored(from: Data(version1), using: JSONCoding.decoder)
        #expect(!restarted && read == expected)
    }

    /// Every stored type's fields, as the binary form writes them. A field
    /// added to one of these types fails here: add it to the end of the
    /// type's `write` and `init(from:)`, raise `FilterRow.binaryVersion`
    /// and read the old version.
    @Test func theBinaryFormKnowsEveryField() throws {
        func fields(_ value: Any) -> [String] { Mirror(reflecting: value).children.compactMap(\.label) }
        let frame = LocalFrame(originLat: 1, originLon: 2)
        let axis = AxisFilter(position: 0, velocity: 0, positionVariance: 0, velocityVariance: 0)
        let input = FilterInput(seq: 1, sessionID: nil, timeMs: 1, latitude: 1, longitude: 1, accuracyM: 1)
        let step = FilterStep(frame: frame, priorTimeMs: 0, timeMs: 0, predictedEast: axis, predictedNorth: axis, east: axis, north: axis)
        let decision = Decision(seq: 1, timeMs: 1, accepted: true, reason: "accepted", estimate: nil)
        var verdict: Verdict?
        try Self.drive("munich-drive.jsonl", .balanced) { _, row in if verdict == nil { verdict = row.state.smoothing.waiting.first?.verdict } }
        let expected: [(Any, [String])] = [
            (FilterRow(), ["state", "rejections", "arrivedMs"]),
            (DeviceFilterState(), ["kalman", "ordering", "stop", "lookAhead", "smoothing", "odometer"]),
            (KalmanState(), ["phase", "noise", "outliers", "calibration"]),
            (AccuracyCalibration(), ["reportedM", "run", "logScaleSquared", "weight"]),
            (KalmanState.Track(frame: frame, east: axis, north: axis, timeMs: 0), ["frame", "east", "north", "timeMs"]),
            (NoiseCorrelation(), ["products", "squares", "weight", "lastEast", "lastNorth", "lastMs"]),
            (DeviceFilterState.OutlierFix(x: 0, y: 0, timeMs: 0, accuracyM: 0), ["x", "y", "timeMs", "accuracyM", "doppler"]),
            (OrderingState(), ["newestMs", "reportIntervalMs", "newestReceivedMs", "previousPosition"]),
            (DeviceFilterState.Position(latitude: 0, longitude: 0), ["latitude", "longitude"]),
            (StopState(), ["externalMotion", "departedMs", "anchor", "leavingCount", "trend", "standingRun", "standingMs"]),
            (DeviceFilterState.Anchor(x: 0, y: 0), ["x", "y"]),
            (DeviceFilterState.StandingRun(count: 0, sinceMs: 0), ["count", "sinceMs"]),
            (TrendWindows(), ["windows"]),
            (TrendWindow(tau: 1), ["tau", "sw", "swt", "swtt", "swx", "swtx", "swy", "swty", "svv", "svvt", "svvtt", "lastMs", "spanSec"]),
            (LookAheadState(), ["held", "steady"]),
            (SteadyTrack(east: axis, north: axis, timeMs: 0, frame: frame), ["east", "north", "timeMs", "frame"]),
            (input, ["seq", "sessionID", "timeMs", "reading", "receivedMs", "accuracyScale"]),
            (SmoothingState(), ["waiting"]),
            (try #require(verdict), ["decision", "point", "rejection", "step", "standing"]),
            (step, ["frame", "priorTimeMs", "timeMs", "predictedEast", "predictedNorth", "east", "north"]),
            (OdometerState(), ["lastPoint", "meters"]),
            (DeviceFilterState.AcceptedPoint(x: 0, y: 0, timeMs: 0, accuracyM: 0), ["x", "y", "timeMs", "accuracyM", "ve", "vn"]),
            (frame, ["originLat", "originLon", "metresPerDegLon"]),
            (axis, ["position", "velocity", "pp", "pv", "vv"]),
            (input.reading, ["latitude", "longitude", "accuracyM", "speedMps", "courseDeg", "altitudeM", "batteryPct"]),
            (Estimate(latitude: 0, longitude: 0, accuracyM: 0), ["latitude", "longitude", "accuracyM", "speedMps"]),
            (decision, ["seq", "timeMs", "accepted", "reason", "estimate", "measured", "limit"]),
            (TrackPoint(seq: 1, sessionID: nil, timeMs: 1, latitude: 1, longitude: 1, accuracyM: 1, odometerM: 0),
             ["seq", "sessionID", "timeMs", "latitude", "longitude", "accuracyM", "speedMps", "courseDeg", "odometerM"]),
        ]
        for (value, names) in expected { #expect(fields(value) == names, "\(type(of: value))") }
        #expect(fields(Lagging(fix: input, verdict: try #require(verdict))) == ["fix", "verdict"])
    }
}
