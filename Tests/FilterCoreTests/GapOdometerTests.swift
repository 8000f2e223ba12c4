import FilterCore
import Foundation
import Model
import Testing

/// A tracking gap counts its straight line: nothing tells the way the device
/// went while it was dark, and a curve with tangents scaled by the whole gap
/// loops far off it (a 15-minute gap came out 37 % long).
@Suite struct GapOdometerTests {
    static let metresPerDegreeLat = 111_195.0
    static let metresPerDegreeLon = 111_195.0 * cos(48.1 * .pi / 180)

    func fix(_ t: Double, north: Double, east: Double, speed: Double, course: Double) -> DeviceFix {
        DeviceFix(t: 1_790_000_000 + t, lat: 48.1 + north / Self.metresPerDegreeLat, lon: 11.5 + east / Self.metresPerDegreeLon,
                  acc: 4, speed: speed, course: course)
    }

    // 600 s: exactly the track's tracking gap, which the odometer must count as one too.
    @Test(arguments: [900.0, 600.0, 300.0, 150.0])
    func aGapCountsItsStraightLine(gapSec: Double) {
        // North at 2.4 m/s for a minute; dark; then 2,135 m east, driving south at the same speed.
        let before = (0..<60).map { fix(Double($0), north: Double($0) * 2.4, east: 0, speed: 2.4, course: 0) }
        let resume = 59 + gapSec
        let after = (0..<60).map { fix(resume + Double($0), north: 141.6 - Double($0) * 2.4, east: 2_135, speed: 2.4, course: 180) }
        var state = DeviceFilterState()
        let core = FilterCore()
        let published = inputs(before + after).compactMap { core.judge($0, state: &state).point }
        let lastBefore = published.last { Double($0.timeMs) / 1000 < 1_790_000_000 + resume }
        let firstAfter = published.first { Double($0.timeMs) / 1000 >= 1_790_000_000 + resume }
        guard let lastBefore, let firstAfter else { Issue.record("no points either side of the gap"); return }
        let north = (firstAfter.latitude - lastBefore.latitude) * Self.metresPerDegreeLat
        let east = (firstAfter.longitude - lastBefore.longitude) * Self.metresPerDegreeLon
        let line = hypot(north, east)
        let counted = firstAfter.odometerM - lastBefore.odometerM
        #expect(abs(counted / line - 1) <= 0.01, "the \(Int(gapSec)) s gap counted \(Int(counted)) m; its straight line is \(Int(line)) m")
    }
}
