import Foundation
import Model
@testable import Motion
@testable import MotionCore
import Testing

/// The motion service's row in its binary form: every field back as written,
/// the JSON of earlier releases still read, and damage thrown, never trapped on.
@Suite struct MotionStoredRowTests {
    static var full: MotionDeviceRow {
        let point = TrackPoint(seq: 9, sessionID: "s-1", timeMs: 1_793_197_938_549, latitude: 48.137154, longitude: 11.576124,
                               accuracyM: 7.5, speedMps: 13.2, courseDeg: 263.6, odometerM: 1234.5678)
        var motion = MotionRow()
        motion.state = .stopPending
        motion.anchor = Anchor(point)
        motion.lastPoint = point
        motion.leavingSinceMs = 1_793_197_930_000
        var trip = Trip(startMs: 1_793_197_000_000, startLatitude: 48.1, startLongitude: 11.5, startOdometerM: 12.5, sessionID: "s-1")
        trip.endMs = 1_793_197_938_549; trip.endLatitude = 48.137154; trip.distanceM = 4_321.5; trip.maxSpeedMps = 21.25
        motion.trip = trip
        motion.stop = Stop(arrivalMs: 1_793_196_000_000, departureMs: 1_793_197_000_000, latitude: 48.1, longitude: 11.5, sessionID: nil)
        motion.activity = ActivityReading(activity: "in_vehicle", confidence: 66, snapshot: true, t: 1_793_197_938.5)
        var visits = FenceVisits()
        visits["home"] = FenceVisit(enteredMs: 5, dwellDueMs: 60_005, lastInside: Spot(point), beyond: nil)
        visits["_fleet/depot"] = FenceVisit(enteredMs: 7, dwellDueMs: nil, lastInside: Spot(timeMs: 7, latitude: 1, longitude: 2),
                                            beyond: Spot(timeMs: 8, latitude: 1.1, longitude: 2.1, speedMps: 3))
        var route = RouteProgress()
        route.offRoute = true; route.run = 2; route.segment = 14
        return MotionDeviceRow(motion: motion, visits: visits, route: route, openSession: "s-1", closedSession: "s-0",
                               clockMs: 1_793_197_938_549, clockWallMs: 1_795_000_000_000, lastHeartbeatMs: 1_793_197_900_000,
                               announcedActivity: "in_vehicle", announcedActivityWallMs: 1_795_000_000_100, motionSeq: 77,
                               timerWallMs: 1_795_000_030_000)
    }

    @Test func everyFieldComesBack() throws {
        for row in [MotionDeviceRow(), Self.full] {
            let stored = row.stored
            #expect(stored.first == 0xF1)
            #expect(try MotionDeviceRow.restored(from: Data(stored), using: JSONDecoder()) == row)
        }
    }

    @Test func aRowOfAnEarlierReleaseStillReads() throws {
        // JSON keeps visits keyed by fence: they come back in key order.
        let json = try JSONEncoder().encode(Self.full)
        let restored = try MotionDeviceRow.restored(from: json, using: JSONDecoder())
        #expect(restored.motion == Self.full.motion && restored.route == Self.full.route && restored.motionSeq == 77)
        #expect(Set(restored.visits.map(\.key)) == ["home", "_fleet/depot"] && restored.visits["home"] == Self.full.visits["home"])
    }

    @Test func damageIsThrown() throws {
        let stored = Self.full.stored
        #expect(throws: (any Error).self) { try MotionDeviceRow.restored(from: Data(stored.dropLast(3)), using: JSONDecoder()) }
        #expect(throws: (any Error).self) { try MotionDeviceRow.restored(from: Data(stored + [0]), using: JSONDecoder()) }
        #expect(throws: (any Error).self) { try MotionDeviceRow.restored(from: Data([0xF1, 9]) + Data(stored.dropFirst(2)), using: JSONDecoder()) }
    }
}
