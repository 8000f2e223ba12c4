import FilterCore
import Foundation
import Model
import TestSupport

/// `tracker-bench trace FILE`: every verdict of the filter on one recording,
/// one line per fix, for looking at what it did and why.
enum Trace {
    private struct TruthSpeed: Decodable { var truthSpeed: Double? }

    static func run(path: String) throws {
        let url = path.contains("/") ? URL(fileURLWithPath: path) : Fixtures.url(path)
        let lines = try String(contentsOf: url, encoding: .utf8).split(separator: "\n")
        let fixes = try lines.map { try JSONDecoder().decode(DeviceFix.self, from: Data($0.utf8)) }
        // Recordings written by `sweep` (SWEEP_DUMP) carry the truth's speed.
        let truthSpeeds = lines.map { line in
            (try? JSONDecoder().decode(TruthSpeed.self, from: Data(line.utf8)))?.truthSpeed
        }
        let core = FilterCore()
        var state = DeviceFilterState()
        guard let t0 = fixes.first?.t else { return }
        // As the service judges: a verdict may come a fix (look-ahead) or ten
        // seconds (smoothing lag) after its fix; each line is printed when it comes.
        func show(_ due: [Judged]) {
            for judged in due {
                let i = Int(judged.fix.seq) - 1, f = fixes[i], v = judged.verdict
                let e = v.decision.estimate
                let truth = truthSpeeds[i].map { String(format: " truth %.1f", $0) } ?? ""
                print(String(format: "%4d %7.1f acc %5.1f  %-18@ measured %8.1f limit %7.1f  est %.6f,%.6f ±%.0f v %.1f  odo %.0f",
                             i, f.t - t0, f.acc, v.decision.reason as NSString, v.decision.measured ?? .nan, v.decision.limit ?? .nan,
                             e?.latitude ?? .nan, e?.longitude ?? .nan, e?.accuracyM ?? .nan, e?.speedMps ?? .nan, state.odometerM) + truth + "  trend " + state.trend.summary)
            }
        }
        for (i, f) in fixes.enumerated() {
            show(core.submit(FilterInput(f, seq: Int64(i + 1)), arrivingAfter: i > 0 ? fixes[i - 1].timeMs : nil, state: &state))
        }
        show(core.flush(state: &state))
    }
}
