import FilterCore
import Foundation
import Model
import Testing

/// One fix of look-ahead for sparse fixes: a jump is told from a turn by
/// where the device is at the next fix.
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

    @Test func fixesASecondApartAreJudgedAtOnce() {
        let fixes = northbound(every: 1, count: 30)
        let (due, _) = run(fixes)
        for (i, verdicts) in due.dropLast().enumerated() { #expect(verdicts.map { $0.fix.seq } == [Int64(i + 1)]) }
        #expect(due.last!.isEmpty)
    }

    @Test func aHeldFixSurvivesTheStateBeingSaved() throws {
        var state = DeviceFilterState()
        let core = FilterCore()
        for f in northbound(count: 3) { _ = core.submit(f, state: &state) }
        #expect(state.pending?.seq == 3)
        var restored = try JSONDecoder().decode(DeviceFilterState.self, from: JSONEncoder().encode(state))
        #expect(restored == state)
        #expect(core.flush(state: &restored).map { $0.fix.seq } == [3])
        #expect(restored.pending == nil)
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
