import FilterCore
import Foundation
import Model
import MotionCore
import TestSupport
import Testing

/// Points along a line: `metres` east of the origin at `t` seconds.
func point(_ t: Double, east metres: Double, north: Double = 0, acc: Double = 5, speed: Double? = nil, odometer: Double = 0) -> TrackPoint {
    let frame = LocalFrame(originLat: 37.4, originLon: -122.1)
    let (lat, lon) = frame.toGeo(x: metres, y: north)
    return TrackPoint(seq: Int64(t) + 1, sessionID: "s", timeMs: 1_800_000_000_000 + Int64(t * 1000), latitude: lat, longitude: lon,
                      accuracyM: acc, speedMps: speed, odometerM: odometer)
}

func states(_ effects: [MotionEffect]) -> [(MotionState, Int64)] {
    effects.compactMap { if case .state(let s, let t, _) = $0 { (s, t) } else { nil } }
}

@Suite struct MotionCoreTests {
    let t0: Int64 = 1_800_000_000_000

    /// Drive 120 s at 10 m/s, stand 10 min (fixes wandering ±5 m), drive on.
    func drive(core: MotionCore, stand: Double = 600, row: inout MotionRow) -> [MotionEffect] {
        var effects: [MotionEffect] = []
        var rng = SeededRandom(seed: 7)
        for t in 0..<120 { effects += core.handle(point: point(Double(t), east: Double(t) * 10, speed: 10, odometer: Double(t) * 10), row: &row) }
        for t in 120..<(120 + Int(stand)) {
            effects += core.handle(point: point(Double(t), east: 1_200 + rng.gaussian() * 3, north: rng.gaussian() * 3, speed: 0, odometer: 1_200), row: &row)
        }
        let start = 120 + Int(stand)
        for t in start..<(start + 60) {
            effects += core.handle(point: point(Double(t), east: 1_200 + Double(t - start) * 10, speed: 10, odometer: 1_200 + Double(t - start) * 10), row: &row)
        }
        return effects
    }

    @Test func aDriveWithAStopSettlesAtTheStopTimeoutAndLeavesWithinSeconds() {
        let core = MotionCore(rules: MotionRules())
        var row = MotionRow()
        let effects = drive(core: core, row: &row)
        let seen = states(effects)
        #expect(seen.map(\.0) == [.stationary, .moving, .stopPending, .stationary, .moving])
        // The stop began at 120 s: settled a stop timeout (5 min) later, within −60 s … +30 s.
        let settled = Double(seen[3].1 - t0) / 1000
        #expect((120 + 300 - 60)...(120 + 300 + 30) ~= settled, "settled at \(settled) s")
        // Departure at 720 s: moving within 60 s.
        let moving = Double(seen[4].1 - t0) / 1000
        #expect((720...780).contains(moving), "moving at \(moving) s")
        // The trip before the stop and the stop itself are recorded.
        let trip = effects.compactMap { if case .tripEnded(let t) = $0 { t } else { nil } }.first
        #expect(trip.map { (1_100...1_250).contains($0.distanceM) } == true)
        let stop = effects.compactMap { if case .stopEnded(let s) = $0 { s } else { nil } }.last
        #expect(stop.flatMap(\.durationSec).map { (290...620).contains($0) } == true, "stop \(String(describing: stop))")
    }

    @Test func aStandShorterThanTheStopTimeoutIsNoStop() {
        let core = MotionCore(rules: MotionRules())
        var row = MotionRow()
        let seen = states(drive(core: core, stand: 200, row: &row)).map(\.0)
        #expect(!seen.dropFirst().contains(.stationary))
        #expect(seen.last == .moving)
    }

    @Test func aSilentParkedDeviceSettlesOnTheNextFixOrOnTheClock() {
        let core = MotionCore(rules: MotionRules())
        // Arrives, two fixes inside the radius, then the filter says nothing for 20 minutes (parked).
        var row = MotionRow()
        for t in 0..<60 { _ = core.handle(point: point(Double(t), east: Double(t) * 10, speed: 10), row: &row) }
        _ = core.handle(point: point(60, east: 600, speed: 0.4), row: &row)
        _ = core.handle(point: point(65, east: 603, speed: 0), row: &row)
        // Live: the clock carries the device's time on, and settles it a stop timeout after arrival.
        var clocked = row
        #expect(states(core.handle(silenceUntil: t0 + 300_000, row: &clocked)).isEmpty)
        let live = states(core.handle(silenceUntil: t0 + 361_000, row: &clocked))
        #expect(live.map(\.0) == [.stationary])
        #expect(live.first.map { (355_000...362_000).contains($0.1 - t0) } == true)
        // Replayed: the next fix, 20 min later and 40 m away, proves the stop and the departure.
        let seen = states(core.handle(point: point(1_265, east: 640), row: &row))
        #expect(seen.map(\.0) == [.stationary, .moving])
        #expect(seen.first.map { (355_000...362_000).contains($0.1 - t0) } == true)
    }

    @Test func aTunnelIsNotAStop() {
        let core = MotionCore(rules: MotionRules())
        var row = MotionRow()
        for t in 0..<60 { _ = core.handle(point: point(Double(t), east: Double(t) * 15, speed: 15), row: &row) }
        // Live, the silence at speed settles nothing…
        var clocked = row
        #expect(core.handle(silenceUntil: t0 + 420_000, row: &clocked).isEmpty)
        // 6 minutes without fixes, reappearing 5 km further on.
        let seen = states(core.handle(point: point(420, east: 5_900, speed: 15), row: &row)).map(\.0)
        #expect(!seen.contains(.stationary))
        #expect(row.state == .moving)
    }

    @Test func changePaceCommitsAndIsIdempotent() {
        let core = MotionCore(rules: MotionRules())
        var row = MotionRow()
        _ = core.handle(point: point(0, east: 0), row: &row)
        #expect(states(core.changePace(isMoving: true, atMs: t0 + 1_000, row: &row)).map(\.0) == [.moving])
        #expect(core.changePace(isMoving: true, atMs: t0 + 2_000, row: &row).isEmpty)
        #expect(states(core.changePace(isMoving: false, atMs: t0 + 3_000, row: &row)).map(\.0) == [.stationary])
        #expect(core.changePace(isMoving: false, atMs: t0 + 4_000, row: &row).isEmpty)
    }

    @Test func stillReadingsAtWalkingCadenceNeverMakeAWalkerFlap() throws {
        // The Pixel 6 walk through the filter, with low- and medium-confidence `still` every 5 s.
        let fixes = try Fixtures.fixes("pixel6-walk.jsonl")
        var filterState = DeviceFilterState()
        let points = fixes.enumerated().compactMap { i, f in FilterCore().judge(FilterInput(f, seq: Int64(i + 1)), state: &filterState).point }
        let core = MotionCore(rules: MotionRules())
        var plain = MotionRow(), withStills = MotionRow()
        var plainStates: [MotionState] = [], stillStates: [MotionState] = []
        for (i, p) in points.enumerated() {
            plainStates += states(core.handle(point: p, row: &plain)).map(\.0)
            if i % 5 == 0 {
                stillStates += states(core.handle(activity: ActivityReading(activity: "still", confidence: i % 10 == 0 ? 33 : 66), row: &withStills)).map(\.0)
            }
            stillStates += states(core.handle(point: p, row: &withStills)).map(\.0)
        }
        #expect(stillStates == plainStates)
        // No moving → stopPending → moving on a walk.
        var flaps = 0
        for i in plainStates.indices.dropLast(2)
        where plainStates[i] == .moving && plainStates[i + 1] == .stopPending && plainStates[i + 2] == .moving {
            flaps += 1
        }
        #expect(flaps == 0, "states \(plainStates)")
    }

    /// With `feedBack`, each state goes back into the filter as the motion
    /// service publishes it (`tracker/{d}/motion`): the loop must not park the
    /// filter for good (it once did: parked on `stationary`, it accepted no
    /// departure, so the motion machine never saw one).
    @Test(arguments: [false, true])
    func realStopsOnTheSurveyDriveSettleInTimeAndDepartFast(feedBack: Bool) throws {
        // The survey-grade drive with phone noise, through the filter; stops of a minute or more settle.
        let truth = try Fixtures.fixes("mtv-drive-truth.jsonl")
        var rules = MotionRules()
        rules.stopTimeoutMs = 60_000
        rules.stopPendingAfterMs = 20_000
        let core = MotionCore(rules: rules)
        let samples = NoiseGenerator(seed: 1).apply(to: truth)
        var filterState = DeviceFilterState()
        var row = MotionRow()
        var seen: [(MotionState, Int64)] = []
        var accepted = 0
        for (i, s) in samples.enumerated() {
            if let p = FilterCore().judge(FilterInput(s.fix, seq: Int64(i + 1)), state: &filterState).point {
                accepted += 1
                let changes = states(core.handle(point: p, row: &row))
                if feedBack { for (state, timeMs) in changes { FilterCore().noteMotion(state, timeMs: timeMs, state: &filterState) } }
                seen += changes
            }
        }
        #expect(accepted > 800, "accepted \(accepted) points")
        let truthLength = Geodesy.pathLength(truth.map { ($0.lat, $0.lon) })
        #expect(abs(filterState.odometerM / truthLength - 1) < 0.04, "odometer \(filterState.odometerM) m, truth \(truthLength) m")
        // True stops (speed under 0.3 m/s) of 60 s or more, from the truth.
        var stops: [(start: Int64, end: Int64)] = []
        var start: Int64?
        for f in truth {
            if (f.speed ?? 0) < 0.3 { start = start ?? f.timeMs } else if let s = start { if f.timeMs - s >= 60_000 { stops.append((s, f.timeMs)) }; start = nil }
        }
        #expect(stops.count == 3)
        for stop in stops {
            let settled = seen.first { $0.0 == .stationary && $0.1 >= stop.start && $0.1 <= stop.end + 60_000 }
            let delay = settled.map { Double($0.1 - stop.start - 60_000) / 1000 }
            #expect(delay.map { (-60...30).contains($0) } == true, "stop at \(stop.start): settled \(String(describing: delay)) s from the target")
            let left = seen.first { $0.0 == .moving && $0.1 >= stop.end - 5_000 }
            let departure = left.map { Double($0.1 - stop.end) / 1000 }
            #expect(departure.map { (-5...60).contains($0) } == true, "departure after \(String(describing: departure)) s")
        }
    }
}
