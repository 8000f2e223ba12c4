import Model

/// The filter's thresholds. Internal: users choose a profile, and the motion
/// state moves them; nobody tunes a number by hand.
public struct FilterProfile: Sendable, Equatable {
    public enum Name: String, Sendable, CaseIterable, Codable { case high, balanced, low }

    public var name: Name
    /// Fixes less accurate than this are refused (metres).
    public var accuracyCeilingM: Double
    /// Fastest plausible movement, after allowing for both positions' accuracy (m/s).
    public var maxSpeedMps: Double
    /// Process noise while moving (white acceleration density, m²/s³).
    public var movingQ: Double
    /// Process noise while stationary: the estimate barely moves.
    public var stationaryQ: Double
    /// Innovation gate in standard deviations (Mahalanobis distance).
    public var innovationGate: Double
    /// Stationary: fixes within this radius of the anchor (or their own accuracy) are drift.
    public var stationaryRadiusM: Double
    /// Accepted points closer than this to the previous one add nothing.
    public var minSpacingM: Double
    /// Behind the newest fix by more than this is `stale`, less is `out_of_order`.
    public var staleAfterMs: Int64
    /// Consecutive, mutually consistent outliers after which the filter trusts them and restarts.
    public var reinitializeAfter: Int
    /// How long a sparse fix far off the prediction may wait for the next
    /// fix before it is judged alone (wall clock, ms); 0 judges every fix at once.
    public var lookAheadMs: Int64 = 30_000
    public var lookAhead: Bool { lookAheadMs > 0 }
    /// How many later fixes a held fix may wait for when the first leaves
    /// it open (a jump at the held fix or at the next one); 1 decides every
    /// held fix with the next.
    public var lookAheadFixes = 2
    /// How long a fix without Doppler speed waits for later fixes to smooth
    /// its point (fix time, ms; from a sparse device at least two of its
    /// intervals, see `Smoothing.swift`); 0 places it at once.
    public var smoothingLagMs: Int64 = 10_000

    public static func named(_ name: Name) -> FilterProfile {
        switch name {
        case .high:
            FilterProfile(name: name, accuracyCeilingM: 50, maxSpeedMps: 70, movingQ: 2.0, stationaryQ: 0.002,
                          innovationGate: 4.0, stationaryRadiusM: 10, minSpacingM: 1, staleAfterMs: 30_000,
                          reinitializeAfter: 5)
        case .balanced:
            FilterProfile(name: name, accuracyCeilingM: 100, maxSpeedMps: 80, movingQ: 0.5, stationaryQ: 0.002,
                          innovationGate: 3.5, stationaryRadiusM: 15, minSpacingM: 2, staleAfterMs: 30_000,
                          reinitializeAfter: 5)
        case .low:
            FilterProfile(name: name, accuracyCeilingM: 250, maxSpeedMps: 100, movingQ: 1.0, stationaryQ: 0.002,
                          innovationGate: 5.0, stationaryRadiusM: 30, minSpacingM: 5, staleAfterMs: 30_000,
                          reinitializeAfter: 5)
        }
    }
}

/// The stable vocabulary of rejection reasons: part of the API, documented in docs/contract.md.
public enum RejectReason: String, Sendable, CaseIterable, Codable {
    /// Position not usable: non-finite, out of range, or the (0, 0) "null island".
    case invalidFix = "invalid_fix"
    /// Same time as a fix already judged for this device.
    case duplicate
    /// Older than the newest judged fix by less than the stale limit.
    case outOfOrder = "out_of_order"
    /// Older than the newest judged fix by more than the stale limit.
    case stale
    /// Exactly the previous fix's position at a later time: a cached fix re-reported.
    case repeatedPosition = "repeated_position"
    /// Reported accuracy worse than the profile's ceiling.
    case accuracyTooLow = "accuracy_too_low"
    /// Reaching it from the last accepted point needs an implausible speed.
    case impliedSpeed = "implied_speed"
    /// Too far from the Kalman prediction, given both uncertainties.
    case innovationOutlier = "innovation_outlier"
    /// The device is stationary and the fix is within its drift radius.
    case stationaryDrift = "stationary_drift"
    /// Closer to the previous accepted point than the minimum spacing.
    case minSpacing = "min_spacing"
    /// A sparse fix far from where the device must have been between the
    /// fixes before and after it: a jump, not a turn (decided one or two
    /// fixes late, see `lookAheadMs` and `lookAheadFixes`); the last held
    /// fix before silence, farther from the way before it than a turn or a
    /// stop explains; or the first fix out of a silence that the fixes after
    /// it agree against (decided once they last 8 s, or ten or twenty fixes
    /// later from a device reporting faster, and from a sparse device once
    /// three fixes the first gates do not refuse came).
    case isolatedJump = "isolated_jump"

    /// Outlier reasons: the fix is believed wrong, not merely redundant.
    public var isOutlier: Bool { self == .impliedSpeed || self == .innovationOutlier || self == .isolatedJump }
}
