import FilterCore
import Foundation
import Model
import MotionCore
import TestSupport

/// `tracker-bench motion-loop`: what feeding the motion machine's state back
/// into the filter (as the motion service will, on `tracker/{d}/motion`)
/// does to the filter's output, recording by recording — measured before
/// that loop is switched on.
enum MotionLoop {
    static func run() throws {
        let truth = try Fixtures.fixes("mtv-drive-truth.jsonl")
        for seed: UInt64 in [1, 2, 3] {
            let samples = NoiseGenerator(seed: seed).apply(to: truth)
            report("mtv seed \(seed)", samples.map(\.fix), truthLength: Geodesy.pathLength(truth.map { ($0.lat, $0.lon) }))
        }
        for name in ["city-run.jsonl", "munich-drive.jsonl", "pixel6-walk.jsonl"] {
            report(name, try Fixtures.fixes(name), truthLength: nil)
        }
    }

    static func report(_ label: String, _ fixes: [DeviceFix], truthLength: Double?) {
        let alone = judge(fixes, loop: false), looped = judge(fixes, loop: true)
        let truth = truthLength.map { String(format: " (truth %.0f m)", $0) } ?? ""
        print(String(format: "%@: filter alone %.0f m, %d points; with motion fed back %.0f m, %d points, %d motion changes%@",
                     label as NSString, alone.odometer, alone.points, looped.odometer, looped.points, looped.changes, truth as NSString))
    }

    /// The filter over the fixes; with `loop`, each accepted point goes to the
    /// motion machine and its `moving`/`stationary` back to the filter.
    static func judge(_ fixes: [DeviceFix], loop: Bool) -> (odometer: Double, points: Int, changes: Int) {
        let filter = FilterCore(), motion = MotionCore(rules: MotionRules())
        var state = DeviceFilterState(), row = MotionRow()
        var points = 0, changes = 0
        for (i, fix) in fixes.enumerated() {
            guard let point = filter.judge(FilterInput(fix, seq: Int64(i + 1)), state: &state).point else { continue }
            points += 1
            guard loop else { continue }
            for case .state(let s, let timeMs, _) in motion.handle(point: point, row: &row) {
                changes += 1
                filter.noteMotion(s, timeMs: timeMs, state: &state)
            }
        }
        return (state.odometerM, points, changes)
    }
}
