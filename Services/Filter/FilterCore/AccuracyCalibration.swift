import FoundationEssentials
import Glibc
import Model

/// What a device's reported accuracy is worth when it says nothing: the
/// same value on every fix, as from a source without one (a GPX track
/// without `<hdop>` reads as 10 m, OwnTracks and OsmAnd without `acc`
/// likewise; 0 is unknown and reads as 30 m). Such a figure may be several
/// times the real error or a fraction of it. Taken at its word, the filter
/// follows the noise (the sweep's default noise with every fix saying
/// 10 m: the odometer +26 % without Doppler, 23 % of the clean fixes
/// refused) or cuts every corner (a good phone saying 0: −11 %, its error
/// 1.4 × the clean fixes' own).
///
/// So once a run of fixes has reported one value for sixty fixes
/// (`constantAfter`), each fix is judged with that value times the scale
/// that makes the filter's innovations as large as it predicts them:
/// learned from every fix a second or two apart that reaches the
/// innovation gate while the device moves, each one's normalized
/// innovation squared (capped, so a reflection weighs no more than a fix
/// twice the gate out) saying what the scale is, the log of the scale the
/// running mean of what they say. A device whose accuracy changes, or that
/// reports seconds apart, is judged by what it reports, as before.
///
/// Errors that persist over seconds hide in the innovations (the filter
/// follows them), so the scale used is the learned one times the square
/// root of their inflation (`NoiseCorrelation.inflation`).
public struct AccuracyCalibration: Codable, Sendable, Equatable {
    /// Fixes in a row reporting one accuracy before it is taken to say nothing:
    /// a minute at 1 Hz. (After ten, a phone whose accuracy comes in steps,
    /// 5, 10, 30, 65 m, lost a little: its Doppler drives' worst odometer 4.6 → 6.9 %.)
    static let constantAfter = 60
    /// Innovations weighed before the scale is used.
    static let learnedAfter = 20.0
    /// The learning's memory, in innovations: under a minute at 1 Hz, as a phone's accuracy moves.
    static let memory = 50.0
    /// How far the scale used may go.
    static let scaleRange = 0.1...10.0
    /// An innovation counts for at most this many times the innovation gate.
    static let innovationCap = 2.0
    /// E[ln X] for X ~ χ²₂ (ln 2 − γ): the mean log of a calibrated two-axis innovation squared.
    static let meanLogChiSquared2 = log(2.0) - 0.5772156649

    /// The accuracy every fix of the current run reported, and how many did.
    var reportedM: Double?
    var run = 0
    /// The log of the learned scale squared, and how many innovations it has weighed.
    var logScaleSquared = 0.0, weight = 0.0

    public init() {}

    /// Notes a new fix's reported accuracy: another value ends the run and what it taught.
    mutating func note(reportedM accuracy: Double) {
        if accuracy == reportedM {
            run += 1
        } else {
            self = AccuracyCalibration()
            (reportedM, run) = (accuracy, 1)
        }
    }

    /// One fix's innovation as the gate measured it (in σ, both axes), the
    /// fix reporting `reportedM` and judged with `judgedWith` times it. An
    /// innovation judged with scale a, squared, is about k²/a² of a
    /// calibrated one's; so each says ln k² is the log of it times a², less
    /// the calibrated mean, and the learned ln k² is the running mean of
    /// what they say. A fix of another run (held while a newer one began
    /// it) says nothing of this one.
    mutating func learn(mahalanobis: Double, gate: Double, reportedM accuracy: Double, judgedWith scale: Double) {
        guard accuracy == reportedM, mahalanobis.isFinite else { return }
        let capped = min(mahalanobis, Self.innovationCap * gate)
        // A fix exactly on its prediction would say ln 0: it says "very small".
        let said = log(max(capped * capped * scale * scale, 1e-12)) - Self.meanLogChiSquared2
        weight += 1
        let step = 1 / min(weight, Self.memory)
        let upper = 2 * log(Self.scaleRange.upperBound), lower = 2 * log(lowestUsefulScale)
        logScaleSquared = min(upper, max(lower, logScaleSquared + step * (said - logScaleSquared)))
    }

    /// Below this scale the reported accuracy's σ is under the filter's
    /// floor (`Accuracy.minimumSigmaM`), and judging with less changes
    /// nothing. Within `scaleRange`: under 0.3 m reported (an RTK receiver's
    /// 0.02 m) even the largest scale is under the floor, and it is that one.
    private var lowestUsefulScale: Double {
        let floorScale = Accuracy.minimumSigmaM / (Accuracy.meters(reportedM ?? 0) * Accuracy.toSigma)
        return min(Self.scaleRange.upperBound, max(Self.scaleRange.lowerBound, floorScale))
    }

    /// How many times its reported accuracy a fix is judged with: 1 while
    /// the accuracy says something, or the scale is not yet learned.
    func scale(inflation: Double) -> Double {
        guard run >= Self.constantAfter, weight >= Self.learnedAfter else { return 1 }
        return min(Self.scaleRange.upperBound, exp(logScaleSquared / 2) * inflation.squareRoot())
    }
}
