import Foundation
import Model
import Testing
import TrackCore
@testable import Track

/// The track service's row in its binary form: every field back as written,
/// the JSON of earlier releases still read, and damage thrown, never trapped on.
@Suite struct TrackStoredRowTests {
    static let point = TrackPoint(seq: 9, sessionID: "s-1", timeMs: 1_793_197_938_549, latitude: 48.137154, longitude: 11.576124,
                                  accuracyM: 7.825587755538549, speedMps: 13.2, courseDeg: 263.6, odometerM: 1234.5678)
    static let full = TrackRow(lastTimeMs: 1_793_197_938_549, lastLatitude: 48.137154, lastLongitude: 11.576124, last: point,
                               motion: .moving, tail: (0..<120).map { Vertex(latitude: 48 + Double($0) * 1e-4, longitude: 11.5, timeMs: Int64($0) * 1_000) },
                               session: LiveSession(id: "s-1", startMs: 1_793_197_000_000, distanceM: 2_345.25, durationSec: 938.5, points: 120,
                                                    maxSpeedMps: 21.5),
                               sessionStartOdometerM: 100.125)

    @Test(arguments: [TrackRow(), full, TrackRow(lastTimeMs: -5, last: TrackPoint(seq: 1, sessionID: nil, timeMs: -5, latitude: 0, longitude: 0,
                                                                                  accuracyM: 0, odometerM: 0))])
    func everyFieldComesBack(_ row: TrackRow) throws {
        let stored = row.stored
        #expect(stored.first == 0xF1)
        #expect(try TrackRow.restored(from: Data(stored), using: JSONDecoder()) == row)
    }

    @Test func itIsSmallerThanTheJSONItReplaces() throws {
        let json = try JSONEncoder().encode(Self.full)
        #expect(Self.full.stored.count * 2 < json.count, "binary \(Self.full.stored.count) B, JSON \(json.count) B")
    }

    @Test func aRowOfAnEarlierReleaseStillReads() throws {
        #expect(try TrackRow.restored(from: JSONEncoder().encode(Self.full), using: JSONDecoder()) == Self.full)
    }

    /// Version 1 (before `retainedFrameCleared`) still reads, the flag false;
    /// a version this release does not know is thrown.
    @Test func aVersionOneRowStillReads() throws {
        var w = BinaryWriter(capacity: 256)
        w.byte(TrackRow.binaryMagic)
        w.varint(1)
        let row = Self.full
        w.write(row.lastTimeMs, row.lastLatitude, row.lastLongitude, row.last, row.motion, row.tail, row.session, row.sessionStartOdometerM)
        #expect(try TrackRow.restored(from: Data(w.written), using: JSONDecoder()) == row)
        var cleared = row
        cleared.retainedFrameCleared = true
        #expect(try TrackRow.restored(from: Data(cleared.stored), using: JSONDecoder()) == cleared)
        #expect(throws: (any Error).self) { try TrackRow.restored(from: Data([0xF1, 0]) + Data(row.stored.dropFirst(2)), using: JSONDecoder()) }
    }

    @Test func damageIsThrown() throws {
        let stored = Self.full.stored
        #expect(throws: (any Error).self) { try TrackRow.restored(from: Data(stored.dropLast(3)), using: JSONDecoder()) }
        #expect(throws: (any Error).self) { try TrackRow.restored(from: Data(stored + [0]), using: JSONDecoder()) }
        #expect(throws: (any Error).self) { try TrackRow.restored(from: Data([0xF1, 9]) + Data(stored.dropFirst(2)), using: JSONDecoder()) }
    }
}
