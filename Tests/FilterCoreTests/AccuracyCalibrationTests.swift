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
            calibration.learn(mahalanobis: mahalanobis, gate: 3.5, applied: applied)
        }
        return calibration
    }

    @Test(arguments: [0.3, 1, 2.5])
    func errorsSeveralTimesTheReportedAccuracyAreLearned(_ truth: Double) {
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
            calibration.learn(mahalanobis: 10, gate: 3.5, applied: 1)
        }
        #expect(calibration.scale(inflation: 1) == 1)
    }

    @Test func aReflectionWeighsNoMoreThanAFixTwiceTheGateOut() {
        var calibration = calibrated(truth: 1, count: 300)
        let before = calibration.scale(inflation: 1)
        calibration.learn(mahalanobis: 1e9, gate: 3.5, applied: before)
        // One of the memory's 50 innovations, capped at 7σ: ln(49 / 1.12) / 50 on ln k².
        #expect(calibration.scale(inflation: 1) / before < 1.05)
    }

    @Test func theScaleStaysWhereTheFilterFloorStillMoves() {
        // 1 m reported is σ 0.67 m, under the filter's 2 m floor: a scale under 3 would change nothing.
        let scale = calibrated(reportedM: 1, truth: 0.1, count: 600).scale(inflation: 1)
        #expect(abs(scale - 3) < 0.01, "\(scale)")
    }

    @Test func persistingErrorsRaiseTheScaleByTheRootOfTheirInflation() {
        let calibration = calibrated(truth: 1, count: 600)
        #expect(abs(calibration.scale(inflation: 4) / calibration.scale(inflation: 1) - 2) < 1e-9)
    }

    /// The sweep's default noise (accuracy wandering 5–65 m) with every fix
    /// saying 10 m, as a source without an accuracy does, and a good phone
    /// (errors 2–10 m) saying 0 (unknown, read as 30 m); the sweep's first
    /// twenty seeds, without Doppler. Judged by what they report, the first
    /// came out 26 % long (worst seed 54 %) with a quarter of its clean fixes
    /// refused, the second 11 % short, its error 1.36 × the clean fixes' own.
    @Test func aSourceWithoutAnAccuracyIsJudgedByItsErrors() throws {
        let saysTen = try sweepScores(NoiseVariant("says 10 m", withSpeed: false, reportedAccuracy: 10), seeds: 20)
        let odometers = saysTen.map(\.odometerError)
        let mean = odometers.reduce(0, +) / Double(odometers.count)
        #expect(abs(mean) < 0.03, "mean odometer \(mean)")
        #expect(odometers.allSatisfy { abs($0) < 0.08 }, "\(odometers)")
        let refused = saysTen.reduce(0) { $0 + $1.cleanRejectedAsOutliers }
        #expect(refused < 1_500, "clean fixes refused: \(refused)")

        let goodPhone = try sweepScores(NoiseVariant("good phone says 0", correlation: 0.9, jumpProbability: 0.01, withSpeed: false,
                                                     jumpBurst: 3...8, accuracyRange: 3...15, reportedAccuracy: 0), seeds: 20)
        let rmse = goodPhone.map(\.rmseRatio).reduce(0, +) / Double(goodPhone.count)
        let phoneOdometer = goodPhone.map(\.odometerError).reduce(0, +) / Double(goodPhone.count)
        #expect(rmse < 1.15, "mean RMSE ratio \(rmse)")
        #expect(phoneOdometer > -0.07, "mean odometer \(phoneOdometer)")
    }

    /// A phone's accuracy, which moves from fix to fix, is never rescaled:
    /// every fix is judged as reported.
    @Test func anAccuracyThatMovesIsJudgedAsReported() throws {
        let truth = try Fixtures.fixes("mtv-drive-truth.jsonl")
        let (samples, _) = NoiseVariant("default", withSpeed: false).apply(to: truth, seed: 7919)
        var state = DeviceFilterState()
        let judged = FilterCore().judgeRecording(inputs(samples.map(\.fix)), state: &state)
        #expect(judged.count == samples.count)
        #expect(judged.allSatisfy { $0.fix.accuracyScale == nil })
    }

    /// The point's `measured` reading is what the device reported, whatever it was judged with.
    @Test func theReadingStaysAsReported() throws {
        let truth = try Fixtures.fixes("mtv-drive-truth.jsonl")
        let (samples, _) = NoiseVariant("says 10 m", withSpeed: false, reportedAccuracy: 10).apply(to: truth, seed: 7919)
        var state = DeviceFilterState()
        let judged = FilterCore().judgeRecording(inputs(samples.map(\.fix)), state: &state)
        #expect(judged.contains { ($0.fix.accuracyScale ?? 1) != 1 })
        #expect(judged.allSatisfy { $0.fix.accuracyM == 10 })
    }
}
