import FilterCore
import Foundation
import Model
import TestSupport
import Testing

/// Look-ahead for sparse fixes: a jump is told from a turn by where the
/// device is at the next fix (or the one after, when the next leaves it open).
@Suite struct LookAheadTests {
    let frame = LocalFrame(originLat: 48.1, originLon: 11.5)
    let t0: Int64 = 1_790_000_000_000

    /// A fix every `every` seconds at (x, y), with Doppler along the way.
    func fix(_ seq: Int64, t: Double, x: Double, y: Double, east: Double, north: Double) -> FilterInput {
        let (lat, lon) = frame.toGeo(x: x, y: y)
        var course = atan2(east, north) * 180 / .pi
        if course < 0 { course += 360 }
        return FilterInput(seq: seq, sessionID: "s", timeMs: t0 + Int64(t * 1000), latitude: lat, longitude: lon,
                           accuracyM: 30, speedMps: hypot(east, north), courseDeg: course)
    }

    /// North at 12 m/s, a fix every `every` seconds; fix `jumpAt` (0-based) lands 250 m east.
    func northbound(every: Double = 10, count: Int = 10, jumpAt: Int? = nil) -> [FilterInput] {
        var fixes: [FilterInput] = []
        for i in 0..<count {
            let x: Double = i == jumpAt ? 150 : 0
            fixes.append(fix(Int64(i + 1), t: Double(i) * every, x: x, y: Double(i) * every * 12, east: 0, north: 12))
        }
        return fixes
    }

    /// Runs fixes through `submit` and `flush`: every verdict, with the fix it judges.
    func run(_ fixes: [FilterInput], core: FilterCore = FilterCore()) -> (due: [[Judged]], all: [Judged]) {
        var state = DeviceFilterState()
        var due = fixes.map { core.submit($0, state: &state) }
        due.append(core.flush(state: &state))
        return (due, due.flatMap { $0 })
    }

    @Test func aSparseJumpIsRejectedOnceTheNextFixIsBackOnTheTrack() {
        // North at 12 m/s, a fix every 10 s at 30 m accuracy; the sixth lands 150 m east,
        // which the filter alone takes for a swerve.
        let fixes = northbound(jumpAt: 5)
        let alone = FilterCore.named(lookAheadMs: 0)
        #expect(run(fixes, core: alone).all.first { $0.fix.seq == 6 }?.verdict.point != nil, "the jump must pass the filter's own gates")
        let (due, all) = run(fixes)
        #expect(all.map { $0.fix.seq } == (1...10).map(Int64.init), "one verdict per fix, in order")
        let jump = all.first { $0.fix.seq == 6 }!
        #expect(jump.verdict.decision.reason == "isolated_jump")
        #expect(jump.verdict.point == nil)
        // Decided when the seventh fix came, not before.
        #expect(due[5].isEmpty || due[5].allSatisfy { $0.fix.seq < 6 })
        #expect(due[6].map { $0.fix.seq }.contains(6))
        #expect(all.filter { $0.fix.seq != 6 }.allSatisfy { $0.verdict.point != nil }, "\(all.map { $0.verdict.decision.reason })")
    }

    @Test func aSparseTurnIsAccepted() {
        // North at 12 m/s, then east from the fifth fix on: the same landing place as the jump, but the device stays there.
        var fixes: [FilterInput] = []
        for i in 0..<10 {
            let t = Double(i) * 10, seq = Int64(i + 1)
            if i < 5 {
                fixes.append(fix(seq, t: t, x: 0, y: Double(i) * 120, east: 0, north: 12))
            } else {
                fixes.append(fix(seq, t: t, x: Double(i - 4) * 120, y: 480, east: 12, north: 0))
            }
        }
        let all = run(fixes).all
        #expect(all.map { $0.fix.seq } == (1...10).map(Int64.init))
        #expect(all.allSatisfy { $0.verdict.decision.reason != "isolated_jump" }, "\(all.map { $0.verdict.decision.reason })")
        // Points keep their fix's own time.
        let points = all.compactMap { $0.verdict.point }
        #expect(points.allSatisfy { p in fixes.contains { $0.seq == p.seq && $0.timeMs == p.timeMs } })
    }

    /// A fix without Doppler (network locations, OwnTracks' significant changes).
    func bare(_ seq: Int64, t: Double, x: Double, y: Double, accuracy: Double = 10) -> FilterInput {
        let (lat, lon) = frame.toGeo(x: x, y: y)
        return FilterInput(seq: seq, sessionID: "s", timeMs: t0 + Int64(t * 1000), latitude: lat, longitude: lon, accuracyM: accuracy)
    }

    @Test func aSparseJumpWithoutDopplerSmallerThanTheForwardSpreadIsRejected() {
        // North at 12 m/s without Doppler, a fix every 15 s; the seventh lands 160 m
        // east. Predicted 15 s ahead from positions alone, the filter spreads over
        // more than that, so comparing with the prediction (the look-ahead's first
        // version) let it through; the next fix says where the device was in between.
        let fixes: [FilterInput] = (0..<12).map { (i: Int) -> FilterInput in
            let t = Double(i) * 15
            return bare(Int64(i + 1), t: t, x: i == 6 ? 160 : 0, y: t * 12)
        }
        let all = run(fixes).all
        #expect(all.map { $0.fix.seq } == (1...12).map(Int64.init), "one verdict per fix, in order")
        let jump = all.first { $0.fix.seq == 7 }!
        #expect(jump.verdict.decision.reason == "isolated_jump", "\(jump.verdict.decision.reason)")
        // The decision log says how far off it was: many standard deviations from where the device must have been.
        #expect((jump.verdict.decision.measured ?? 0) > 4)
        #expect(all.filter { $0.fix.seq != 7 }.allSatisfy { $0.verdict.rejection?.isOutlier != true }, "\(all.map { $0.verdict.decision.reason })")
    }

    /// North at 12 m/s without Doppler, a fix every 15 s at 10 m, wobbling by 3 m;
    /// the seventh is poor (50 m) and the eighth lands 150 m east.
    func jumpAfterAPoorFix(count: Int = 12) -> [FilterInput] {
        (0..<count).map { (i: Int) -> FilterInput in
            let t = Double(i) * 15
            return bare(Int64(i + 1), t: t, x: i == 7 ? 150 : (i % 2 == 0 ? 3 : -3), y: t * 12, accuracy: i == 6 ? 50 : 10)
        }
    }

    @Test func aJumpTheNextFixLeavesOpenWaitsForTheOneAfter() {
        // After the poor seventh fix the track is loose: judged with the ninth alone,
        // the eighth might be a jump or the ninth might be, and one fix of look-ahead
        // takes the jump. The tenth, on the line with the ninth, settles it.
        let fixes = jumpAfterAPoorFix()
        var profile = FilterProfile.named(.balanced)
        profile.lookAheadFixes = 1
        let oneFix = run(fixes, core: FilterCore(profile: profile)).all
        #expect(oneFix.first { $0.fix.seq == 8 }?.verdict.point != nil, "the case one fix lets through")
        let all = run(fixes).all
        #expect(all.map { $0.fix.seq } == (1...12).map(Int64.init), "one verdict per fix, in order")
        #expect(all.first { $0.fix.seq == 8 }?.verdict.decision.reason == "isolated_jump")
        #expect(all.filter { $0.fix.seq != 8 }.allSatisfy { $0.verdict.rejection?.isOutlier != true }, "\(all.map { $0.verdict.decision.reason })")
        // The eighth waits for the tenth, the ninth behind it; then both move on.
        var state = DeviceFilterState()
        let core = FilterCore()
        for f in fixes.prefix(9) { _ = core.submit(f, state: &state) }
        #expect(state.lookAhead.held.map(\.seq) == [8, 9])
        _ = core.submit(fixes[9], state: &state)
        #expect(state.lookAhead.held.first?.seq != 8 && state.lookAhead.held.count <= 1)
    }

    @Test(arguments: [(20.0, 120.0), (30.0, 140.0)])
    func theStoriesRememberTheWayBeforeTheHeldFix(accuracy: Double, jump: Double) {
        // North at 12 m/s without Doppler, a fix every 15 s wobbling by a third of
        // its accuracy; the tenth lands `jump` m east. The filter's own state has
        // forgotten all but the last fix or two (its velocity known to ±7 m/s on
        // each axis), so told from it, the bridge spread wide enough to take the
        // jump for a swerve; the steady track remembers the straight road.
        let fixes: [FilterInput] = (0..<14).map { (i: Int) -> FilterInput in
            let t = Double(i) * 15
            let wobble = Double([1, -1, 0][i % 3]) * accuracy / 3
            return bare(Int64(i + 1), t: t, x: i == 9 ? jump : wobble, y: t * 12 + wobble, accuracy: accuracy)
        }
        let all = run(fixes).all
        #expect(all.first { $0.fix.seq == 10 }?.verdict.decision.reason == "isolated_jump")
        #expect(all.filter { $0.fix.seq != 10 }.allSatisfy { $0.verdict.rejection?.isOutlier != true }, "\(all.map { $0.verdict.decision.reason })")
    }

    @Test func theTailOfAMultipathBurstIsRejectedOnceTheOldTrackComesBack() {
        // North at 12 m/s without Doppler, a fix a second at 10 m; from the 41st,
        // eight fixes in a row land 100 m east, moving with the device, then the
        // fixes are back. The filter rejects the first of them, but its gate,
        // grown with the time since its last update, takes the tail: with one
        // fix of look-ahead the next (the same burst) agreed with it.
        let fixes: [FilterInput] = (0..<70).map { (i: Int) -> FilterInput in
            let t = Double(i)
            return bare(Int64(i + 1), t: t, x: (40..<48).contains(i) ? 100 : Double([2, -2, 0][i % 3]), y: t * 12)
        }
        let (due, all) = run(fixes)
        #expect(all.map { $0.fix.seq } == (1...70).map(Int64.init), "one verdict per fix, in order")
        let burst = all.filter { (41...48).contains($0.fix.seq) }
        #expect(burst.allSatisfy { $0.verdict.point == nil }, "\(burst.map { $0.verdict.decision.reason })")
        #expect(burst.contains { $0.verdict.decision.reason == "isolated_jump" })
        let after = all.filter { $0.fix.seq > 48 }
        #expect(after.allSatisfy { $0.verdict.rejection?.isOutlier != true }, "\(after.map { $0.verdict.decision.reason })")
        // Nothing waits longer than the burst window and the smoothing lag: every verdict is out within 20 s of its fix.
        for (i, verdicts) in due.dropLast().enumerated() {
            #expect(verdicts.allSatisfy { Int($0.fix.seq) >= i + 1 - 20 }, "fix \(i + 1): \(verdicts.map(\.fix.seq))")
        }
    }

    /// North at 14 m/s without Doppler, braking from 38 s at 1.5 m/s² to
    /// 4 m/s; from 42 s, for 3 s, the fixes land `ahead` m further along the
    /// road: a reflection where the filter, its velocity still that of before
    /// the braking, expects the device. Its first fixes are refused, and the
    /// gate, grown with the time since the filter's last update, took the
    /// burst's next one: the filter walked onto it and refused the road after
    /// it (at 1 Hz 7 fixes, at 5 Hz 35). A fix after an outlier now waits for
    /// the old track to come back (it waited only 4 s after the filter's last
    /// update), at any rate of fixes.
    @Test(arguments: [(1, 20.0, 90.0), (5, 10.0, 40.0)])
    func aBurstAheadOfADeviceSlowingDownIsNotTheRoad(perSecond: Int, accuracy: Double, ahead: Double) {
        let rate = Double(perSecond)
        var y = 0.0, speed = 14.0
        let fixes: [FilterInput] = (0..<(70 * perSecond)).map { i in
            let t = Double(i) / rate
            if t >= 38 { speed = max(4, speed - 1.5 / rate) }
            y += speed / rate
            let burst = (42..<45).contains(t)
            return bare(Int64(i + 1), t: t, x: Double([2, -2, 0][i % 3]), y: y + (burst ? ahead : 0), accuracy: accuracy)
        }
        let all = run(fixes).all
        #expect(all.map(\.fix.seq) == fixes.map(\.seq), "one verdict per fix, in order")
        let burstSeqs = (42 * perSecond + 1)...(45 * perSecond)
        let burst = all.filter { burstSeqs.contains(Int($0.fix.seq)) }
        #expect(burst.allSatisfy { $0.verdict.point == nil }, "\(burst.map { $0.verdict.decision.reason })")
        let after = all.filter { $0.fix.seq > burstSeqs.upperBound }
        #expect(after.allSatisfy { $0.verdict.rejection?.isOutlier != true }, "\(after.prefix(40).map { $0.verdict.decision.reason })")
    }

    /// Silent after it, a fix held after an outlier is judged after 10 s, the
    /// smoothing lag, not the look-ahead's 30 s: the fixes that settle it
    /// come a second apart.
    @Test func aFixHeldAfterAnOutlierWaitsTenSecondsOfSilenceAtMost() {
        let core = FilterCore()
        var state = DeviceFilterState()
        // North at 12 m/s, a fix a second at 10 m; the 21st lands 100 m east, the 22nd is back.
        let fixes: [FilterInput] = (0..<22).map { (i: Int) -> FilterInput in
            let t = Double(i)
            return bare(Int64(i + 1), t: t, x: i == 20 ? 100 : 0, y: t * 12)
        }
        for fix in fixes { _ = core.submit(fix, state: &state) }
        #expect(state.lookAhead.held.map(\.seq) == [22])
        #expect(core.waitMs(state) == 10_000)
    }

    /// The same rule over the sweep's first forty seeds of the phone (errors
    /// correlated over ~10 s, bursts of 3–8 s) and of white noise, at 1 Hz
    /// without Doppler: 47 jumps through and 402 clean fixes taken for
    /// outliers before, 37 and 370 now.
    @Test func fewerBurstsGetThroughWithoutDoppler() throws {
        let scores = try sweepScores(NoiseVariant("phone no speed", correlation: 0.9, jumpProbability: 0.01, withSpeed: false, jumpBurst: 3...8), seeds: 40)
            + sweepScores(NoiseVariant("white no speed", correlation: 0, withSpeed: false), seeds: 40)
        let through = scores.jumpsLetThrough
        let cleanRejected = scores.cleanFixesRefused
        #expect(through <= 40, "jumps through: \(through)")
        #expect(cleanRejected <= 380, "clean fixes taken for outliers: \(cleanRejected)")
    }

    @Test func aTrackThatDoesNotComeBackIsFollowed() {
        // The same, but the fixes stay 100 m east (the filter had lost the
        // device): once the old track has not come back within the burst
        // window, the new one is taken.
        let fixes: [FilterInput] = (0..<70).map { (i: Int) -> FilterInput in
            let t = Double(i)
            return bare(Int64(i + 1), t: t, x: (i >= 40 ? 100 : 0) + Double([2, -2, 0][i % 3]), y: t * 12)
        }
        let all = run(fixes).all
        #expect(all.map { $0.fix.seq } == (1...70).map(Int64.init))
        let settled = all.filter { $0.fix.seq > 55 }
        #expect(settled.allSatisfy { $0.verdict.rejection?.isOutlier != true }, "\(settled.map { $0.verdict.decision.reason })")
        #expect(settled.contains { $0.verdict.point != nil })
    }

    @Test func aSparseTurnWithoutDopplerIsAccepted() {
        // North at 8 m/s, a right turn between two fixes 15 s apart, then east: each fix
        // is off a straight prediction by as much as the jump above, and every one is true.
        var fixes: [FilterInput] = []
        for i in 0..<12 {
            let t = Double(i) * 15
            fixes.append(i <= 5 ? bare(Int64(i + 1), t: t, x: 0, y: t * 8) : bare(Int64(i + 1), t: t, x: (t - 75) * 8, y: 600))
        }
        let all = run(fixes).all
        #expect(all.allSatisfy { $0.verdict.rejection?.isOutlier != true }, "\(all.map { $0.verdict.decision.reason })")
    }

    @Test(arguments: [90.0, 120.0])
    func aSparseJumpAtALightIsNotDriving(jump: Double) {
        // North at 14 m/s without Doppler, a fix every 15 s wobbling by 3 m; the
        // car brakes to a stop 60 m past the seventh fix and waits there, too
        // briefly for the filter to call it parked. The tenth fix lands `jump` m
        // east. The steady track still drifts on at the speed before the
        // braking, so the fixes back at the light looked like a jump too, and
        // the held fix, out and back, like driving; standing still explains both.
        let fixes: [FilterInput] = (0..<14).map { (i: Int) -> FilterInput in
            let wobble = Double([1, -1, 0][i % 3]) * 3
            let y = i <= 6 ? Double(i) * 15 * 14 : 6 * 15 * 14 + 60
            return bare(Int64(i + 1), t: Double(i) * 15, x: (i == 9 ? jump : 0) + wobble, y: y + wobble)
        }
        let all = run(fixes).all
        #expect(all.map { $0.fix.seq } == (1...14).map(Int64.init), "one verdict per fix, in order")
        #expect(all.first { $0.fix.seq == 10 }?.verdict.decision.reason == "isolated_jump")
        #expect(all.filter { $0.fix.seq != 10 }.allSatisfy { $0.verdict.rejection?.isOutlier != true }, "\(all.map { $0.verdict.decision.reason })")
    }

    @Test(arguments: [5.0, 10.0])
    func theFirstFixAfterAGapWaitsForTheNextToo(every: Double) {
        // North at 12 m/s without Doppler, a fix every `every` seconds; a
        // two-minute gap (a tunnel), and the first fix out lands 150 m east,
        // the next ones on the road. Longer after the fix before it than the
        // look-ahead, it was judged at once against a prediction two minutes
        // wide, and taken; the device reports every few seconds, so it waits
        // for the next one now.
        var fixes: [FilterInput] = (0..<20).map { bare(Int64($0 + 1), t: Double($0) * every, x: Double([2, -2, 0][$0 % 3]), y: Double($0) * every * 12) }
        for i in 0..<10 {
            let t = 19 * every + 120 + Double(i) * every
            fixes.append(bare(Int64(21 + i), t: t, x: i == 0 ? 150 : Double([2, -2, 0][i % 3]), y: t * 12))
        }
        let all = run(fixes).all
        #expect(all.map { $0.fix.seq } == (1...30).map(Int64.init), "one verdict per fix, in order")
        #expect(all.first { $0.fix.seq == 21 }?.verdict.decision.reason == "isolated_jump")
        #expect(all.filter { $0.fix.seq != 21 }.allSatisfy { $0.verdict.rejection?.isOutlier != true }, "\(all.map { $0.verdict.decision.reason })")
    }

    /// North at 12 m/s with Doppler (or without), a fix a second (or
    /// `perSecond`), 10 m accuracy; 90 s dark (a tunnel); then fixes as
    /// often again. `offsets`: how far east each fix out of the tunnel lands
    /// (a reflection), by its index there.
    func outOfATunnel(offsets: [Int: Double], doppler: Bool = true, perSecond: Int = 1) -> [FilterInput] {
        func fix(_ seq: Int64, t: Double, x: Double) -> FilterInput {
            var fix = self.fix(seq, t: t, x: x, y: t * 12, east: 0, north: 12)
            fix.accuracyM = 10
            if !doppler { (fix.speedMps, fix.courseDeg) = (nil, nil) }
            return fix
        }
        let n = 20 * perSecond, step = 1 / Double(perSecond)
        let before = (0..<n).map { fix(Int64($0 + 1), t: Double($0) * step, x: 0) }
        let after = (0..<n).map { fix(Int64(n + 1 + $0), t: 19 + 90 + Double($0) * step, x: offsets[$0] ?? 0) }
        return before + after
    }

    /// Fixes `indices` out of the tunnel land about 350 m east, each a metre
    /// on from the one before: a burst of reflections that agree.
    func burstEast(_ indices: ClosedRange<Int>) -> [Int: Double] {
        Dictionary(uniqueKeysWithValues: indices.map { ($0, 350 + Double($0)) })
    }

    @Test func aReflectionAsTheFirstFixOutOfATunnelIsRejected() {
        // Judged against a prediction 90 s wide, the reflection was taken,
        // and the true fixes after it thrown away as too fast for seconds.
        // Held, it is the odd one out once those after it agree for as long as a burst lasts.
        let fixes = outOfATunnel(offsets: [0: 350])
        let alone = FilterCore.named(lookAheadMs: 0)
        #expect(run(fixes, core: alone).all.first { $0.fix.seq == 21 }?.verdict.point != nil, "the filter's own gates take the reflection")
        let (due, all) = run(fixes)
        #expect(all.map { $0.fix.seq } == (1...40).map(Int64.init), "one verdict per fix, in order")
        #expect(all.first { $0.fix.seq == 21 }?.verdict.decision.reason == "isolated_jump")
        #expect(all.filter { $0.fix.seq != 21 }.allSatisfy { $0.verdict.rejection?.isOutlier != true }, "\(all.map { $0.verdict.decision.reason })")
        // Held until the fixes after it had agreed among themselves for the burst window (8 s), not longer.
        #expect(due[20].isEmpty)
        #expect(due[28].isEmpty && due[29].map(\.fix.seq).first == 21, "\(due.map { $0.map(\.fix.seq) })")
    }

    @Test func aBurstOfTwoReflectionsOutOfATunnelIsRejected() {
        // The first two fixes out land 350 m east: the second could have
        // followed the first, the true fixes after them could not.
        let all = run(outOfATunnel(offsets: [0: 350, 1: 352])).all
        #expect(all.map { $0.fix.seq } == (1...40).map(Int64.init), "one verdict per fix, in order")
        #expect(all.filter { $0.fix.seq == 21 || $0.fix.seq == 22 }.allSatisfy { $0.verdict.point == nil }, "\(all.map { $0.verdict.decision.reason })")
        #expect(all.filter { $0.fix.seq > 22 }.allSatisfy { $0.verdict.rejection?.isOutlier != true }, "\(all.map { $0.verdict.decision.reason })")
    }

    /// The first fixes out land 350 m east, each following the one before.
    /// Three: taken once two had followed it, the first went through, and
    /// the true fixes after the burst were refused for a recovery's 10 s.
    /// Seven, a phone's multipath lasting seconds: three had followed it by
    /// 3 s, and it was taken. Twelve at 2 Hz (6 s): ten fixes ended the
    /// wait after 5 s, the burst was taken and the road after it refused
    /// for 10 s.
    @Test(arguments: [(3, 1), (7, 1), (12, 2)])
    func aBurstOfReflectionsOutOfATunnelIsRejected(length: Int, perSecond: Int) {
        let all = run(outOfATunnel(offsets: burstEast(0...(length - 1)), perSecond: perSecond)).all
        let first = Int64(20 * perSecond + 1), last = first + Int64(length) - 1
        #expect(all.map { $0.fix.seq } == (1...Int64(40 * perSecond)).map { $0 }, "one verdict per fix, in order")
        #expect(all.filter { (first...last).contains($0.fix.seq) }.allSatisfy { $0.verdict.point == nil }, "\(all.map { $0.verdict.decision.reason })")
        #expect(all.filter { $0.fix.seq > last }.allSatisfy { $0.verdict.rejection?.isOutlier != true }, "\(all.map { $0.verdict.decision.reason })")
    }

    @Test func aBurstOfEightRightAfterATrueFirstFixOutOfATunnelIsNotTheTrack() {
        // A true fix out, then eight reflections 350 m east, then the road.
        // No fix had followed the first when the burst reached 8 s after it,
        // and the burst made it the jump; lasting 7 s itself, it is a burst.
        let all = run(outOfATunnel(offsets: burstEast(1...8))).all
        #expect(all.map { $0.fix.seq } == (1...40).map(Int64.init), "one verdict per fix, in order")
        #expect(all.filter { $0.fix.seq == 21 || $0.fix.seq > 29 }.allSatisfy { $0.verdict.point != nil }, "\(all.map { $0.verdict.decision.reason })")
        #expect(all.filter { (22...29).contains($0.fix.seq) }.allSatisfy { $0.verdict.point == nil })
    }

    @Test func aReflectionAsTheFirstFixOutOfATunnelIsRejectedWithoutDoppler() {
        // A fix a second without Doppler: its first out of the tunnel, 350 m
        // east, met a prediction 90 s wide and was taken.
        let all = run(outOfATunnel(offsets: [0: 350], doppler: false)).all
        #expect(all.map { $0.fix.seq } == (1...40).map(Int64.init), "one verdict per fix, in order")
        #expect(all.first { $0.fix.seq == 21 }?.verdict.decision.reason == "isolated_jump", "\(all.map { $0.verdict.decision.reason })")
        #expect(all.filter { $0.fix.seq > 21 }.allSatisfy { $0.verdict.rejection?.isOutlier != true }, "\(all.map { $0.verdict.decision.reason })")
    }

    /// Its confirming fixes come a second apart: silent after it, the
    /// first fix out of a tunnel is judged alone after 10 s, not the
    /// look-ahead's 30 s.
    @Test func theFirstFixOutOfATunnelWaitsTenSecondsOfSilenceAtMost() {
        let core = FilterCore()
        var state = DeviceFilterState()
        for fix in outOfATunnel(offsets: [:]).prefix(21) { _ = core.submit(fix, state: &state) }
        #expect(state.lookAhead.held.map(\.seq) == [21])
        #expect(core.waitMs(state) == 10_000)
    }

    @Test func aBurstRightAfterTheFirstTrueFixesOutOfATunnelIsNotTheTrack() {
        // Three true fixes out, then seven reflections 350 m east (a phone's
        // burst lasts up to 8 s), then the road again. The burst is a burst's
        // length after the first fix before the road comes back, but it does
        // not last one itself, and the road then follows the first fix.
        let all = run(outOfATunnel(offsets: burstEast(3...9))).all
        #expect(all.map { $0.fix.seq } == (1...40).map(Int64.init), "one verdict per fix, in order")
        #expect(all.filter { (21...23).contains($0.fix.seq) || $0.fix.seq > 30 }.allSatisfy { $0.verdict.point != nil },
                "\(all.map { $0.verdict.decision.reason })")
        #expect(all.filter { (24...30).contains($0.fix.seq) }.allSatisfy { $0.verdict.point == nil })
    }

    @Test func aTrueFixThatCouldFollowANearReflectionGoesToTheFixesItFollowsCloser() {
        // Two reflections 60 m east, then the road. Six seconds on, a true fix
        // is within what could have followed the first reflection (both
        // accuracies twice, and the speed's change), and was counted for it:
        // the reflections were taken. The fixes it follows a second on fit it far closer.
        let all = run(outOfATunnel(offsets: [0: 60, 1: 61])).all
        #expect(all.map { $0.fix.seq } == (1...40).map(Int64.init), "one verdict per fix, in order")
        #expect(all.filter { $0.fix.seq == 21 || $0.fix.seq == 22 }.allSatisfy { $0.verdict.point == nil }, "\(all.map { $0.verdict.decision.reason })")
        #expect(all.filter { $0.fix.seq > 22 }.allSatisfy { $0.verdict.rejection?.isOutlier != true }, "\(all.map { $0.verdict.decision.reason })")
    }

    @Test func aSecondReflectionDoesNotHideTheTrackFromTheFirst() {
        // The first fix out lands 350 m east, the next 300 m west: a group
        // of its own, which the true fixes after it do not join.
        let all = run(outOfATunnel(offsets: [0: 350, 1: -300])).all
        #expect(all.first { $0.fix.seq == 21 }?.verdict.decision.reason == "isolated_jump", "\(all.map { $0.verdict.decision.reason })")
        #expect(all.first { $0.fix.seq == 22 }?.verdict.point == nil)
        #expect(all.filter { $0.fix.seq > 22 }.allSatisfy { $0.verdict.rejection?.isOutlier != true }, "\(all.map { $0.verdict.decision.reason })")
    }

    @Test func fixesTheGatesRefuseAreNoWitnessForAReflection() {
        // After the reflection, two fixes with accuracies past the ceiling:
        // twice both accuracies, they could follow anything.
        var fixes = outOfATunnel(offsets: [0: 350])
        for i in [21, 22] { fixes[i].accuracyM = 900 }
        let all = run(fixes).all
        #expect(all.first { $0.fix.seq == 21 }?.verdict.decision.reason == "isolated_jump", "\(all.map { $0.verdict.decision.reason })")
        #expect(all.filter { $0.fix.seq > 23 }.allSatisfy { $0.verdict.rejection?.isOutlier != true })
    }

    @Test func theFirstFixOutOfATunnelAloneBeforeSilenceIsTaken() {
        // Nothing after it to say otherwise: taken when the device falls silent (a fix with Doppler is never judged a jump alone).
        let fixes = Array(outOfATunnel(offsets: [0: 350]).prefix(21))
        let (due, all) = run(fixes)
        #expect(due[20].isEmpty, "held for the fixes after it")
        #expect(due.last!.map(\.fix.seq) == [21])
        #expect(all.first { $0.fix.seq == 21 }?.verdict.point != nil)
    }

    @Test func aTrueFirstFixOutOfATunnelIsTakenOnceFixesFollowItForABurstsLength() {
        // True fixes after it: decided with the first 8 s after it (a burst of reflections follows its own first fix that long).
        let plain = run(outOfATunnel(offsets: [:])).due
        #expect((20...27).allSatisfy { plain[$0].isEmpty } && plain[28].map(\.fix.seq) == Array(21...29), "\(plain.map { $0.map(\.fix.seq) })")
        #expect(plain.flatMap { $0 }.allSatisfy { $0.verdict.point != nil || $0.verdict.rejection?.isOutlier != true })
        // The next two are one reflection, 350 m east: it is taken with the true fixes after them.
        let all = run(outOfATunnel(offsets: [1: 350, 2: 352])).all
        #expect(all.first { $0.fix.seq == 21 }?.verdict.point != nil)
        #expect(all.filter { $0.fix.seq == 22 || $0.fix.seq == 23 }.allSatisfy { $0.verdict.point == nil })
        #expect(all.filter { $0.fix.seq > 23 }.allSatisfy { $0.verdict.rejection?.isOutlier != true }, "\(all.map { $0.verdict.decision.reason })")
    }

    /// A fix every `every` seconds with Doppler, 10 m accuracy: parked at
    /// the origin for ten fixes, 100 s dark (it drove off unseen), then north
    /// at 12 m/s from 600 m up the road. `offsets`: how far east each fix out
    /// of the silence lands (a reflection), by its index there; `ahead`: how
    /// far north of its place on the road.
    func sparseOutOfASilence(every: Double, offsets: [Int: Double], ahead: [Int: Double] = [:]) -> [FilterInput] {
        func fix(_ seq: Int64, t: Double, x: Double, y: Double, north: Double) -> FilterInput {
            var fix = self.fix(seq, t: t, x: x, y: y, east: 0, north: north)
            fix.accuracyM = 10
            return fix
        }
        let parked = (0..<10).map { fix(Int64($0 + 1), t: Double($0) * every, x: Double($0 % 2) * 3, y: 0, north: 0) }
        let out = 9 * every + 100
        let driving = (0..<8).map { i in
            fix(Int64(11 + i), t: out + Double(i) * every, x: offsets[i] ?? 0, y: 600 + Double(i) * every * 12 + (ahead[i] ?? 0), north: 12)
        }
        return parked + driving
    }

    @Test(arguments: [5.0, 10.0, 15.0])
    func aReflectionAsTheFirstFixOutOfASilenceFromASparseDeviceIsRejected(every: Double) {
        // The stories start from the stop, where the device no longer is:
        // nothing tells where it went while dark, and the reflection was
        // taken. Held, it is the odd one out once three fixes after it agree.
        let fixes = sparseOutOfASilence(every: every, offsets: [0: 350])
        let (due, all) = run(fixes)
        #expect(all.map { $0.fix.seq } == (1...18).map(Int64.init), "one verdict per fix, in order")
        #expect(all.first { $0.fix.seq == 11 }?.verdict.decision.reason == "isolated_jump", "\(all.map { $0.verdict.decision.reason })")
        #expect(all.filter { $0.fix.seq > 11 }.allSatisfy { $0.verdict.rejection?.isOutlier != true }, "\(all.map { $0.verdict.decision.reason })")
        // Decided with the third fix after it, not before.
        #expect(due[10...12].allSatisfy { $0.allSatisfy { $0.fix.seq < 11 } }, "\(due.map { $0.map(\.fix.seq) })")
        #expect(due[13].map(\.fix.seq).first == 11, "\(due.map { $0.map(\.fix.seq) })")
    }

    @Test(arguments: [5.0, 10.0, 15.0])
    func aTrueFirstFixOutOfASilenceFromASparseDeviceIsTaken(every: Double) {
        let all = run(sparseOutOfASilence(every: every, offsets: [:])).all
        #expect(all.map { $0.fix.seq } == (1...18).map(Int64.init), "one verdict per fix, in order")
        #expect(all.filter { $0.fix.seq > 10 }.allSatisfy { $0.verdict.point != nil }, "\(all.map { $0.verdict.decision.reason })")
    }

    @Test func aSparseWitnessGoesToWhatItFitsTheCloser() {
        // The first fix out lands 350 m east; of the three after it, the
        // last reports a speed without a course (no usable velocity). From
        // 30 s it could have followed the held fix as well as the fix before
        // it, which is a single interval back and fits it far closer.
        var fixes = sparseOutOfASilence(every: 10, offsets: [0: 350])
        fixes[13].courseDeg = nil
        fixes[13].speedMps = 1.2
        let all = run(fixes).all
        #expect(all.first { $0.fix.seq == 11 }?.verdict.decision.reason == "isolated_jump", "\(all.map { $0.verdict.decision.reason })")
        #expect(all.filter { $0.fix.seq > 11 }.allSatisfy { $0.verdict.rejection?.isOutlier != true }, "\(all.map { $0.verdict.decision.reason })")
        // The other way round: the first fix out is true, the next a
        // reflection 250 m east, the two after it without a course. They
        // could have followed the reflection too, but fit the held fix the
        // closer: it is taken.
        var creeping = sparseOutOfASilence(every: 10, offsets: [1: 250])
        for i in [12, 13] { creeping[i].courseDeg = nil; creeping[i].speedMps = 1.0 }
        let taken = run(creeping).all
        #expect(taken.first { $0.fix.seq == 11 }?.verdict.point != nil, "\(taken.map { $0.verdict.decision.reason })")
        #expect(taken.first { $0.fix.seq == 12 }?.verdict.point == nil, "\(taken.map { $0.verdict.decision.reason })")
        // A reflection 200 m ahead on the road, the two fixes after the next
        // without a course: driving on at their speed they fit the true fix
        // an interval back, not the reflection, however slow the way from
        // the reflection to them looks.
        var ahead = sparseOutOfASilence(every: 10, offsets: [:], ahead: [0: 200])
        for i in [12, 13] { ahead[i].courseDeg = nil }
        let judged = run(ahead).all
        #expect(judged.first { $0.fix.seq == 11 }?.verdict.decision.reason == "isolated_jump", "\(judged.map { $0.verdict.decision.reason })")
        #expect(judged.filter { $0.fix.seq > 11 }.allSatisfy { $0.verdict.rejection?.isOutlier != true }, "\(judged.map { $0.verdict.decision.reason })")
    }

    @Test func aDeviceSecondsApartThatLostFixesBeforeATunnelStillHasItsReflectionRejected() {
        // A fix a second, but the last four before the tunnel lost: its last
        // interval (5 s) is a sparse device's. Waiting for three fixes as a
        // sparse device does, a second apart they never spanned a burst's
        // length, and the reflection out of the tunnel was taken.
        var fixes = outOfATunnel(offsets: [0: 350])
        fixes.removeSubrange(15..<19)
        let all = run(fixes).all
        #expect(all.first { $0.fix.seq == 21 }?.verdict.decision.reason == "isolated_jump", "\(all.map { $0.verdict.decision.reason })")
        #expect(all.filter { $0.fix.seq > 21 }.allSatisfy { $0.verdict.rejection?.isOutlier != true }, "\(all.map { $0.verdict.decision.reason })")
    }

    @Test func fixesTheGatesRefuseAreNoWitnessesForASparseDevice() {
        // After the reflection out of a sparse silence, two true fixes, then
        // two past the accuracy ceiling: the wait goes on until a third
        // witness came (counting the poor ones, it ended with two, and the
        // reflection was taken).
        var fixes = sparseOutOfASilence(every: 10, offsets: [0: 350])
        for i in [13, 14] { fixes[i].accuracyM = 900 }
        let all = run(fixes).all
        #expect(all.first { $0.fix.seq == 11 }?.verdict.decision.reason == "isolated_jump", "\(all.map { $0.verdict.decision.reason })")
    }

    @Test func theLastFixBeforeSilenceIsJudgedAgainstTheWayBefore() {
        // North at 12 m/s without Doppler, a fix every 15 s; the last before the
        // device falls silent lands 300 m east. No fix after it to tell, it was
        // judged against the filter's own prediction, as wide as a turn, and
        // taken; the steady track says the road went straight on.
        var fixes: [FilterInput] = (0..<12).map { bare(Int64($0 + 1), t: Double($0) * 15, x: Double([3, -3, 0][$0 % 3]), y: Double($0) * 15 * 12) }
        fixes.append(bare(13, t: 12 * 15, x: 300, y: 12 * 15 * 12))
        let all = run(fixes).all
        #expect(all.map { $0.fix.seq } == (1...13).map(Int64.init), "one verdict per fix, in order")
        #expect(all.last?.verdict.decision.reason == "isolated_jump")
        #expect(all.dropLast().allSatisfy { $0.verdict.rejection?.isOutlier != true }, "\(all.map { $0.verdict.decision.reason })")
        // A turn before silence is taken: the last fix 90 m east of a road that bends there.
        var turning = Array(fixes.dropLast())
        turning.append(bare(13, t: 12 * 15, x: 90, y: 11 * 15 * 12 + 90))
        #expect(run(turning).all.last?.verdict.point != nil)
    }

    /// Parked at the origin, a fix every 15 s without Doppler, with a little drift.
    func parked(from seq: Int64, count: Int, startT: Double) -> [FilterInput] {
        (0..<count).map { (i: Int) -> FilterInput in
            let drift = (x: Double(i % 3) * 3, y: Double(i % 2) * 3)
            return bare(seq + Int64(i), t: startT + Double(i) * 15, x: drift.x, y: drift.y)
        }
    }

    @Test func aSparseJumpAtAStopIsNotADeparture() {
        // Twenty minutes parked; one fix lands 250 m away, the next is back at the stop.
        var fixes = parked(from: 1, count: 80, startT: 0)
        fixes.append(bare(81, t: 80 * 15, x: 250, y: 0))
        fixes += parked(from: 82, count: 10, startT: 81 * 15)
        let all = run(fixes).all
        #expect(all.map { $0.fix.seq } == (1...91).map(Int64.init))
        #expect(all.first { $0.fix.seq == 81 }?.verdict.decision.reason == "isolated_jump")
        // Nothing moved: no point left the stop.
        let far = all.compactMap { $0.verdict.point }.filter { p in
            let (x, y) = frame.toLocal(lat: p.latitude, lon: p.longitude)
            return hypot(x, y) > 30
        }
        #expect(far.isEmpty, "\(far.map(\.seq))")
    }

    @Test func aSparseDepartureFromAStopIsTaken() {
        // Parked, then off north at 10 m/s: the first fix away is held, and the next confirms it.
        var fixes = parked(from: 1, count: 80, startT: 0)
        for i in 0..<6 { fixes.append(bare(Int64(81 + i), t: Double(80 + i) * 15, x: 0, y: Double(i + 1) * 150)) }
        let all = run(fixes).all
        #expect(all.filter { $0.fix.seq > 80 }.allSatisfy { $0.verdict.point != nil }, "\(all.filter { $0.fix.seq > 80 }.map { $0.verdict.decision.reason })")
    }

    @Test func aLoneFixAwayFromAStopThenSilenceIsNotADeparture() {
        // The last fix before the device falls silent lands 250 m from the stop: with no
        // fix after it to confirm a departure, it counts as the stop's drift.
        var fixes = parked(from: 1, count: 80, startT: 0)
        fixes.append(bare(81, t: 80 * 15, x: 250, y: 0))
        let all = run(fixes).all
        let last = all.first { $0.fix.seq == 81 }!
        #expect(last.verdict.point == nil)
        #expect(last.verdict.decision.reason == "stationary_drift")
    }

    /// Once the filter runs; the first fix, which starts it, waits for
    /// fixes that could have followed it over 8 s (`comesOutOfSilence`).
    @Test func fixesASecondApartAreJudgedAtOnce() {
        let fixes = northbound(every: 1, count: 30)
        let (due, _) = run(fixes)
        #expect((0...7).allSatisfy { due[$0].isEmpty })
        #expect(due[8].map { $0.fix.seq } == Array(1...9))
        for (i, verdicts) in due.dropLast().enumerated().dropFirst(9) { #expect(verdicts.map { $0.fix.seq } == [Int64(i + 1)]) }
        #expect(due.last!.isEmpty)
    }

    /// `lookAheadSec` may be set below the 4 s from which a device counts
    /// as sparse: a fix without Doppler every 10 s then trapped on a range
    /// whose bounds were the wrong way round.
    @Test func aLookAheadShorterThanASparseIntervalJudgesEveryFix() {
        let fixes = (0..<10).map { bare(Int64($0 + 1), t: Double($0) * 10, x: 0, y: Double($0) * 120) }
        #expect(run(fixes, core: .named(lookAheadMs: 2_000)).all.map { $0.fix.seq } == (1...10).map(Int64.init))
    }

    @Test func aHeldFixSurvivesTheStateBeingSaved() throws {
        var state = DeviceFilterState()
        let core = FilterCore()
        for f in northbound(count: 4) { _ = core.submit(f, state: &state) }
        #expect(state.lookAhead.held.first?.seq == 4)
        var restored = try JSONDecoder().decode(DeviceFilterState.self, from: JSONEncoder().encode(state))
        #expect(restored == state)
        #expect(core.flush(state: &restored).map { $0.fix.seq } == [4])
        #expect(restored.lookAhead.held.isEmpty)
    }

    @Test func twoHeldFixesSurviveTheStateBeingSaved() throws {
        let fixes = jumpAfterAPoorFix(count: 10)
        var state = DeviceFilterState()
        let core = FilterCore()
        for f in fixes.prefix(9) { _ = core.submit(f, state: &state) }
        #expect(state.lookAhead.held.map(\.seq) == [8, 9])
        var restored = try JSONDecoder().decode(DeviceFilterState.self, from: JSONEncoder().encode(state))
        #expect(restored == state)
        let due = core.submit(fixes[9], state: &restored) + core.flush(state: &restored)
        #expect(due.first { $0.fix.seq == 8 }?.verdict.decision.reason == "isolated_jump")
        #expect(due.map(\.fix.seq).suffix(3) == [8, 9, 10])
        #expect(restored.lookAhead.held.isEmpty)
    }

    @Test func aProfileWithoutLookAheadJudgesEveryFixAtOnce() {
        let fixes = northbound(jumpAt: 5)
        let (due, all) = run(fixes, core: FilterCore.named(lookAheadMs: 0))
        #expect(due.dropLast().allSatisfy { $0.count == 1 })
        #expect(all.allSatisfy { $0.verdict.decision.reason != "isolated_jump" })
    }
}

extension FilterCore {
    /// The balanced profile with another look-ahead.
    static func named(lookAheadMs: Int64) -> FilterCore {
        var profile = FilterProfile.named(.balanced)
        profile.lookAheadMs = lookAheadMs
        return FilterCore(profile: profile)
    }
}
