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
        try latencies(truth)
    }

    /// Transition latency on the survey drive with phone noise, the states
    /// fed back as the service does: for every true stop of a minute or more
    /// (a one-minute stop timeout: the drive's stops are one to two minutes),
    /// when it settled against arrival + timeout, and how soon after the true
    /// departure it was moving again.
    static func latencies(_ truth: [DeviceFix]) throws {
        var rules = MotionRules()
        rules.stopTimeoutMs = 60_000
        rules.stopPendingAfterMs = 20_000
        var stops: [(start: Int64, end: Int64)] = []
        var start: Int64?
        for f in truth {
            if (f.speed ?? 0) < 0.3 { start = start ?? f.timeMs } else if let s = start { if f.timeMs - s >= 60_000 { stops.append((s, f.timeMs)) }; start = nil }
        }
        // The drive starts parked: that stand is the first point's state, not a stop to settle.
        let parkedAtStart = stops.first.map { $0.start == truth[0].timeMs } ?? false
        let settling = parkedAtStart ? Array(stops.dropFirst()) : stops
        for seed: UInt64 in 1...5 {
            let filter = FilterCore(), motion = MotionCore(rules: rules)
            var state = DeviceFilterState(), row = MotionRow(), seen: [(MotionState, Int64)] = []
            for (i, sample) in NoiseGenerator(seed: seed).apply(to: truth).enumerated() {
                guard let point = filter.judge(FilterInput(sample.fix, seq: Int64(i + 1)), state: &state).point else { continue }
                for case .state(let s, let t, _) in motion.handle(point: point, row: &row) {
                    seen.append((s, t))
                    filter.noteMotion(s, timeMs: t, state: &state)
                }
            }
            let settle = settling.map { stop in
                seen.first { $0.0 == .stationary && $0.1 >= stop.start && $0.1 <= stop.end + 60_000 }
                    .map { String(format: "%+.0f", Double($0.1 - stop.start - rules.stopTimeoutMs) / 1000) } ?? "never"
            }
            let depart = stops.map { stop in
                seen.first { $0.0 == .moving && $0.1 >= stop.end - 5_000 }.map { String(format: "%.0f", Double($0.1 - stop.end) / 1000) } ?? "never"
            }
            print("mtv seed \(seed), \(settling.count) stops of a minute or more after the start: settled \(settle.joined(separator: ", ")) s from "
                  + "arrival + timeout (target −60…+30); moving \(depart.joined(separator: ", ")) s after the true departures, the start's included (target ≤ 60)")
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
