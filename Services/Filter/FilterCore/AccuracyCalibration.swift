import FoundationEssentials
import Glibc
import Model

/// What a device's reported accuracy is worth when it says nothing: the
/// same value on every fix, as from a source without one (a GPX track
/// without `<hdop>` reads as 10 m, OwnTracks and OsmAnd without `acc`
/// likewise; 0 is unknown and reads as 30 m). Such a figure may be several
/// times the real error or a fraction of it. Taken at its word, the filter
/// follows the noise (the sweep's default noise with every fix saying
/// 10 m: the odometer +26 % without Doppler, a quarter of the clean fixes
/// refused) or cuts every corner (a good phone saying 0: −11 %, its error
/// 1.4 × the clean fixes' own).
///
/// So once a run of fixes has reported one value for a minute's worth
/// (`constantAfter`), each fix is judged with that value times the scale
/// that makes the filter's innovations as large as it predicts them:
/// learned from every fix a second or two apart that reaches the
/// innovation gate while the device moves, each one's normalized
/// innovation squared (capped, so a reflection weighs no more than a fix
/// twice the gate out) pulling the log of the scale towards where its mean
/// is that of a calibrated two-axis innovation. A device whose accuracy
/// changes is judged by what it reports, as before.
///
/// Errors that persist over seconds hide in the innovations (the filter
/// follows them), so the scale learned is raised by the square root of
/// their inflation (`NoiseCorrelation.inflation`).
public struct AccuracyCalibration: Codable, Sendable, Equatable {
    /// Fixes in a row reporting one accuracy before it is taken to say nothing:
    /// a minute at 1 Hz. (After ten, a phone whose accuracy comes in steps,
    /// 5, 10, 30, 65 m, lost a little: its Doppler drives' worst odometer 4.6 → 6.9 %.)
    static let constantAfter = 60
    /// Innovations weighed before the scale is used.
    static let learnedAfter = 20.0
    /// The learning's memory, in innovations: under a minute at 1 Hz, as a phone's accuracy moves.
    static let memory = 50.0
    /// How far the scale may go.
    static let scaleRange = 0.1...10.0
    /// An innovation counts for at most this many times the innovation gate.
    static let innovationCap = 2.0
    /// E[ln X] for X ~ χ²₂: the mean log of a calibrated two-axis innovation squared.
    static let meanLogChiSquared2 = 0.11593

    /// The accuracy every fix of the current run reported, and how many did.
    var reportedM: Double?
    var run = 0
    /// The log of the scale squared, and how many innovations it has weighed.
    var logScaleSquared = 0.0, weight = 0.0

    public init() {}

    /// Notes a fix's reported accuracy: another value ends the run and what it taught.
    mutating func note(reportedM accuracy: Double) {
        if accuracy == reportedM {
            run += 1
        } else {
            self = AccuracyCalibration()
            (reportedM, run) = (accuracy, 1)
        }
    }

    /// One fix's innovation as the gate measured it (in σ, both axes), the
    /// fix judged with `applied` times its reported accuracy. The log of the
    /// scale squared is a running mean of what each innovation says it is
    /// (an innovation judged with scale a, squared, is about k²/a² of a
    /// calibrated one's), less the calibrated mean.
    mutating func learn(mahalanobis: Double, gate: Double, applied: Double) {
        guard reportedM != nil, mahalanobis.isFinite else { return }
        let capped = min(mahalanobis, Self.innovationCap * gate)
        let says = log(max(capped * capped * applied * applied, 1e-12)) - Self.meanLogChiSquared2
        weight += 1
        let step = 1 / min(weight, Self.memory)
        logScaleSquared = min(2 * log(Self.scaleRange.upperBound), max(2 * log(floor), logScaleSquared + step * (says - logScaleSquared)))
    }

    /// Below this scale the reported accuracy's σ is under the filter's
    /// floor (`Accuracy.minimumSigmaM`), and judging with less changes nothing.
    private var floor: Double {
        max(Self.scaleRange.lowerBound, Accuracy.minimumSigmaM / (Accuracy.meters(reportedM ?? 0) * Accuracy.toSigma))
    }

    /// How many times its reported accuracy a fix is judged with: 1 while
    /// the accuracy says something, or the scale is not yet learned.
    func scale(inflation: Double) -> Double {
        guard run >= Self.constantAfter, weight >= Self.learnedAfter else { return 1 }
        return exp(logScaleSquared / 2) * inflation.squareRoot()
    }
}
