import Model

/// How well the filter did on a noisy recording whose truth is known.
public struct FilterScore: Sendable, CustomStringConvertible {
    /// The truth sampled as the fixes were: the yardstick for the accepted line.
    public var truthLengthM: Double
    /// The way the device really went (every truth point): the odometer's yardstick.
    public var drivenLengthM: Double
    public var rawLengthM: Double
    public var acceptedLengthM: Double
    /// The filter's odometer at the last accepted point.
    public var odometerM: Double
    public var jumps: Int
    public var jumpsRejected: Int
    public var cleanFixes: Int
    public var cleanRejectedAsOutliers: Int
    /// The clean raw fixes' error: the yardstick of `rmseRatio` (stricter
    /// than all raw fixes', whose jumps make it several times larger).
    public var rawRMSE: Double
    /// Every raw fix's error, jumps included.
    public var allRawRMSE: Double
    /// Every accepted point's error, jumps that got through included.
    public var filteredRMSE: Double
    /// The accepted points of clean fixes only: what the filter does to good fixes.
    public var cleanFilteredRMSE: Double
    public var accepted: Int
    public var reasons: [String: Int]

    public var lengthError: Double { acceptedLengthM / truthLengthM - 1 }
    public var odometerError: Double { odometerM / drivenLengthM - 1 }
    /// Jumps that got through, as a share of all accepted points.
    public var jumpsThrough: Double { accepted == 0 ? 0 : Double(jumps - jumpsRejected) / Double(accepted) }
    public var jumpRejection: Double { jumps == 0 ? 1 : Double(jumpsRejected) / Double(jumps) }
    public var cleanOutlierRate: Double { cleanFixes == 0 ? 0 : Double(cleanRejectedAsOutliers) / Double(cleanFixes) }
    public var rmseRatio: Double { filteredRMSE / rawRMSE }
    /// Against every raw fix, jumps included.
    public var rmseRatioToAllRaw: Double { filteredRMSE / allRawRMSE }
    /// Clean points against clean fixes: the ratio were no jump to get through.
    public var cleanRMSERatio: Double { cleanFilteredRMSE / rawRMSE }

    public var description: String {
        "length \(acceptedLengthM.fixed(0)) m vs truth \(truthLengthM.fixed(0)) m (\((lengthError * 100).fixed(1, sign: true)) %; "
            + "odometer \((odometerError * 100).fixed(1, sign: true)) %; raw \(((rawLengthM / truthLengthM - 1) * 100).fixed(0, sign: true)) %), "
            + "jumps rejected \(jumpsRejected)/\(jumps) (\((jumpRejection * 100).fixed(1)) %), "
            + "clean rejected as outliers \(cleanRejectedAsOutliers)/\(cleanFixes) (\((cleanOutlierRate * 100).fixed(2)) %), "
            + "RMSE \(filteredRMSE.fixed(1)) m vs raw \(rawRMSE.fixed(1)) m (ratio \(rmseRatio.fixed(2))), accepted \(accepted)"
            + " reasons \(reasons.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }.joined(separator: " "))"
    }

    /// Runs `core` over fixes with known truth.
    public static func score(core: FilterCore, fixes: [(fix: FilterInput, truthLat: Double, truthLon: Double, isJump: Bool)],
                             truthPath: [(lat: Double, lon: Double)], drivenLengthM: Double? = nil) -> FilterScore {
        var state = DeviceFilterState()
        var points: [(lat: Double, lon: Double)] = []
        var jumps = 0, jumpsRejected = 0, clean = 0, cleanOutliers = 0
        var rawSquares = 0.0, filteredSquares = 0.0, filteredCount = 0
        var allRawSquares = 0.0, cleanFilteredSquares = 0.0, cleanFilteredCount = 0
        var reasons: [String: Int] = [:]
        var odometer = 0.0
        // Verdicts may come one fix late (look-ahead): matched to their fix by seq.
        let inputs = fixes.enumerated().map { i, sample in
            var input = sample.fix
            input.seq = Int64(i + 1)
            return input
        }
        let verdicts = core.judgeRecording(inputs, state: &state).map { ($0.verdict, Int($0.fix.seq) - 1) }
        for (verdict, index) in verdicts {
            let sample = fixes[index]
            reasons[verdict.decision.reason, default: 0] += 1
            let rawError = Geodesy.distance(sample.fix.latitude, sample.fix.longitude, sample.truthLat, sample.truthLon)
            allRawSquares += rawError * rawError
            if sample.isJump {
                jumps += 1
                if verdict.point == nil { jumpsRejected += 1 }
            } else {
                clean += 1
                if verdict.rejection?.isOutlier == true { cleanOutliers += 1 }
                rawSquares += rawError * rawError
            }
            if let p = verdict.point {
                points.append((p.latitude, p.longitude))
                odometer = p.odometerM
                let e = Geodesy.distance(p.latitude, p.longitude, sample.truthLat, sample.truthLon)
                filteredSquares += e * e
                filteredCount += 1
                if !sample.isJump {
                    cleanFilteredSquares += e * e
                    cleanFilteredCount += 1
                }
            }
        }
        return FilterScore(
            truthLengthM: Geodesy.pathLength(truthPath), drivenLengthM: drivenLengthM ?? Geodesy.pathLength(truthPath),
            rawLengthM: Geodesy.pathLength(fixes.map { ($0.fix.latitude, $0.fix.longitude) }),
            acceptedLengthM: Geodesy.pathLength(points), odometerM: odometer, jumps: jumps, jumpsRejected: jumpsRejected,
            cleanFixes: clean, cleanRejectedAsOutliers: cleanOutliers,
            rawRMSE: (rawSquares / Double(max(1, clean))).squareRoot(),
            allRawRMSE: (allRawSquares / Double(max(1, verdicts.count))).squareRoot(),
            filteredRMSE: (filteredSquares / Double(max(1, filteredCount))).squareRoot(),
            cleanFilteredRMSE: (cleanFilteredSquares / Double(max(1, cleanFilteredCount))).squareRoot(),
            accepted: points.count, reasons: reasons)
    }
}

extension Sequence<FilterScore> {
    /// The jumps that got through, over every score.
    public var jumpsLetThrough: Int { reduce(0) { $0 + $1.jumps - $1.jumpsRejected } }
    /// The clean fixes taken for outliers, over every score.
    public var cleanFixesRefused: Int { reduce(0) { $0 + $1.cleanRejectedAsOutliers } }
}
