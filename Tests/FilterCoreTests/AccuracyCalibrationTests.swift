@testable import FilterCore
import Foundation
import Model
import TestSupport
import Testing

/// An accuracy that says nothing (the same value on every fix) is judged
/// by what the innovations show it is worth (`AccuracyCalibration`).
@Suite struct AccuracyCalibrationTests {
    /// `count` fixes reporting `reportedM`, their innovations `truth` times
    /// what the scale in use predicts (χ² with two degrees of freedom, as a
    /// calibrated filter's are), each learned as the gate would.
    func calibrated(reportedM: Double = 10, truth: Double, count: Int, seed: UInt64 = 3) -> AccuracyCalibration {
        var rng = SeededRandom(seed: seed)
        var calibration = AccuracyCalibration()
        for _ in 0..<count {
            calibration.note(reportedM: reportedM)
            let applied = calibration.scale(inflation: 1)
            let (e, n) = (rng.gaussian(), rng.gaussian())
            let mahalanobis = (e * e + n * n).squareRoot() * truth / applied
            calibration.learn(mahalanobis: mahalanobis, gate: 3.5, reportedM: reportedM, judgedWith: applied)
        }
        return calibration
    }

    @Test(arguments: [0.5, 1, 2.5, 5])
    func errorsAFractionOrSeveralTimesTheReportedAccuracyAreLearned(_ truth: Double) {
        let scale = calibrated(truth: truth, count: 600).scale(inflation: 1)
        #expect(abs(scale / truth - 1) < 0.2, "learned \(scale) for \(truth)")
    }

    @Test func nothingIsUsedBeforeAMinuteOfOneAccuracy() {
        #expect(calibrated(truth: 3, count: AccuracyCalibration.constantAfter - 1).scale(inflation: 1) == 1)
        #expect(calibrated(truth: 3, count: AccuracyCalibration.constantAfter).scale(inflation: 1) > 2)
    }

    @Test func anAccuracyThatChangesIsTakenAsReported() {
        var calibration = AccuracyCalibration()
        for i in 0..<600 {
            calibration.note(reportedM: i.isMultiple(of: 2) ? 10 : 11)
            calibration.learn(mahalanobis: 10, gate: 3.5, reportedM: i.isMultiple(of: 2) ? 10 : 11, judgedWith: 1)
        }
        #expect(calibration.scale(inflation: 1) == 1)
    }

    @Test func aReflectionWeighsNoMoreThanAFixTwiceTheGateOut() {
        var calibration = calibrated(truth: 1, count: 300)
        let before = calibration.scale(inflation: 1)
        calibration.learn(mahalanobis: 1e9, gate: 3.5, reportedM: 10, judgedWith: before)
        // One of the memory's 50 innovations, capped at 7σ: ln(49 / 1.12) / 50 on ln k².
        #expect(calibration.scale(inflation: 1) / before < 1.05)
    }

    @Test func theScaleStaysWhereTheFilterFloorStillMoves() {
        // 1 m reported is σ 0.67 m, under the filter's 2 m floor: a scale under 3 would change nothing.
        let scale = calibrated(reportedM: 1, truth: 0.1, count: 600).scale(inflation: 1)
        #expect(abs(scale - 3) < 0.01, "\(scale)")
    }

    /// Under 0.3 m reported even ten times it is under the 2 m floor: the
    /// learning kept a range whose lower end passed its upper, and trapped
    /// (a survey receiver's constant 0.02 m crashed the filter at its 61st fix).
    @Test(arguments: [0.29, 0.02, 1e-9])
    func anAccuracyUnderTheFloorEvenTenTimesOverIsLearnedWithoutATrap(_ reportedM: Double) {
        let scale = calibrated(reportedM: reportedM, truth: 1, count: 200).scale(inflation: 1)
        #expect(scale == AccuracyCalibration.scaleRange.upperBound)
    }

    @Test func persistingErrorsRaiseTheScaleByTheRootOfTheirInflation() {
        let calibration = calibrated(truth: 1, count: 600)
        #expect(abs(calibration.scale(inflation: 4) / calibration.scale(inflation: 1) - 2) < 1e-9)
        // Within its range whatever the inflation.
        #expect(calibrated(truth: 8, count: 600).scale(inflation: 19) == AccuracyCalibration.scaleRange.upperBound)
    }

    @Test func aHeldFixOfTheRunBeforeSaysNothingOfTheNewOne() {
        var calibration = calibrated(truth: 1, count: 300)
        calibration.note(reportedM: 30)
        calibration.learn(mahalanobis: 100, gate: 3.5, reportedM: 10, judgedWith: 1)
        #expect(calibration.weight == 0 && calibration.logScaleSquared == 0)
    }

    @Test func anInvalidAccuracyLeavesTheRunAsItWas() {
        var state = DeviceFilterState()
        for i in 0..<100 { _ = FilterCore().calibrated(FilterInput(seq: Int64(i), sessionID: nil, timeMs: 0, latitude: 1, longitude: 1, accuracyM: 10), state: &state) }
        let before = state.kalman.calibration
        for bad in [Double.nan, -1, .infinity] {
            _ = FilterCore().calibrated(FilterInput(seq: 100, sessionID: nil, timeMs: 0, latitude: 1, longitude: 1, accuracyM: bad), state: &state)
        }
        #expect(state.kalman.calibration == before)
    }

    /// The sweep's default noise (accuracy wandering 5–65 m) with every fix
    /// saying 10 m, as a source without an accuracy does, and a good phone
    /// (errors 2–10 m) saying 0 (unknown, read as 30 m); the sweep's first
    /// twenty seeds, without Doppler. Judged by what they report, the first
    /// came out 25.7 % long with 7,536 clean fixes refused, the second
    /// 11.2 % short, its error 1.51 × the clean fixes' own.
    @Test func aSourceWithoutAnAccuracyIsJudgedByItsErrors() throws {
        let saysTen = try sweepScores(NoiseVariant("says 10 m", withSpeed: false, reportedAccuracy: 10), seeds: 20)
        let odometers = saysTen.map(\.odometerError)
        let mean = odometers.reduce(0, +) / Double(odometers.count)
        #expect(abs(mean) < 0.03, "mean odometer \(mean)")
        #expect(odometers.allSatisfy { abs($0) < 0.08 }, "\(odometers)")
        let refused = saysTen.cleanFixesRefused
        #expect(refused < 1_500, "clean fixes refused: \(refused)")

        let goodPhone = try sweepScores(NoiseVariant("good phone says 0", correlation: 0.9, jumpProbability: 0.01, withSpeed: false,
                                                     jumpBurst: 3...8, accuracyRange: 3...15, reportedAccuracy: 0), seeds: 20)
        let rmse = goodPhone.map(\.rmseRatio).reduce(0, +) / Double(goodPhone.count)
        let phoneOdometer = goodPhone.map(\.odometerError).reduce(0, +) / Double(goodPhone.count)
        #expect(rmse < 1.15, "mean RMSE ratio \(rmse)")
        #expect(phoneOdometer > -0.07, "mean odometer \(phoneOdometer)")
    }

    /// The fixes judged, as the service judges them (look-ahead and lag).
    func judged(_ variant: NoiseVariant, seed: UInt64 = 7919) throws -> (judged: [Judged], state: DeviceFilterState) {
        let (samples, _) = variant.apply(to: try Fixtures.fixes("mtv-drive-truth.jsonl"), seed: seed)
        var state = DeviceFilterState()
        let judged = FilterCore().judgeRecording(inputs(samples.map(\.fix)), state: &state)
        #expect(judged.count == samples.count)
        return (judged, state)
    }

    /// A phone's accuracy, which moves from fix to fix, is never rescaled;
    /// nor one that stays the same from a device reporting every 5 s: its
    /// fixes are too far apart to tell its errors from its turns.
    @Test func anAccuracyThatMovesOrFixesSecondsApartAreJudgedAsReported() throws {
        #expect(try judged(NoiseVariant("default", withSpeed: false)).judged.allSatisfy { $0.fix.accuracyScale == nil })
        let sparse = try judged(NoiseVariant("says 10 m every 5 s", every: 5, withSpeed: false, reportedAccuracy: 10))
        #expect(sparse.judged.allSatisfy { $0.fix.accuracyScale == nil })
    }

    /// A survey receiver reporting 0.02 m on every fix: judged through the
    /// whole drive (the learning trapped at the 61st fix, taking the filter
    /// down with every fix of the device redelivered).
    @Test func aReceiverReportingCentimetresIsJudgedThroughTheDrive() throws {
        let (judged, state) = try judged(NoiseVariant("says 2 cm", withSpeed: false, reportedAccuracy: 0.02))
        #expect(judged.count > 1_000)
        #expect(state.kalman.accuracyScale == AccuracyCalibration.scaleRange.upperBound, "\(state.kalman.accuracyScale)")
    }

    /// `judge` (no look-ahead) calibrates as `submit` does.
    @Test func judgingAtOnceCalibratesToo() throws {
        let (samples, _) = NoiseVariant("says 10 m", withSpeed: false, reportedAccuracy: 10)
            .apply(to: try Fixtures.fixes("mtv-drive-truth.jsonl"), seed: 7919)
        let (_, state) = judgeAll(inputs(samples.map(\.fix)))
        #expect(state.kalman.accuracyScale > 1.5, "\(state.kalman.accuracyScale)")
    }

    /// The accuracy ceiling is a rule on what the device reports: a device
    /// saying 40 m whose errors are three times that is judged with more
    /// than the balanced profile's 100 m ceiling, and no fix is refused for it.
    @Test func theCeilingReadsTheReportedAccuracy() {
        var rng = SeededRandom(seed: 11)
        let frame = LocalFrame(originLat: 48.1, originLon: 11.5), sigma = 3 * 40 / 1.5
        let fixes = (0..<400).map { i -> FilterInput in
            let (lat, lon) = frame.toGeo(x: sigma * rng.gaussian(), y: Double(i) * 15 + sigma * rng.gaussian())
            return FilterInput(seq: Int64(i + 1), sessionID: "s", timeMs: 1_700_000_000_000 + Int64(i) * 1_000, latitude: lat, longitude: lon, accuracyM: 40)
        }
        var state = DeviceFilterState()
        let judged = FilterCore().judgeRecording(fixes, state: &state)
        #expect(judged.contains { ($0.fix.accuracyScale ?? 1) * 40 > 100 }, "\(state.kalman.accuracyScale)")
        #expect(!judged.contains { $0.verdict.rejection == .accuracyTooLow })
        // What the decision log and the points say of the fix is what it reported.
        #expect(judged.allSatisfy { $0.fix.accuracyM == 40 })
    }
}
