import Foundation
import Model
import TestSupport

/// `tracker-bench demo-recording DIR`: writes the demo's recording and its
/// fences (`demo-drive.jsonl`, `demo-fences.jsonl`), derived from the
/// survey-grade drive with the seeded phone noise of the benchmarks:
/// - a delivery stop made seven minutes long (long enough for the motion
///   service's default five-minute stop timeout), where the "customer"
///   fence dwells;
/// - eleven minutes dark that resume a minute of driving further on (a
///   tracking gap), besides the generator's 90 s tunnel;
/// - fences around the depot (the start), the customer and a checkpoint
///   after the gap.
enum DemoRecording {
    /// The true stop (464–552 s into the drive) that becomes the delivery.
    static let stopAt = 470.0, stopExtraSec = 330.0
    /// Dropped (a minute of driving), then dark for `darkSec` in all.
    static let dropFrom = 1_100.0, dropSec = 60.0, darkSec = 660.0
    /// Where the checkpoint fence sits: the truth this far into the drive.
    static let checkpointAt = 1_400.0

    static func write(to directory: String) throws {
        let truth = try Fixtures.fixes("mtv-drive-truth.jsonl")
        let t0 = truth[0].t
        // The longer stop: the truth held still at the stop for extra seconds.
        let stop = truth.first { $0.t - t0 >= stopAt }!
        var extended: [DeviceFix] = []
        for fix in truth {
            if fix.t == stop.t {
                for i in 0..<Int(stopExtraSec) {
                    extended.append(DeviceFix(t: fix.t + Double(i), lat: stop.lat, lon: stop.lon, acc: stop.acc, speed: 0, course: stop.course))
                }
            }
            var shifted = fix
            if fix.t >= stop.t { shifted.t += stopExtraSec }
            extended.append(shifted)
        }
        // Phone noise, then the dark stretch cut out of the noisy fixes.
        let noisy = NoiseGenerator(seed: 1).apply(to: extended).map(\.fix)
        let cutFrom = t0 + dropFrom + stopExtraSec, cutTo = cutFrom + dropSec
        var fixes: [DeviceFix] = []
        for fix in noisy where !(cutFrom..<cutTo).contains(fix.t) {
            var fix = fix
            if fix.t >= cutTo { fix.t += darkSec - dropSec }
            fixes.append(fix)
        }
        let lines = fixes.map(line)
        try (lines.joined(separator: "\n") + "\n").write(toFile: directory + "/demo-drive.jsonl", atomically: true, encoding: .utf8)

        let checkpoint = truth.first { $0.t - t0 >= checkpointAt }!
        let fences = [
            Geofence(id: "depot", latitude: truth[0].lat, longitude: truth[0].lon, radiusM: 120),
            Geofence(id: "customer", latitude: stop.lat, longitude: stop.lon, radiusM: 100, dwellAfterMs: 120_000),
            Geofence(id: "checkpoint", latitude: checkpoint.lat, longitude: checkpoint.lon, radiusM: 100),
        ]
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        let fenceLines = try fences.map { String(decoding: try encoder.encode($0), as: UTF8.self) }
        try (fenceLines.joined(separator: "\n") + "\n").write(toFile: directory + "/demo-fences.jsonl", atomically: true, encoding: .utf8)

        let before = fixes.last { $0.t < cutFrom }!, after = fixes.first { $0.t >= cutFrom }!
        print(String(format: "wrote %d fixes over %.0f min: a %.0f s stop at the customer, %.0f s dark resuming %.0f m away; %d fences",
                     fixes.count, (fixes.last!.t - fixes[0].t) / 60, stopExtraSec + 88, after.t - before.t,
                     Geodesy.distance(before.lat, before.lon, after.lat, after.lon), fences.count))
    }

    /// A fix as a recording's line: whole seconds, 7 decimals (~1 cm), the fields it has.
    static func line(_ fix: DeviceFix) -> String {
        var line = String(format: #"{"t":%.0f,"lat":%.7f,"lon":%.7f,"acc":%.1f"#, fix.t, fix.lat, fix.lon, fix.acc)
        if let speed = fix.speed { line += String(format: #","speed":%.2f"#, speed) }
        if let course = fix.course { line += String(format: #","course":%.1f"#, course) }
        return line + "}"
    }
}
